"""The import graph of focus_tune: no cycle (imports inside functions count too), and the
packages are layers that point one way (:data:`LAYERS`): the data at the bottom, then the
config, the math (sim, scoring), the procedure, the trial (plain PyTorch below Ray), and on
top tracking, report, predict and the commands (search, recipe, replicate); a package imports
only from its own layer and below. Ray is imported only by search/ and recipe/, MLflow only by
tracking/ and replicate/, and nothing the trial layer imports reaches either; the domain names
are imported, not repeated; no two modules share a file name."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "focus_tune"
# The top-level modules besides the entry points: plain Python below every package.
BASE = ("focus_tune.names", "focus_tune.errors", "focus_tune.quote", "focus_tune.durable", "focus_tune.arguments",
        "focus_tune.interrupt", "focus_tune.lazy")
# The packages, bottom up; a module imports from its own layer, a lower one, or BASE.
LAYERS = (
    ("focus_tune.data",),
    ("focus_tune.config",),
    ("focus_tune.sim", "focus_tune.scoring"),  # the math: plain PyTorch / numpy
    ("focus_tune.procedure",),  # the search as pure data and rules, no Ray
    ("focus_tune.trial",),  # one trial in plain PyTorch: training, checkpoints, a final's scoring; no Ray, no MLflow
    ("focus_tune.tracking", "focus_tune.report", "focus_tune.predict"),
    ("focus_tune.search", "focus_tune.recipe", "focus_tune.replicate", "focus_tune.pyfunc", "focus_tune.__main__",
     "focus_tune"),  # the commands and the Python API
)
# Imports that cross a layer upward, each with why.
UPWARD = {
    ("focus_tune.sim.model_io", "focus_tune.tracking.models"):
        "load_model(URI) downloads a logged model through tracking.download_model (inside the function: "
        "loading a folder imports no MLflow)",
}
# Who may import these third-party packages (a module or a package).
HEAVY = {
    "ray": ("focus_tune.search", "focus_tune.recipe"),
    "mlflow": ("focus_tune.tracking", "focus_tune.replicate.record", "focus_tune.replicate.analysis"),
}
# File names that every package may have: its lazy __init__, ``python -m`` entry and command line.
SHARED_FILE_NAMES = ("__init__.py", "__main__.py", "cli.py")


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in ROOT.rglob("*.py")}


def _targets(module: str, node, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        names = [f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names]
    out = []
    for name in names:
        while name not in MODULES and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in MODULES and name != module:
            out.append(name)
    return out


def _lazy(module: str, tree: ast.Module) -> set[str]:
    """A package's lazy imports: its ``_HOME`` (public name -> the module of the package that
    defines it, or a relative import such as ``..errors``, imported by ``__getattr__`` on first
    use) counts as importing those modules."""
    out = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_HOME" for t in node.targets):
            for v in node.value.values:
                level = len(v.value) - len(v.value.lstrip("."))
                base = module.split(".")[: len(module.split(".")) - max(level - 1, 0)]
                out.add(".".join([*base, v.value.lstrip(".")]))
    return out


def _graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        graph[module] = {t for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                         for t in _targets(module, node, path.name == "__init__.py")}
        if path.name == "__init__.py":
            graph[module] |= _lazy(module, tree)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _in(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_graph_is_read():
    graph = _graph()
    assert "focus_tune.search.driver" in graph and "focus_tune.procedure.plan" in graph["focus_tune.search.driver"]
    assert "focus_tune.names" in graph["focus_tune.procedure.trials"] | graph["focus_tune.procedure.plan"]


def test_no_import_cycle():
    assert _cycles(_graph()) == []


def _layer(module: str) -> int | None:
    """The layer of ``module``'s package (its longest matching prefix), None for BASE."""
    if _in(module, BASE):
        return None
    best = max(((len(p), i) for i, layer in enumerate(LAYERS) for p in layer if _in(module, (p,))), default=None)
    assert best is not None, f"{module} is in no layer of test_imports.LAYERS; add its package there"
    return best[1]


def test_layers_point_down():
    bad = [(m, d) for m, deps in _graph().items() for d in deps
           if _layer(d) is not None and (_layer(m) is None or _layer(d) > _layer(m)) and (m, d) not in UPWARD]
    assert bad == []


def test_nothing_below_the_search_imports_it():
    bad = [(m, d) for m, deps in _graph().items() for d in deps
           if _in(d, ("focus_tune.search",)) and not _in(m, ("focus_tune.search",))
           # the entry points: the CLIs, the Python API, the recipe stage (a Ray Tune search of its own)
           and not _in(m, ("focus_tune.__main__", "focus_tune.recipe")) and m != "focus_tune"]
    assert bad == []


def _absolute_imports(path: Path) -> list[str]:
    """The absolute module names a file imports (inside functions too)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.append(node.module or "")
    return names


def test_ray_and_mlflow_are_imported_where_allowed():
    bad = [(module, name) for module, path in MODULES.items() for name in _absolute_imports(path)
           if name.split(".")[0] in HEAVY and not _in(module, HEAVY[name.split(".")[0]])]
    assert bad == []


def test_the_trial_layer_reaches_no_ray_or_mlflow():
    """The trial layer runs without Ray and MLflow: neither it nor anything it imports, however
    indirectly, imports them (an :data:`UPWARD` import inside a function aside: loading a model
    from an MLflow URI is not a trial's)."""
    graph = _graph()
    reached, todo = set(), [m for m in MODULES if _in(m, ("focus_tune.trial",))]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo += [d for d in graph[module] if (module, d) not in UPWARD]
    assert "focus_tune.trial.training" in reached and "focus_tune.sim.train" in reached
    heavy = [(module, name) for module in sorted(reached) for name in _absolute_imports(MODULES[module])
             if name.split(".")[0] in HEAVY]
    assert heavy == []


def test_no_two_modules_share_a_file_name():
    counts = Counter(p.name for p in ROOT.rglob("*.py") if p.name not in SHARED_FILE_NAMES)
    assert [name for name, n in counts.items() if n > 1] == []


def test_the_top_level_is_the_base_and_the_entry_points():
    top = sorted(p.stem for p in ROOT.glob("*.py"))
    assert top == sorted(["__init__", "__main__", "pyfunc", *(m.rsplit(".", 1)[1] for m in BASE)])


# The domain names assigned in focus_tune/names.py only: every tuple the config checks a key
# against (test_the_config_checks_choices_from_names) and the model's file names.
DOMAIN_NAMES = ("FAMILIES", "FAMILY_STAGE", "PROFILES", "ENCODERS", "PRECISIONS", "EVENT_SAMPLING", "LR_SCHEDULES",
                "RACING", "JOINT_SEARCHES", "ESTIMATORS", "SELECT_KEYS", "SCENARIO_NAME")


def test_domain_names_are_defined_once():
    pattern = re.compile(rf"^\s*({'|'.join(DOMAIN_NAMES)}|ABSORBING\w*)\s*=|\"model\.json\"|\"weights\.npz\"", re.M)
    found = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if pattern.search(p.read_text())]
    assert found == ["names.py"], found


def test_the_config_checks_choices_from_names():
    """Every choice a search-space key is checked against is a tuple of focus_tune/names.py
    (SELECT_BY: the keys of names.SELECT_KEYS)."""
    tree = ast.parse((ROOT / "config" / "space.py").read_text())
    from_names = {a.asname or a.name for node in tree.body
                  if isinstance(node, ast.ImportFrom) and node.module == "names" for a in node.names}
    choices = {node.args[0].id for node in ast.walk(tree)
               if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("choice", "optional_choice")
               and isinstance(node.args[0], ast.Name)}
    assert choices and choices - {"SELECT_BY"} <= from_names and set(DOMAIN_NAMES) >= choices - {"SELECT_BY"}


def test_packages_import_lazily():
    """A package's __init__ imports none of the project's modules when it is imported (only
    through ``_HOME`` on first use), so Ray-free code can live in a package whose other
    modules import Ray."""
    eager = []
    for path in ROOT.rglob("__init__.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and (node.level, node.module) in ((2, "lazy"), (0, "focus_tune.lazy")):
                continue  # the PEP 562 helper itself, which imports nothing of the project
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("focus_tune")):
                eager.append(f"{path.relative_to(ROOT)}: {ast.unparse(node)}")
            elif isinstance(node, ast.Import) and any(a.name.startswith("focus_tune") for a in node.names):
                eager.append(f"{path.relative_to(ROOT)}: {ast.unparse(node)}")
    assert eager == []
