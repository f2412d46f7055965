"""Typed search configuration: load and validate ``search_spaces/<game>.yaml``.

A search-space file holds the paper's values at the top level and per-profile overrides:

    game: hero
    final_seeds: 3
    grid:  {lambdas: [...], k1: 3, k2: [...], constants: [...]}
    train: {lr: 5.0e-5, batch_size: 256, epochs: 200, ...}
    profiles:
      smoke: {train: {...}, grid: {...}}     # only the keys that differ
      quick: {train: {...}}
      paper: {}

``load_search_config(path, profile)`` merges the chosen profile over the top level and
returns a frozen :class:`SearchConfig`. Everything is checked once, here, at the edge: an
unknown key, a wrong type or an impossible value raises :class:`ConfigError` with the file
and the dotted field path, e.g.
``search_spaces/hero.yaml: profiles.quick.grid.lambdas[2]: -0.1 is negative; lambdas must be >= 0``.
Defaults live in the dataclasses below and in the YAML files, nowhere else.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from .atomic import short

PROFILES = ("smoke", "quick", "paper")
ENCODERS = ("resnet18", "small")
SELECTIONS = ("last", "best")
ABSORBING = ("model", "forced")  # evaluation: sample the event class from the model, or force it to repeat
PRECISIONS = ("bf16", "fp32")
SPACES_DIR = Path(__file__).resolve().parent.parent / "search_spaces"


MAX_INT = 2**31 - 1  # a larger count, size or seed is a typo (and would name files nobody can open)
MAX_K2 = 1_000_000  # entries; k2 names trials, so it stays short


class ConfigError(ValueError):
    """A search-space file (or config dict) that cannot be used; the message says where and why."""


# -- the typed configuration ------------------------------------------------------------
@dataclass(frozen=True)
class TrainConfig:
    """How one trial trains and is evaluated (paper App. C.3 for the `paper` values)."""

    lr: float  # Adam, constant, no weight decay
    batch_size: int
    epochs: int
    eval_every: int  # validation ECE every n epochs (and the selection score)
    num_samples: int  # M, Monte Carlo samples per input
    ece_bins: int  # B, equal-mass confidence bins of the ECE
    alpha: float  # level of the time-to-event interval I_alpha
    encoder: str  # "resnet18" | "small"
    embed_dim: int
    hidden: int
    selection: str  # "last" (the paper: last-epoch model) | "best" (best validation ECE)
    val_items: int | None = None  # None = the whole validation split
    test_items: int | None = None  # None = the whole test split
    # Evaluation sampling: "model" draws every entry from the model (a model that leaves
    # END / dead is scored with its leak); "forced" repeats the event once drawn (faster).
    absorbing: str = "model"
    encoder_width: int = 64  # channels of ResNet-18's first stage (64: the standard network)
    # Training arithmetic on a GPU (a CPU always trains in fp32): "bf16" autocast or "fp32"
    # (TF32 convolutions). docs/BENCHMARKS.md, "GPU", has the measurement behind the default.
    precision: str = "bf16"


@dataclass(frozen=True)
class GridConfig:
    """The paper's search grids (Sec. 5, App. C.4).

    lambdas: grid of lambda_i for stages 1..k1 and of lambda_all in the joint stage;
    k1: number of entries chosen one at a time; k2: grid of the last regularized entry;
    constants: grid of lambda_const for the constant family.
    """

    lambdas: tuple[float, ...]
    k1: int
    k2: tuple[int, ...]
    constants: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class SearchConfig:
    """One scenario (game) under one profile, resolved and validated."""

    game: str
    profile: str
    train: TrainConfig
    grid: GridConfig
    final_seeds: int = 3  # the paper retrains each family's winner with 3 seeds
    source: Path  # the file it was loaded from

    def to_dict(self) -> dict[str, Any]:
        """Plain types only (lists, str), e.g. to log as MLflow params or dump as YAML."""
        d = asdict(self)
        d["grid"] = {k: list(v) if isinstance(v, tuple) else v for k, v in d["grid"].items()}
        d["source"] = str(self.source)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "<dict>") -> "SearchConfig":
        """Inverse of :meth:`to_dict`, with the same validation as the YAML loader."""
        ctx = _Context(where)
        d = ctx.mapping(d, "")
        ctx.keys(d, "", required=("game", "profile", "train", "grid", "source"), optional=("final_seeds",))
        train = ctx.section(d["train"], "train", _TRAIN_CHECKS, _required(TrainConfig))
        grid = ctx.section(d["grid"], "grid", _GRID_CHECKS, _required(GridConfig))
        _check_grid_consistency(ctx, grid, {k: f"grid.{k}" for k in grid})
        extra = {"final_seeds": _positive_int(ctx, d["final_seeds"], "final_seeds")} if "final_seeds" in d else {}
        return cls(
            game=_game(ctx, d["game"], "game"),
            profile=_profile_name(ctx, d["profile"], "profile"),
            train=TrainConfig(**train),
            grid=GridConfig(**grid),
            source=Path(_string(ctx, d["source"], "source")),
            **extra,
        )


# -- public entry points ----------------------------------------------------------------
def space_path(game: str) -> Path:
    """The packaged search space of a game: ``<repo>/search_spaces/<game>.yaml``."""
    if not SPACES_DIR.is_dir():
        raise ConfigError(
            f"no search_spaces/ folder at {SPACES_DIR}; focus_tune expects it next to the package "
            "(install from a checkout with `pip install -e .`), or pass your own file with --space PATH"
        )
    path = SPACES_DIR / f"{game}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SPACES_DIR.glob("*.yaml"))) or "none"
        raise ConfigError(f"no search space for game {game!r} in {SPACES_DIR}; known games: {known}")
    return path


def load_search_config(path: str | os.PathLike, profile: str) -> SearchConfig:
    """Read a search-space file, apply ``profiles.<profile>`` over the top level, validate."""
    path = Path(path)
    ctx = _Context(_display(path))
    if profile not in PROFILES:
        raise ctx.error("", f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    try:
        if path.is_file() and path.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{ctx.file}: {path.stat().st_size} bytes; a search space is at most "
                              f"{MAX_FILE_BYTES} bytes")
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{ctx.file}: cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError:
        raise ConfigError(f"{ctx.file}: not a UTF-8 text file; expected a search-space YAML") from None
    raw = _parse_yaml(text, ctx.file)

    raw = ctx.mapping(raw, "")
    ctx.keys(raw, "", required=("game", "grid", "train"), optional=("final_seeds", "profiles"))
    game = _game(ctx, raw["game"], "game")
    final_seeds = _positive_int(ctx, raw["final_seeds"], "final_seeds") if "final_seeds" in raw else None

    # The top level must be complete; profiles hold only what they change. Every profile is
    # validated, not only the chosen one, so a typo in `paper` shows up in a smoke run.
    train = ctx.section(raw["train"], "train", _TRAIN_CHECKS, _required(TrainConfig))
    grid = ctx.section(raw["grid"], "grid", _GRID_CHECKS, _required(GridConfig))
    profiles = ctx.mapping(_present(raw, "profiles"), "profiles")
    ctx.keys(profiles, "profiles", required=(), optional=PROFILES)
    overrides = {}
    for name, body in profiles.items():
        at = f"profiles.{name}"
        body = ctx.mapping({} if body is None else body, at)
        ctx.keys(body, at, required=(), optional=("train", "grid"))
        overrides[name] = (
            ctx.section(_present(body, "train"), f"{at}.train", _TRAIN_CHECKS, ()),
            ctx.section(_present(body, "grid"), f"{at}.grid", _GRID_CHECKS, ()),
        )
    if profile not in overrides:
        defined = ", ".join(overrides) or "none"
        raise ConfigError(
            f"{ctx.file}: profiles: defines no profile {profile!r} (it defines: {defined}); "
            f"add `{profile}: {{}}` under profiles to use the top-level values"
        )

    train_over, grid_over = overrides[profile]
    # Remember where each merged grid value came from, so cross-field errors point at the
    # line the user has to edit.
    origin = {k: f"grid.{k}" for k in grid} | {k: f"profiles.{profile}.grid.{k}" for k in grid_over}
    grid = grid | grid_over
    _check_grid_consistency(ctx, grid, origin)
    extra = {"final_seeds": final_seeds} if final_seeds is not None else {}
    return SearchConfig(
        game=game,
        profile=profile,
        train=TrainConfig(**(train | train_over)),
        grid=GridConfig(**grid),
        source=path,
        **extra,
    )


# -- parsing ----------------------------------------------------------------------------
class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys and reads ``1e-5`` as a float.

    PyYAML follows YAML 1.1, where ``1e-5`` (no dot) is a *string*; YAML 1.2 and every
    other tool read it as a number, and so do we.
    """


MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32  # a search space nests 4 levels (profiles.quick.grid.lambdas)
MAX_NODES = 100_000  # nodes composed, aliases counted each time they are used


def _compose_node(self, parent, index):
    """SafeLoader.compose_node with a nesting limit and a budget of nodes that counts every
    use of an alias: a 20 000-deep nesting or an alias bomb is a clear error, not a
    RecursionError or gigabytes of memory."""
    self._depth = getattr(self, "_depth", 0) + 1
    try:
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        node = yaml.composer.Composer.compose_node(self, parent, index)
        self._nodes = getattr(self, "_nodes", 0) + _weight(node)
        if self._nodes > MAX_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"expands to more than {MAX_NODES} values (YAML aliases?)", node.start_mark)
        return node
    finally:
        self._depth -= 1


def _weight(node: yaml.Node) -> int:
    """How many values a node stands for once its aliases are expanded (memoised on the node)."""
    cached = getattr(node, "_weight", None)
    if cached is None:
        if isinstance(node, yaml.SequenceNode):
            cached = 1 + sum(_weight(n) for n in node.value)
        elif isinstance(node, yaml.MappingNode):
            cached = 1 + sum(_weight(k) + _weight(v) for k, v in node.value)
        else:
            cached = 1
        node._weight = cached
    return cached


_StrictLoader.compose_node = _compose_node


_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False):
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _parse_yaml(text: str, file: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
        raise ConfigError(f"{where}: malformed YAML: {short(e.problem or e.context, 200)[1:-1]}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{file}: malformed YAML: {short(str(e), 200)[1:-1]}") from e
    except RecursionError:
        raise ConfigError(f"{file}: malformed YAML: nested too deeply") from None


def _display(path: Path) -> str:
    """The path as the user would type it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# -- validation -------------------------------------------------------------------------
@dataclass(frozen=True)
class _Context:
    """Where we are: the file name that prefixes every error."""

    file: str

    def error(self, at: str, message: str) -> ConfigError:
        return ConfigError(f"{self.file}: {at}: {message}" if at else f"{self.file}: {message}")

    def mapping(self, value: Any, at: str) -> dict:
        if not isinstance(value, dict):
            what = "must be" if at else "the file must be"
            raise self.error(at, f"{what} a mapping of keys to values, got {_kind(value)}")
        return value

    def keys(self, d: Mapping, at: str, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
        allowed = (*required, *optional)
        for key in d:
            if key not in allowed:
                raise self.error(_join(at, str(key)), f"unknown key; allowed here: {', '.join(allowed)}")
        for key in required:
            if key not in d:
                raise self.error(_join(at, key), "missing (required)")

    def section(
        self, value: Any, at: str, checks: Mapping[str, Callable], required: tuple[str, ...]
    ) -> dict[str, Any]:
        """Validate a flat section (train or grid) key by key; returns normalized values."""
        d = self.mapping(value, at)
        self.keys(d, at, required=required, optional=tuple(k for k in checks if k not in required))
        return {k: checks[k](self, v, f"{at}.{k}") for k, v in d.items()}


def _present(d: Mapping, key: str) -> Any:
    """An optional section: absent or left empty (``paper:`` with nothing after it) is {}."""
    return {} if key not in d or d[key] is None else d[key]


def _join(at: str, key: str) -> str:
    return f"{at}.{key}" if at else key


def _kind(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {short(value)}"


def _required(cls) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)


def _int(ctx: _Context, v: Any, at: str) -> int:
    # bool is an int subclass in Python; `epochs: yes` is a mistake, not 1.
    if isinstance(v, bool) or not isinstance(v, int):
        raise ctx.error(at, f"expected an integer, got {_kind(v)}")
    if abs(v) > MAX_INT:
        raise ctx.error(at, f"{short(v)} is too large; expected an integer of at most {MAX_INT}")
    return v


def _positive_int(ctx: _Context, v: Any, at: str) -> int:
    v = _int(ctx, v, at)
    if v < 1:
        raise ctx.error(at, f"{v} must be >= 1")
    return v


def _optional_positive_int(ctx: _Context, v: Any, at: str) -> int | None:
    return None if v is None else _positive_int(ctx, v, at)


def _float(ctx: _Context, v: Any, at: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        hint = ""
        if isinstance(v, str):
            try:
                float(v)
                hint = " (quoted? write the number without quotes)"
            except ValueError:
                pass
        raise ctx.error(at, f"expected a number, got {_kind(v)}{hint}")
    v = float(v)
    if math.isnan(v):
        raise ctx.error(at, "is NaN; expected a number")
    return v


def _positive_float(ctx: _Context, v: Any, at: str) -> float:
    v = _float(ctx, v, at)
    if not (0 < v < math.inf):
        raise ctx.error(at, f"{v} must be a finite number > 0")
    return v


def _alpha(ctx: _Context, v: Any, at: str) -> float:
    v = _float(ctx, v, at)
    if not (0 < v < 1):
        raise ctx.error(at, f"{v} must be in (0, 1), e.g. 0.9 for the 90% interval")
    return v


def _choice(options: tuple[str, ...]) -> Callable[[_Context, Any, str], str]:
    def check(ctx: _Context, v: Any, at: str) -> str:
        if v not in options or not isinstance(v, str):
            raise ctx.error(at, f"{short(v)} is not one of {', '.join(options)}")
        return v

    return check


def _string(ctx: _Context, v: Any, at: str) -> str:
    if not isinstance(v, str) or not v:
        raise ctx.error(at, f"expected a non-empty string, got {_kind(v)}")
    return v


def _game(ctx: _Context, v: Any, at: str) -> str:
    v = _string(ctx, v, at)
    # The game names folders, experiments and trial paths.
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", v):
        raise ctx.error(at, f"{short(v)} must be 1 to 64 letters, digits, '_', '-' or '.' (it names folders)")
    return v


def _profile_name(ctx: _Context, v: Any, at: str) -> str:
    return _choice(PROFILES)(ctx, v, at)


def _grid_list(item: Callable[[_Context, Any, str], Any], what: str):
    """A non-empty list without repeats, each element checked by ``item``."""

    def check(ctx: _Context, v: Any, at: str) -> tuple:
        if not isinstance(v, list):
            raise ctx.error(at, f"expected a list of {what}, got {_kind(v)}")
        if not v:
            raise ctx.error(at, f"is empty; the grid needs at least one {what[:-1]}")
        out = tuple(item(ctx, x, f"{at}[{i}]") for i, x in enumerate(v))
        for i, x in enumerate(out):
            if x in out[:i]:
                # A repeated value would be the same candidate (and trial id) twice.
                raise ctx.error(f"{at}[{i}]", f"{x!r} repeats {at}[{out.index(x)}]; grid values must be distinct")
        return out

    return check


def _lambda(name: str) -> Callable[[_Context, Any, str], float]:
    def check(ctx: _Context, v: Any, at: str) -> float:
        v = _float(ctx, v, at)
        if v < 0:
            raise ctx.error(at, f"{v!r} is negative; {name} must be >= 0")
        if math.isinf(v):
            raise ctx.error(at, f"{v!r} is not finite; {name} must be finite")
        return v + 0.0  # -0.0 -> 0.0, so equal schedules print (and name trials) alike

    return check


def _k2(ctx: _Context, v: Any, at: str) -> int:
    v = _int(ctx, v, at)
    if not 1 <= v <= MAX_K2:
        raise ctx.error(at, f"{v} is out of range; k2 (the last regularized entry) must be in 1..{MAX_K2}")
    return v


_TRAIN_CHECKS: dict[str, Callable[[_Context, Any, str], Any]] = {
    "lr": _positive_float,
    "batch_size": _positive_int,
    "epochs": _positive_int,
    "eval_every": _positive_int,
    "num_samples": _positive_int,
    "ece_bins": _positive_int,
    "alpha": _alpha,
    "encoder": _choice(ENCODERS),
    "embed_dim": _positive_int,
    "hidden": _positive_int,
    "selection": _choice(SELECTIONS),
    "val_items": _optional_positive_int,
    "test_items": _optional_positive_int,
    "absorbing": _choice(ABSORBING),
    "encoder_width": _positive_int,
    "precision": _choice(PRECISIONS),
}
_GRID_CHECKS: dict[str, Callable[[_Context, Any, str], Any]] = {
    "lambdas": _grid_list(_lambda("lambdas"), "lambdas"),
    "k1": _positive_int,
    "k2": _grid_list(_k2, "k2 values"),
    "constants": _grid_list(_lambda("constants"), "constants"),
}
assert set(_TRAIN_CHECKS) == {f.name for f in fields(TrainConfig)}
assert set(_GRID_CHECKS) == {f.name for f in fields(GridConfig)}


def _check_grid_consistency(ctx: _Context, grid: Mapping[str, Any], origin: Mapping[str, str]) -> None:
    """Checks across grid fields, reported at the field the user set last (``origin``)."""
    k1, k2 = grid["k1"], grid["k2"]
    if k1 >= max(k2):
        # Every joint candidate would then be the stage-k1 winner again: lambda_all would
        # regularize no entry and the joint stage would choose nothing.
        raise ctx.error(
            origin["k1"],
            f"k1 = {k1} leaves no joint entries: every k2 in {list(k2)} ({origin['k2']}) is <= k1; "
            f"use k1 < {max(k2)} or add a k2 > {k1}",
        )
