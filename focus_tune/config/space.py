"""Typed search configuration: load and validate ``search_spaces/<scenario>.yaml``.

A search-space file holds the paper's values at the top level and per-profile overrides:

    scenario: hero
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
read by :mod:`focus_tune.config.strict_yaml` (no duplicate keys, bounded size, nesting and aliases),
each field checked by :mod:`focus_tune.config.fields` (a lambda by the one rule of
:func:`focus_tune.config.fields.check_lambda`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..errors import ConfigError
from ..names import ENCODERS, ESTIMATORS, EVENT_SAMPLING, LR_SCHEDULES, PRECISIONS, PROFILES, RACING, SELECT_KEYS
from ..quote import short
from .fields import (
    MAX_INT,
    MAX_K2,
    Context,
    alpha,
    choice,
    grid_list,
    k2_entry,
    lambda_weight,
    non_negative_float,
    non_negative_int,
    optional_choice,
    optional_positive_int,
    positive_float,
    positive_int,
    present,
    required_fields,
    scenario_name,
    string,
)
from .strict_yaml import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, parse_yaml, read_yaml

SELECT_BY = tuple(SELECT_KEYS)  # the validation score a stage decides by
# The packaged search spaces: in a checkout a link to the top-level search_spaces/, in an
# installed wheel the files themselves (package data).
SPACES_DIR = Path(__file__).resolve().parents[1] / "search_spaces"

__all__ = [  # the public API; the checks and the strict YAML live in config.fields and config.strict_yaml
    "ENCODERS", "ESTIMATORS", "EVENT_SAMPLING", "MAX_DEPTH", "MAX_FILE_BYTES", "MAX_INT", "MAX_K2", "MAX_NODES",
    "PRECISIONS", "PROFILES", "SELECT_BY", "SETTABLE", "SPACES_DIR", "GridConfig", "SearchConfig", "TrainConfig",
    "apply_overrides", "dump_search_config", "load_search_config", "override_text", "parse_override",
    "parse_search_space", "space_path", "yaml_text",
]


# -- the typed configuration ------------------------------------------------------------
def documented(doc: str, paper: str | None = None, **default: Any) -> Any:
    """A dataclass field with its reference text: ``doc``, what it does; ``paper``, the paper's
    value (None where the paper gives none). ``default=`` as in ``dataclasses.field``.
    docs/CONFIG.md is generated from these (``python scripts/config_doc.py``)."""
    return field(metadata={"doc": doc, "paper": paper}, **default)


@dataclass(frozen=True)
class TrainConfig:
    """How one trial trains and is evaluated (paper App. C.3 for the `paper` values)."""

    lr: float = documented("Adam's learning rate, no weight decay; the peak of `lr_schedule`.",
                           paper="1e-5; 5e-5 for H.E.R.O. (App. C.3); FaceMed's is not given (ours is an assumption)")
    batch_size: int = documented("Training items per step.", paper="256")
    epochs: int = documented("Training epochs of every trial; the model of the last epoch is scored, as in the paper.",
                             paper="200")
    eval_every: int = documented(
        "Validate (the validation score, a checkpoint) every n epochs; the last epoch is always validated, and only "
        "it decides a stage, so a larger n only makes the curves coarser. At the paper's sizes a validation costs "
        "about 4 epochs of training (docs/BENCHMARKS.md, 'GPU').", paper="not given (selection on the last epoch)")
    num_samples: int = documented("M, Monte Carlo sequences sampled per input in every test evaluation (and in "
                                  "validation unless `val_samples` is set).", paper="100")
    ece_bins: int = documented("B, equal-mass confidence bins of the ECE.", paper="not given")
    alpha: float = documented("Level of the time-to-event interval I_alpha.", paper="0.9")
    encoder: str = documented("Image encoder: `resnet18` (the paper's) or `small` (a 3-layer CNN for tests and "
                              "CPUs).", paper="resnet18")
    embed_dim: int = documented("Image embedding size, the LSTM's initial hidden state.", paper="256")
    hidden: int = documented("LSTM hidden size.", paper="256")
    val_items: int | None = documented(
        "Validate on the first n items of the validation split; null: the whole split.", paper="the whole split",
        default=None)
    test_items: int | None = documented(
        "Test on the first n items of the test split (every row of the report); null: the whole split.",
        paper="the whole split", default=None)
    event_sampling: str = documented(
        "How evaluation samples the event class: `model` draws every entry from the model (a model that leaves "
        "END / dead is scored with its leak); `forced` repeats the event once drawn (faster; exact only for a "
        "model that is absorbing itself). Its former name `absorbing` is read as this key.", paper="not given",
        default="model")
    encoder_width: int = documented("Channels of ResNet-18's first stage; 64 is the standard network.",
                                    paper="64 (the standard ResNet-18)", default=64)
    precision: str = documented(
        "Training arithmetic on a GPU (a CPU always trains in fp32): `bf16` autocast or `fp32` (TF32 "
        "convolutions); docs/BENCHMARKS.md, 'GPU', has the measurement behind the default.", paper="not given",
        default="bf16")
    estimator: str = documented(
        "Monte Carlo estimator of every evaluation: `counted` (the paper's: frequencies of the M draws) or "
        "`rao_blackwell` (the model's conditionals averaged over the same draws).", paper="counted",
        default="counted")
    select_by: str = documented(
        "The validation score a stage decides by: `ece` (the paper's), `ece_debiased` (its squared, unbiased "
        "value), or the proper scores `brier` and `ce`.", paper="ece (sequence-level marginal ECE)", default="ece")
    tie_se: float = documented(
        "Tie rule of a stage decision: the lowest score wins unless a candidate with less penalty (sum of "
        "lambda_i) scores within tie_se standard errors of it (the SE of the paired difference over the "
        "validation items); then the least penalized such candidate wins. 0: the paper's rule.",
        paper="0 (the lowest score wins)", default=1.0)
    lr_schedule: str = documented(
        "The learning rate over a training: `constant` (the paper's), `onecycle` (warm-up to lr over 30 % of the "
        "steps, cosine decay to ~0) or `decay` (constant, then a cosine to ~0 over the last 20 % of the steps).",
        paper="constant", default="constant")
    racing: str = documented(
        "Racing (focus_tune.procedure.racing): `stop` validates every candidate at epoch `race_at` as well and stops "
        "one that is behind its stage's leader by more than `race_se` standard errors (plus `tie_se` where the tie "
        "rule could still choose it); `record` validates and keeps the race epoch's scores without stopping (to "
        "measure the rule); `off`: neither.", paper="off (no racing)", default="off")
    race_at: int = documented("The race epoch; with racing on it must be in 1..epochs-1.", paper="not used",
                              default=0)
    race_se: float = documented("The race's margin, in standard errors of the paired difference.",
                                paper="not used", default=3.0)
    val_estimator: str | None = documented(
        "The validation's own Monte Carlo estimator (stage decisions, racing, the temperature-scaled baseline's "
        "fit); null: `estimator`.", paper="as the test's", default=None)
    val_samples: int | None = documented("The validation's own M; null: `num_samples`.", paper="as the test's",
                                         default=None)

    @property
    def validation(self) -> tuple[str, int]:
        """(estimator, M) of every validation."""
        return self.val_estimator or self.estimator, self.val_samples or self.num_samples


@dataclass(frozen=True)
class GridConfig:
    """The paper's search grids (Sec. 5, App. C.4)."""

    lambdas: tuple[float, ...] = documented(
        "Grid of lambda_i for the stages 1..k1, one entry at a time, and of lambda_all in the joint stage.",
        paper="[0.001, 0.005, 0.01, 0.05]")
    k1: int = documented("Entries chosen one at a time (stages 1..k1); must be below the largest k2.", paper="3")
    k2: tuple[int, ...] = documented(
        "Grid of the last regularized entry: the joint stage sets lambda_i = lambda_all for k1 < i <= k2, 0 after.",
        paper="[1, 11, 21, 51, 101]")
    constants: tuple[float, ...] = documented("Grid of lambda_const, the constant family's one weight.",
                                              paper="[0.001, 0.005, 0.01, 0.05]")


@dataclass(frozen=True, kw_only=True)
class SearchConfig:
    """One scenario under one profile, resolved and validated."""

    scenario: str = documented("The scenario: a built-in one, or one's own dataset's name; it must match --game "
                               "(or the dataset of --data). Its former name `game` is read as this key.",
                               paper="its six scenarios (Sec. 3.3) are the built-in ones")
    profile: str = documented("The profile it was resolved for: smoke, quick or paper (--profile; not a key of "
                              "the file).")
    train: TrainConfig = documented("How each trial trains and is evaluated.")
    grid: GridConfig = documented("The search grids.")
    final_seeds: int = documented("Retrainings of each family's winner, one per seed (seed, seed+1, ...); the "
                                  "families share them, so they are compared paired.", paper="3", default=3)
    source: Path = documented("The file it was loaded from (not a key of the file).")

    def to_dict(self) -> dict[str, Any]:
        """Plain types only (lists, str), e.g. to log as MLflow params or dump as YAML."""
        d = asdict(self)
        d["grid"] = {k: list(v) if isinstance(v, tuple) else v for k, v in d["grid"].items()}
        d["source"] = str(self.source)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "<dict>") -> "SearchConfig":
        """Inverse of :meth:`to_dict`, with the same validation as the YAML loader (and its
        former key names: a search's saved config from an earlier version reads)."""
        ctx = Context(where)
        d, written = ctx.current(ctx.mapping(d, ""), "")
        ctx.keys(d, "", required=("scenario", "profile", "train", "grid", "source"), optional=("final_seeds",))
        train = ctx.section(d["train"], "train", _TRAIN_CHECKS, required_fields(TrainConfig))
        grid = ctx.section(d["grid"], "grid", _GRID_CHECKS, required_fields(GridConfig))
        _check_grid_consistency(ctx, grid, {k: f"grid.{k}" for k in grid})
        _check_train_consistency(ctx, train, {})
        extra = {"final_seeds": positive_int(ctx, d["final_seeds"], "final_seeds")} if "final_seeds" in d else {}
        return cls(
            scenario=scenario_name(ctx, d["scenario"], written["scenario"]),
            profile=choice(PROFILES)(ctx, d["profile"], "profile"),
            train=TrainConfig(**train),
            grid=GridConfig(**grid),
            source=Path(string(ctx, d["source"], "source")),
            **extra,
        )


# -- public entry points ----------------------------------------------------------------
def space_path(scenario: str) -> Path:
    """The packaged search space of a built-in scenario: ``focus_tune/search_spaces/<scenario>.yaml``
    (in a checkout, ``search_spaces/<scenario>.yaml`` through the link)."""
    if not SPACES_DIR.is_dir():
        raise ConfigError(
            f"no search_spaces/ folder at {SPACES_DIR}: this focus_tune was installed without its "
            "package data; reinstall it (pip install focus-tune, or pip install -e . in a checkout), "
            "or pass your own file with --space PATH"
        )
    path = SPACES_DIR / f"{scenario}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SPACES_DIR.glob("*.yaml"))) or "none"
        raise ConfigError(f"no search space for scenario {scenario!r} in {SPACES_DIR}; known: {known}")
    return path


def load_search_config(path: str | os.PathLike, profile: str) -> SearchConfig:
    """Read a search-space file, apply ``profiles.<profile>`` over the top level, validate."""
    path = Path(path)
    ctx = Context(_display(path))
    if profile not in PROFILES:
        raise ctx.error("", f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    return parse_search_space(read_yaml(path, ctx.file), profile, path, ctx)


def parse_search_space(raw: Any, profile: str, source: Path, ctx: Context | None = None) -> SearchConfig:
    """A search space already read (a mapping as in the YAML file: ``scenario``, ``grid``,
    ``train``, ``profiles``...) resolved for ``profile`` and validated, exactly as
    :func:`load_search_config` does a file's; errors name ``ctx``'s file (default ``source``)."""
    ctx = ctx or Context(str(source))
    path = Path(source)
    if profile not in PROFILES:
        raise ctx.error("", f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    raw, written = ctx.current(ctx.mapping(raw, ""), "")
    ctx.keys(raw, "", required=("scenario", "grid", "train"), optional=("final_seeds", "profiles"))
    scenario = scenario_name(ctx, raw["scenario"], written["scenario"])
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
        scenario=scenario,
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


# -- the checks of each field (focus_tune.config.fields) ---------------------------------
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
    "event_sampling": choice(EVENT_SAMPLING),
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
# The check of every key a file holds, by section ("": the top level), for docs/CONFIG.md's "allowed".
FIELD_CHECKS = {"": {"scenario": scenario_name, "final_seeds": positive_int}, "train": _TRAIN_CHECKS,
                "grid": _GRID_CHECKS}


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
            f"1..{train['epochs'] - 1} (before the last of the {train['epochs']} epochs, {origin['epochs']}); "
            f"set race_at below epochs too, or racing off",
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


# -- overrides from the command line (--set KEY=VALUE) ------------------------------------
SETTABLE = ("final_seeds", "train", "grid")  # what --set changes; the scenario and the profile are flags


def parse_override(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` as (key, value), the value read by the search-space files' own YAML loader,
    YAML 1.2's core schema (``5``, ``1e-5``, ``[0.01, 0.1]``, ``null``, ``decay``, ``off``: a
    string); a ConfigError otherwise, also for an empty value (write ``null``) and a number in
    another notation than decimal (``0x10``, ``0o17``, ``1_0``)."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {short(text)}: expected KEY=VALUE, e.g. train.epochs=5 or grid.lambdas=[0.01,0.1]")
    if not value.strip():
        raise ConfigError(f"--set {key}: empty value; give one, or null for none (e.g. {key}=null)")
    return key, parse_yaml(value, f"--set {key}", marks="\n" in value.strip())


def apply_overrides(cfg: SearchConfig, overrides: Sequence[tuple[str, Any]]) -> SearchConfig:
    """``cfg`` with the ``--set`` overrides applied over its resolved profile: one more layer,
    checked as a profile's sections are (each value by its field's check, then the cross-field
    checks on the merged config); errors read ``--set: train.epochs: -1 must be >= 1``."""
    if not overrides:
        return cfg
    ctx = Context("--set")
    layer = _override_layer(ctx, overrides)
    train = ctx.section(present(layer, "train"), "train", _TRAIN_CHECKS, ())
    grid = ctx.section(present(layer, "grid"), "grid", _GRID_CHECKS, ())
    # A cross-field error at a key the user did not set says so: set that one too.
    here = f" (of the {cfg.profile} search space)"
    merged_train = asdict(cfg.train) | train
    _check_train_consistency(ctx, merged_train, {k: f"train.{k}" + ("" if k in train else here) for k in merged_train})
    merged_grid = asdict(cfg.grid) | grid
    _check_grid_consistency(ctx, merged_grid, {k: f"grid.{k}" + ("" if k in grid else here) for k in merged_grid})
    final_seeds = positive_int(ctx, layer["final_seeds"], "final_seeds") if "final_seeds" in layer else cfg.final_seeds
    return dataclasses.replace(cfg, train=TrainConfig(**merged_train), grid=GridConfig(**merged_grid),
                               final_seeds=final_seeds)


def _override_layer(ctx: Context, overrides: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """The overrides as a search space's mapping: ``train.epochs=5`` -> {"train": {"epochs": 5}}."""
    layer: dict[str, Any] = {}
    for key, value in overrides:
        head, _, name = key.partition(".")
        if head in ("train", "grid"):
            if not name or "." in name:
                example = {"train": "train.epochs=5", "grid": "grid.lambdas=[0.01,0.1]"}[head]
                raise ctx.error(key, f"name one key of {head}, e.g. {example}")
            into, name = layer.setdefault(head, {}), name
        elif head in SETTABLE and not name:
            into, name = layer, head
        else:
            raise ctx.error(key, "unknown key; --set takes final_seeds, train.<key> or grid.<key> "
                                 "(docs/CONFIG.md lists them)")
        if name in into:
            raise ctx.error(key, "given twice; set each key once")
        into[name] = value
    return layer


def override_text(key: str, value: Any) -> str:
    """``KEY=VALUE`` as a user types it (``grid.lambdas=[0.01, 0.1]``), for logs and reports."""
    return f"{key}={yaml_text(value)}"


def yaml_text(value: Any) -> str:
    """A config value as YAML's flow style writes it: ``null``, ``true``, ``[0.01, 0.1]``, ``1e-05``, ``decay``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_text(v) for v in value) + "]"
    return value if isinstance(value, str) else repr(value)


def dump_search_config(cfg: SearchConfig, overrides: Sequence[tuple[str, Any]] = ()) -> str:
    """The resolved config as a search-space YAML file: every field at the top level, and the
    profile it was resolved for with nothing to change (so ``--space`` on the printed file with
    the same ``--profile`` gives the same config). ``overrides``: the ``--set`` overrides that
    ``cfg`` holds, named in the header."""
    import yaml

    d = cfg.to_dict()
    body = {"scenario": d["scenario"], "final_seeds": d["final_seeds"], "grid": d["grid"], "train": d["train"],
            "profiles": {cfg.profile: {}}}
    head = f"# The {cfg.profile} search space of {cfg.scenario}, resolved (from {cfg.source}).\n"
    if overrides:
        head += f"# With --set {' --set '.join(override_text(k, v) for k, v in overrides)}\n"
    head += f"# Run it with: python -m focus_tune.search --space THIS_FILE --profile {cfg.profile} ...\n"
    class Dumper(yaml.SafeDumper):  # mappings as blocks, lists on one line: [0.005, 0.05]
        pass

    Dumper.add_representer(list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))
    return head + yaml.dump(body, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=100)
