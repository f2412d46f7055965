"""The import graph of focus_tune: no cycle (imports inside functions count too), and the
layers point one way: the orchestration (search/) is on top and nothing below imports it,
the data layer and the math import no upper layer, and the domain names are imported, not
repeated."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "focus_tune"
# Modules that are the math and the data: they import no orchestration, tracking, report or predict.
LOWER = ("focus_tune.model", "focus_tune.regularization", "focus_tune.montecarlo", "focus_tune.metrics",
         "focus_tune.train", "focus_tune.evaluation", "focus_tune.device_split", "focus_tune.packed",
         "focus_tune.packed_eval", "focus_tune.names", "focus_tune.config", "focus_tune.state", "focus_tune.rates",
         "focus_tune.plan", "focus_tune.trials", "focus_tune.data")
UPPER = ("focus_tune.search", "focus_tune.replicate", "focus_tune.predict", "focus_tune.tracking", "focus_tune.report",
         "focus_tune.trainable", "focus_tune.pyfunc")


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
    defines it, imported by ``__getattr__`` on first use) counts as importing those modules."""
    out = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_HOME" for t in node.targets):
            out |= {f"{module}.{v.value}" for v in node.value.values}
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
    assert "focus_tune.search.driver" in graph and "focus_tune.plan" in graph["focus_tune.search.driver"]
    assert "focus_tune.names" in graph["focus_tune.trials"] or "focus_tune.names" in graph["focus_tune.plan"]


def test_no_import_cycle():
    assert _cycles(_graph()) == []


def test_nothing_below_the_search_imports_it():
    bad = [(m, d) for m, deps in _graph().items() for d in deps
           if _in(d, ("focus_tune.search",)) and not _in(m, ("focus_tune.search",))
           and m not in ("focus_tune.__main__", "focus_tune", "focus_tune.recipe")]  # the entry points: the CLIs, the Python API
    assert bad == []


def test_the_math_and_the_data_import_no_upper_layer():
    bad = [(m, d) for m, deps in _graph().items() if _in(m, LOWER) for d in deps if _in(d, UPPER)]
    assert bad == []


def test_domain_names_are_defined_once():
    """FAMILIES, FAMILY_STAGE, PROFILES, ENCODERS, JOINT_SEARCHES, ESTIMATORS and the model file
    names are assigned in focus_tune/names.py only."""
    pattern = re.compile(r"^(FAMILIES|FAMILY_STAGE|PROFILES|ENCODERS|JOINT_SEARCHES|ESTIMATORS)\s*=|\"model\.json\"|"
                         r"\"weights\.npz\"", re.M)
    found = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if pattern.search(p.read_text())]
    assert found == ["names.py"], found


def test_packages_import_lazily():
    """A package's __init__ imports none of the project's modules when it is imported (only
    through ``_HOME`` on first use), so Ray-free code can live in a package whose other
    modules import Ray."""
    eager = []
    for path in ROOT.rglob("__init__.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("focus_tune")):
                eager.append(f"{path.relative_to(ROOT)}: {ast.unparse(node)}")
            elif isinstance(node, ast.Import) and any(a.name.startswith("focus_tune") for a in node.names):
                eager.append(f"{path.relative_to(ROOT)}: {ast.unparse(node)}")
    assert eager == []
