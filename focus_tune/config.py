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
Defaults live in the dataclasses below and in the YAML files, nowhere else. The file is
read by :mod:`focus_tune.yaml_strict` (no duplicate keys, bounded size, nesting and aliases),
each field checked by :mod:`focus_tune.config_checks` (a lambda by the one rule of
:func:`focus_tune.regularization.check_lambda`).
"""

from __future__ import annotations

import os
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from .config_checks import (MAX_INT, MAX_K2, ConfigError, Context, alpha, choice, game_name, grid_list, k2_entry,
                            lambda_weight, non_negative_float, non_negative_int, optional_choice, optional_positive_int,
                            positive_float, positive_int, present, required_fields, string)
from .names import ENCODERS, LR_SCHEDULES, PROFILES, RACING, SELECT_KEYS
from .yaml_strict import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, read_yaml

SELECT_BY = tuple(SELECT_KEYS)  # the validation score a stage decides by
ABSORBING = ("model", "forced")  # evaluation: sample the event class from the model, or force it to repeat
ESTIMATORS = ("counted", "rao_blackwell")  # evaluation: the paper's counted frequencies, or the same draws Rao-Blackwellized
PRECISIONS = ("bf16", "fp32")
# The packaged search spaces: in a checkout a link to the top-level search_spaces/, in an
# installed wheel the files themselves (package data).
SPACES_DIR = Path(__file__).resolve().parent / "search_spaces"

__all__ = [  # the public API; the checks and the strict YAML live in config_checks and yaml_strict
    "ABSORBING", "ENCODERS", "ESTIMATORS", "MAX_DEPTH", "MAX_FILE_BYTES", "MAX_INT", "MAX_K2", "MAX_NODES", "PRECISIONS",
    "PROFILES", "SELECT_BY", "SPACES_DIR", "ConfigError", "GridConfig", "SearchConfig", "TrainConfig",
    "dump_search_config", "load_search_config", "parse_search_space", "space_path",
]


# -- the typed configuration ------------------------------------------------------------
@dataclass(frozen=True)
class TrainConfig:
    """How one trial trains and is evaluated (paper App. C.3 for the `paper` values)."""

    lr: float  # Adam, no weight decay; the peak of a one-cycle schedule
    batch_size: int
    epochs: int
    eval_every: int  # validation ECE every n epochs (and the selection score)
    num_samples: int  # M, Monte Carlo samples per input
    ece_bins: int  # B, equal-mass confidence bins of the ECE
    alpha: float  # level of the time-to-event interval I_alpha
    encoder: str  # "resnet18" | "small"
    embed_dim: int
    hidden: int
    val_items: int | None = None  # None = the whole validation split
    test_items: int | None = None  # None = the whole test split
    # Evaluation sampling: "model" draws every entry from the model (a model that leaves
    # END / dead is scored with its leak); "forced" repeats the event once drawn (faster).
    absorbing: str = "model"
    encoder_width: int = 64  # channels of ResNet-18's first stage (64: the standard network)
    # Training arithmetic on a GPU (a CPU always trains in fp32): "bf16" autocast or "fp32"
    # (TF32 convolutions). docs/BENCHMARKS.md, "GPU", has the measurement behind the default.
    precision: str = "bf16"
    # Monte Carlo estimator of every evaluation: "counted" (the paper's: frequencies of the M
    # draws) or "rao_blackwell" (the model's conditionals averaged over the same draws).
    estimator: str = "counted"
    # The validation score a stage decides by: the paper's "ece", "ece_debiased" (its squared,
    # unbiased value), or the proper scores "brier" and "ce".
    select_by: str = "ece"
    # Tie rule of a stage decision: the lowest score wins unless a candidate with less penalty
    # (sum of lambda_i) scores within tie_se standard errors of it (the SE of the paired
    # difference over the validation items); then the least-penalized such candidate wins.
    # 0: the paper's rule (lowest score).
    tie_se: float = 1.0
    # The learning rate over a training: "constant" (the paper's), "onecycle" (warm-up to
    # lr over 30 % of the steps, cosine decay to ~0) or "decay" (constant, then a cosine to ~0
    # over the last 20 % of the steps).
    lr_schedule: str = "constant"
    # Racing (focus_tune.racing): "stop" validates every candidate at epoch race_at as well and
    # stops one that is behind its stage's leader by more than race_se standard errors (plus
    # tie_se where the tie rule could still choose it); "record" validates and keeps the race
    # epoch's scores without stopping (to measure the rule); "off": neither.
    racing: str = "off"
    race_at: int = 0
    race_se: float = 3.0
    # The validation (stage decisions, racing, the temperature-scaled baseline's fit) may use
    # its own Monte Carlo estimator and M: null = the test's (estimator, num_samples).
    val_estimator: str | None = None
    val_samples: int | None = None

    @property
    def validation(self) -> tuple[str, int]:
        """(estimator, M) of every validation."""
        return self.val_estimator or self.estimator, self.val_samples or self.num_samples


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
        ctx = Context(where)
        d = ctx.mapping(d, "")
        ctx.keys(d, "", required=("game", "profile", "train", "grid", "source"), optional=("final_seeds",))
        train = ctx.section(d["train"], "train", _TRAIN_CHECKS, required_fields(TrainConfig))
        grid = ctx.section(d["grid"], "grid", _GRID_CHECKS, required_fields(GridConfig))
        _check_grid_consistency(ctx, grid, {k: f"grid.{k}" for k in grid})
        _check_train_consistency(ctx, train, {})
        extra = {"final_seeds": positive_int(ctx, d["final_seeds"], "final_seeds")} if "final_seeds" in d else {}
        return cls(
            game=game_name(ctx, d["game"], "game"),
            profile=choice(PROFILES)(ctx, d["profile"], "profile"),
            train=TrainConfig(**train),
            grid=GridConfig(**grid),
            source=Path(string(ctx, d["source"], "source")),
            **extra,
        )


# -- public entry points ----------------------------------------------------------------
def space_path(game: str) -> Path:
    """The packaged search space of a game: ``focus_tune/search_spaces/<game>.yaml`` (in a
    checkout, ``search_spaces/<game>.yaml`` through the link)."""
    if not SPACES_DIR.is_dir():
        raise ConfigError(
            f"no search_spaces/ folder at {SPACES_DIR}: this focus_tune was installed without its "
            "package data; reinstall it (pip install focus-tune, or pip install -e . in a checkout), "
            "or pass your own file with --space PATH"
        )
    path = SPACES_DIR / f"{game}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SPACES_DIR.glob("*.yaml"))) or "none"
        raise ConfigError(f"no search space for game {game!r} in {SPACES_DIR}; known games: {known}")
    return path


def load_search_config(path: str | os.PathLike, profile: str) -> SearchConfig:
    """Read a search-space file, apply ``profiles.<profile>`` over the top level, validate."""
    path = Path(path)
    ctx = Context(_display(path))
    if profile not in PROFILES:
        raise ctx.error("", f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    return parse_search_space(read_yaml(path, ctx.file), profile, path, ctx)


def parse_search_space(raw: Any, profile: str, source: Path, ctx: Context | None = None) -> SearchConfig:
    """A search space already read (a mapping as in the YAML file: ``game``, ``grid``,
    ``train``, ``profiles``...) resolved for ``profile`` and validated, exactly as
    :func:`load_search_config` does a file's; errors name ``ctx``'s file (default ``source``)."""
    ctx = ctx or Context(str(source))
    path = Path(source)
    if profile not in PROFILES:
        raise ctx.error("", f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    raw = ctx.mapping(raw, "")
    ctx.keys(raw, "", required=("game", "grid", "train"), optional=("final_seeds", "profiles"))
    game = game_name(ctx, raw["game"], "game")
    final_seeds = positive_int(ctx, raw["final_seeds"], "final_seeds") if "final_seeds" in raw else None

    # The top level must be complete; profiles hold only what they change. Every profile is
    # validated, not only the chosen one, so a typo in `paper` shows up in a smoke run.
    train = ctx.section(raw["train"], "train", _TRAIN_CHECKS, required_fields(TrainConfig))
    grid = ctx.section(raw["grid"], "grid", _GRID_CHECKS, required_fields(GridConfig))
    profiles = ctx.mapping(present(raw, "profiles"), "profiles")
    ctx.keys(profiles, "profiles", required=(), optional=PROFILES)
    overrides = {}
    for name, body in profiles.items():
        at = f"profiles.{name}"
        body = ctx.mapping({} if body is None else body, at)
        ctx.keys(body, at, required=(), optional=("train", "grid"))
        overrides[name] = (
            ctx.section(present(body, "train"), f"{at}.train", _TRAIN_CHECKS, ()),
            ctx.section(present(body, "grid"), f"{at}.grid", _GRID_CHECKS, ()),
        )
    if profile not in overrides:
        defined = ", ".join(overrides) or "none"
        raise ConfigError(
            f"{ctx.file}: profiles: defines no profile {profile!r} (it defines: {defined}); "
            f"add `{profile}: {{}}` under profiles to use the top-level values"
        )

    train_over, grid_over = overrides[profile]
    _check_train_consistency(ctx, train | train_over, {k: f"profiles.{profile}.train.{k}" for k in train_over})
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


def _display(path: Path) -> str:
    """The path as the user would type it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# -- the checks of each field (focus_tune.config_checks) ---------------------------------
_TRAIN_CHECKS: dict[str, Callable[[Context, Any, str], Any]] = {
    "lr": positive_float,
    "batch_size": positive_int,
    "epochs": positive_int,
    "eval_every": positive_int,
    "num_samples": positive_int,
    "ece_bins": positive_int,
    "alpha": alpha,
    "encoder": choice(ENCODERS),
    "embed_dim": positive_int,
    "hidden": positive_int,
    "val_items": optional_positive_int,
    "test_items": optional_positive_int,
    "absorbing": choice(ABSORBING),
    "encoder_width": positive_int,
    "precision": choice(PRECISIONS),
    "estimator": choice(ESTIMATORS),
    "select_by": choice(SELECT_BY),
    "tie_se": non_negative_float,
    "lr_schedule": choice(LR_SCHEDULES),
    "racing": choice(RACING),
    "race_at": non_negative_int,
    "race_se": non_negative_float,
    "val_estimator": optional_choice(ESTIMATORS),
    "val_samples": optional_positive_int,
}
_GRID_CHECKS: dict[str, Callable[[Context, Any, str], Any]] = {
    "lambdas": grid_list(lambda_weight("lambdas"), "lambdas"),
    "k1": positive_int,
    "k2": grid_list(k2_entry, "k2 values"),
    "constants": grid_list(lambda_weight("constants"), "constants"),
}
assert set(_TRAIN_CHECKS) == {f.name for f in fields(TrainConfig)}
assert set(_GRID_CHECKS) == {f.name for f in fields(GridConfig)}


TRAIN_DEFAULTS = {f.name: f.default for f in fields(TrainConfig) if f.default is not MISSING}


def _check_train_consistency(ctx: Context, train: Mapping[str, Any], origin: Mapping[str, str]) -> None:
    """Checks across train fields (the defaults filled in), reported at the field the user set
    last: ``origin`` names the profile's fields, any other is ``train.<field>``."""
    train = {**TRAIN_DEFAULTS, **train}
    origin = {k: f"train.{k}" for k in train} | dict(origin)
    if train["racing"] != "off" and not 1 <= train["race_at"] < train["epochs"]:
        raise ctx.error(
            origin["race_at"],
            f"racing {train['racing']!r} validates at epoch race_at = {train['race_at']}, which must be in "
            f"1..{train['epochs'] - 1} (before the last of the {train['epochs']} epochs, {origin['epochs']})",
        )


def _check_grid_consistency(ctx: Context, grid: Mapping[str, Any], origin: Mapping[str, str]) -> None:
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


def dump_search_config(cfg: SearchConfig) -> str:
    """The resolved config as a search-space YAML file: every field at the top level, and the
    profile it was resolved for with nothing to change (so ``--space`` on the printed file with
    the same ``--profile`` gives the same config)."""
    import yaml

    d = cfg.to_dict()
    body = {"game": d["game"], "final_seeds": d["final_seeds"], "grid": d["grid"], "train": d["train"],
            "profiles": {cfg.profile: {}}}
    head = (f"# The {cfg.profile} search space of {cfg.game}, resolved (from {cfg.source}).\n"
            f"# Run it with: python -m focus_tune.search --space THIS_FILE --profile {cfg.profile} ...\n")
    class Dumper(yaml.SafeDumper):  # mappings as blocks, lists on one line: [0.005, 0.05]
        pass

    Dumper.add_representer(list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))
    return head + yaml.dump(body, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=100)
