"""The recipe stage: a training recipe for the data, found with Ray Tune's own search and scheduler.

``python -m focus_tune.recipe --data DIR`` (or ``--game G``) searches the unregularized model's
training recipe (learning rate and its schedule, epochs, encoder width, batch size:
``search_spaces/recipe.yaml``) with :class:`ray.tune.search.optuna.OptunaSearch` and
:class:`ray.tune.schedulers.ASHAScheduler` on the validation CE (``val/ce``, the marginal CE of
the validation split, lower is better), reported after every epoch so that ASHA can stop a
trial at its rungs. Every trial trains through the project's own code (``train.train_one_epoch``,
``evaluation.Scoring``), on a local Ray started as the search starts it
(:mod:`.ray_runtime`: token auth, no prestarted workers), tracked in MLflow as the search is (a
parent run, a child run per trial: :class:`~focus_tune.tracking.Tracker`).

The budget: ``--trials N`` suggestions, and ``--trial-minutes M``, each trial's own time: a
trial that has run M minutes stops at its next epoch (its result so far is kept, but a trial
that did not finish its epochs is not chosen while one that did exists). The whole stage is
then at most N x M / (trials at once) minutes of trials.

It writes into ``--out`` (default ``runs/<scenario>-recipe-<profile>-seed<seed>``):

* ``space.yaml``: the search space of the lambda search, the data's own (the generic one
  fitted to L for one's own data, ``focus_tune.config.generic``; the scenario's for ``--game``) with
  the recipe found as its ``--profile``'s ``train:``; ``python -m focus_tune.search --data DIR
  --space OUT/space.yaml`` takes it;
* ``report.md`` and ``report.json``: the best recipe, its regime on the validation split (CE
  below image-blind's, with the SE of the paired difference over the items, and macro AUC),
  the base profile's own recipe beside it where it was a trial, every trial;
* ``tune/recipe``: Ray Tune's experiment (``ray.tune.ExperimentAnalysis`` reads it).

The best recipe is the trial with the lowest last ``val/ce`` among those that finished their
epochs (ASHA's stopped trials were behind at a rung). Image-blind is the baselines' predictor
(``baselines.ImageBlind``, the training sequences' own per-entry frequencies), scored on the
same validation items by its exact marginals (the limit of its sampled row).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..arguments import add_flags
from ..config.fields import Context
from ..config.scenarios import ScenarioFlags, scenario_from
from ..config.space import SPACES_DIR, TrainConfig, parse_search_space, space_path
from ..config.strict_yaml import read_yaml
from ..errors import ConfigError, DataError, SearchError
from ..names import LR_SCHEDULES, PROFILES

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["RecipeResult", "RecipeSpace", "load_recipe_space", "main", "run_recipe"]

RECIPE_FILE = "recipe.yaml"
METRIC = "val/ce"
REPORT_KIND = "focus_tune.recipe"  # report.json's "kind": what search/checks.py looks for beside a --space
SEARCHED = ("lr", "lr_schedule", "epochs", "encoder_width", "batch_size")  # the recipe's keys of `train`
_KINDS = ("loguniform", "uniform", "int", "choice")
_INTS = ("epochs", "encoder_width", "batch_size")


# -- the recipe's search space: pure -------------------------------------------------------
@dataclass(frozen=True)
class RecipeSpace:
    """``search_spaces/recipe.yaml`` resolved for one profile."""

    dims: dict[str, dict[str, list]]  # key of train -> {kind: values}
    trials: int
    trial_minutes: float
    grace_period: int
    reduction_factor: float
    ce_margin_se: float
    min_auc: float
    profile: str
    source: Path

    @property
    def max_epochs(self) -> int:
        """The most epochs a trial can train (ASHA's max_t)."""
        (kind, values), = self.dims["epochs"].items()
        return int(max(values))

    def holds(self, point: Mapping[str, Any]) -> bool:
        """Whether every dimension's domain holds ``point``'s value (the base recipe as a first trial)."""
        for key, dim in self.dims.items():
            (kind, values), = dim.items()
            value = point.get(key)
            if kind == "choice":
                if value not in values:
                    return False
            elif not (isinstance(value, (int, float)) and values[0] <= value <= values[1]):
                return False
        return True

    def tune_space(self) -> dict:
        """The dimensions as Ray Tune's search space (``param_space``), which OptunaSearch converts."""
        from ray import tune

        out = {}
        for key, dim in self.dims.items():
            (kind, values), = dim.items()
            out[key] = {"loguniform": lambda v: tune.loguniform(*v), "uniform": lambda v: tune.uniform(*v),
                        "int": lambda v: tune.randint(v[0], v[1] + 1), "choice": tune.choice}[kind](values)
        return out


def load_recipe_space(path: str | os.PathLike | None, profile: str) -> RecipeSpace:
    """``path`` (default: the packaged ``search_spaces/recipe.yaml``) under ``profile``, checked:
    an unknown key or dimension, a bad bound or a value its key cannot take is a ConfigError."""
    path = Path(path) if path is not None else SPACES_DIR / RECIPE_FILE
    ctx = Context(str(path))
    raw = ctx.mapping(read_yaml(path, str(path)), "")
    ctx.keys(raw, "", required=("space", "budget", "asha", "regime"), optional=("profiles",))
    if profile not in PROFILES:
        raise ConfigError(f"{path}: unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    profiles = ctx.mapping(raw.get("profiles") or {}, "profiles")
    ctx.keys(profiles, "profiles", required=(), optional=PROFILES)
    body = ctx.mapping(profiles.get(profile) or {}, f"profiles.{profile}")
    ctx.keys(body, f"profiles.{profile}", required=(), optional=("space", "budget", "asha", "regime"))
    merged = {}
    for section in ("space", "budget", "asha", "regime"):
        top = ctx.mapping(raw[section], section)
        over = ctx.mapping(body.get(section) or {}, f"profiles.{profile}.{section}")
        merged[section] = {**top, **over}
        for key in over:
            where = f"profiles.{profile}.{section}.{key}"
            if section != "space" and key not in top:
                raise ConfigError(f"{path}: {where}: unknown key; the keys of {section}: {', '.join(top)}")
    ctx.keys(merged["space"], "space", required=("lr",), optional=SEARCHED)
    dims = {key: _dimension(path, f"space.{key}", key, dim) for key, dim in merged["space"].items()}
    ctx.keys(merged["budget"], "budget", required=("trials", "trial_minutes"), optional=())
    ctx.keys(merged["asha"], "asha", required=("grace_period", "reduction_factor"), optional=())
    ctx.keys(merged["regime"], "regime", required=("ce_margin_se", "min_auc"), optional=())
    b, a, r = merged["budget"], merged["asha"], merged["regime"]
    positive = {"budget.trials": (b["trials"], True), "budget.trial_minutes": (b["trial_minutes"], False),
                "asha.grace_period": (a["grace_period"], True), "regime.ce_margin_se": (r["ce_margin_se"], False),
                "regime.min_auc": (r["min_auc"], False), "asha.reduction_factor": (a["reduction_factor"], False)}
    for where, (value, integer) in positive.items():
        if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)) or value <= 0:
            raise ConfigError(f"{path}: {where}: {value!r} must be a positive {'integer' if integer else 'number'}")
    if a["reduction_factor"] <= 1:
        raise ConfigError(f"{path}: asha.reduction_factor: {a['reduction_factor']!r} must be above 1")
    space = RecipeSpace(dims, int(b["trials"]), float(b["trial_minutes"]), int(a["grace_period"]),
                        float(a["reduction_factor"]), float(r["ce_margin_se"]), float(r["min_auc"]), profile, path)
    if "epochs" not in dims:
        raise ConfigError(f"{path}: space.epochs: ASHA stops trials by epoch; the recipe space must search epochs")
    if space.grace_period > space.max_epochs:
        raise ConfigError(f"{path}: asha.grace_period {space.grace_period} exceeds the largest epochs "
                          f"{space.max_epochs}")
    return space


def _dimension(path: Path, where: str, key: str, dim: Any) -> dict[str, list]:
    if not isinstance(dim, dict) or len(dim) != 1 or next(iter(dim)) not in _KINDS:
        raise ConfigError(f"{path}: {where}: expected one of {{{': [...]}, {'.join(_KINDS)}: [...]}}, got {dim!r}")
    (kind, values), = dim.items()
    if not isinstance(values, list) or not values or (kind != "choice" and len(values) != 2):
        expected = "a non-empty list" if kind == "choice" else "[low, high]"
        raise ConfigError(f"{path}: {where}.{kind}: expected {expected}")
    if key == "lr_schedule":
        if kind != "choice" or any(v not in LR_SCHEDULES for v in values):
            raise ConfigError(f"{path}: {where}: a choice of {', '.join(LR_SCHEDULES)}")
        return {kind: list(values)}
    integer = key in _INTS
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)) or v <= 0:
            raise ConfigError(f"{path}: {where}.{kind}: {v!r} must be a positive {'integer' if integer else 'number'}")
    if integer and kind in ("loguniform", "uniform"):
        raise ConfigError(f"{path}: {where}: {key} is an integer: use int or choice")
    if kind != "choice" and values[0] >= values[1]:
        raise ConfigError(f"{path}: {where}.{kind}: low {values[0]} must be below high {values[1]}")
    return {kind: [float(v) if not integer else int(v) for v in values]}


def recipe_train(base: TrainConfig, recipe: Mapping[str, Any]) -> TrainConfig:
    """``base`` with the recipe's keys; a racing profile keeps its race epoch inside the epochs."""
    values = {k: (int(v) if k in _INTS else float(v) if k == "lr" else v) for k, v in recipe.items() if k in SEARCHED}
    train = dataclasses.replace(base, **values)
    if train.racing != "off" and not 1 <= train.race_at < train.epochs:
        train = dataclasses.replace(train, race_at=max(1, train.epochs // 2)) if train.epochs >= 2 else \
            dataclasses.replace(train, racing="off")
    return train


def base_recipe(base: TrainConfig, space: RecipeSpace) -> dict[str, Any]:
    """The base profile's own values of the searched keys (the hand-made recipe)."""
    return {key: getattr(base, key) for key in space.dims}


# -- the base search space of the data -----------------------------------------------------
def data_space(scenario: str, builtin: bool, length: int) -> tuple[dict, Path]:
    """The raw lambda search space of the data (as a YAML file holds it) and where it came from:
    the scenario's own file, or the generic space fitted to L for one's own data."""
    import copy

    if builtin:
        path = space_path(scenario)
        return copy.deepcopy(read_yaml(path, str(path))), path
    from ..config.generic import TEMPLATE, generic_space

    return generic_space(scenario, length), SPACES_DIR / TEMPLATE


def space_with_recipe(raw: dict, profile: str, recipe: Mapping[str, Any], base: TrainConfig) -> dict:
    """``raw`` with the recipe as ``profiles.<profile>.train``'s searched keys (and a racing race
    epoch kept inside the epochs)."""
    import copy

    out = copy.deepcopy(raw)
    profiles = out.setdefault("profiles", {})
    body = profiles.get(profile) or {}
    train = dict(body.get("train") or {})
    found = recipe_train(base, recipe)
    for key in SEARCHED:
        if key in recipe:
            train[key] = getattr(found, key)
    if found.race_at != base.race_at or found.racing != base.racing:
        train["race_at"], train["racing"] = found.race_at, found.racing
    body = {**body, "train": train}
    profiles[profile] = body
    return out


# -- the regime: pure ----------------------------------------------------------------------
def regime_of(val_ce: float, blind_ce: float, se: float, auc: float, space: RecipeSpace) -> dict:
    """The regime's checks on the validation split: CE below image-blind's by more than
    ``ce_margin_se`` SEs of the paired difference, and macro AUC at least ``min_auc``."""
    gap = blind_ce - val_ce
    checks = [{"check": f"CE below image-blind's by more than {space.ce_margin_se:g} SE", "value": gap,
               "limit": space.ce_margin_se * se, "kept": bool(math.isfinite(gap) and gap > space.ce_margin_se * se)},
              {"check": f"macro AUC at least {space.min_auc:g}", "value": auc, "limit": space.min_auc,
               "kept": bool(math.isfinite(auc) and auc >= space.min_auc)}]
    return {"in_regime": all(c["kept"] for c in checks), "checks": checks}


# -- a trial (Ray Tune's function trainable) -------------------------------------------------
def recipe_trial(config: dict, data, base: TrainConfig, info, seed: int, threads: int) -> None:
    """One recipe: the unregularized model trained by the trial layer (``trial.epochs``), its
    validation (``trial.validate``) after every epoch reported (``val/ce``, ``val/auc``,
    ``val/ece``, image-blind's CE on the same items and the paired SE of the difference)."""
    import torch
    from ray import tune

    from ..scoring.baselines import ImageBlind, completed_sequences
    from ..scoring.metrics import difference_se, item_influence
    from ..sim.adam_patch import eager_optimizers
    from ..sim.regularization import LambdaSchedule
    from ..trial import Training, TrialSplits, epochs, split_weights, validate

    eager_optimizers()
    torch.set_num_threads(max(1, threads))
    train = recipe_train(base, config)
    training = Training.start(train, info, seed)
    splits = TrialSplits(data, train, info, torch.device("cpu"))
    val = splits.val
    lambdas = LambdaSchedule.none(splits.train.sequences.shape[1]).tensor()
    labels, weights = val.sequences.numpy(), split_weights(val)
    blind = ImageBlind(completed_sequences(data.train.sequences, data.train.observed_length), len(val),
                       info.num_classes).marginals()
    blind_share = item_influence(blind, labels, "ce", train.ece_bins, weights=weights)
    for result in epochs(training, splits.train, lambdas, train):
        t0 = time.perf_counter()
        out = validate(training.model, val, train, info, seed, result["epoch"])
        share = item_influence(out["probs"], labels, "ce", train.ece_bins, weights=weights)
        result.update({"epochs": train.epochs, METRIC: float(out["marginal/ce"]),
                       "val/auc": float(out["marginal/auc"]), "val/ece": float(out["marginal/ece"]),
                       "val/blind_ce": float(blind_share.sum()),
                       "val/ce_below_blind": float(blind_share.sum() - share.sum()),
                       "val/ce_below_blind_se": difference_se(share, blind_share),
                       "time/epoch_s": result["time/train_s"] + time.perf_counter() - t0})
        tune.report(result)


def _trial_time_stopper(minutes: float):
    from ray.tune import Stopper

    class TrialMinutes(Stopper):
        """--trial-minutes: a trial stops at its first report after ``minutes`` of its own time."""

        def __init__(self, limit_s: float):
            self.limit_s = limit_s

        def __call__(self, trial_id, result) -> bool:
            return result.get("time_total_s", 0.0) >= self.limit_s

        def stop_all(self) -> bool:
            return False

    return TrialMinutes(minutes * 60.0)


def _tracking_callback(tracker, base: TrainConfig, space: RecipeSpace):
    """Tune's driver-side callback: each trial a child run of the recipe's parent run."""
    from ray.tune import Callback

    class RecipeTracking(Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            params = {"schedule": "none", **{k: trial.config[k] for k in space.dims}}
            tracker.start_child(trial.trial_id, "recipe", "none", params, recipe_train(base, trial.config))

        def on_trial_result(self, iteration, trials, trial, result, **info):
            tracker.log_result(trial.trial_id, result)

        def on_trial_complete(self, iteration, trials, trial, **info):
            last = trial.last_result or {}
            if last.get("epoch", 0) < trial.config.get("epochs", 0):
                cut = "--trial-minutes" if last.get("time_total_s", 0) >= space.trial_minutes * 60 else "ASHA"
                tracker.tag_trial(trial.trial_id, "stopped_by",
                                  f"{cut} at epoch {last.get('epoch')} of {trial.config.get('epochs')}")
            tracker.end_trial(trial.trial_id, failed=False)

        def on_trial_error(self, iteration, trials, trial, **info):
            tracker.end_trial(trial.trial_id, failed=True,
                              reason=f"trial error (Tune's error file: {trial.error_file})")

    return RecipeTracking()


# -- the stage --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecipeResult:
    """A finished recipe stage (:func:`run_recipe`)."""

    out_folder: Path  # --out: space.yaml, report.md, report.json, tune/
    space_path: Path  # space.yaml: the lambda search's space with the recipe (search --space takes it)
    report_path: Path  # report.json
    recipe: dict[str, Any]  # the best recipe: lr, lr_schedule, epochs, encoder_width, batch_size
    val_ce: float  # its validation CE (marginal, the last epoch)
    val_auc: float  # its validation macro AUC
    blind_ce: float  # image-blind's CE on the same validation items
    ce_below_blind: float  # blind_ce - val_ce
    ce_below_blind_se: float  # its SE, paired over the validation items
    in_regime: bool  # both regime checks kept (report.json's "regime")
    base: dict[str, Any]  # the base profile's own (hand-made) recipe, and its val/ce where it was a trial
    trials: "pd.DataFrame"  # a row per trial: its config, last val/ce, epochs done, seconds, how it ended
    parent_run_id: str | None  # the MLflow parent run
    searcher: str = "OptunaSearch"
    scheduler: str = "ASHAScheduler"


def run_recipe(
    *,
    data: str | Path | None = None,
    game: str | None = None,
    profile: str = "quick",
    trials: int | None = None,
    trial_minutes: float | None = None,
    recipe_space: str | Path | None = None,
    out: str | Path | None = None,
    seed: int = 0,
    data_root: str | Path = "data_cache",
    cpus_per_trial: float = 1.0,
    max_concurrent: int | None = None,
    num_cpus: int | None = None,
    address: str | None = None,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    quiet: bool = False,
) -> RecipeResult:
    """Search the training recipe of ``data`` (a dataset folder) or ``game`` (a built-in scenario's
    dataset, built under ``data_root`` as the search builds it), as ``python -m focus_tune.recipe``
    does with the same flags; returns a :class:`RecipeResult`. ``trials`` and ``trial_minutes``
    default to the recipe space's profile budget; ``num_cpus``: the CPUs of the local Ray it starts
    (default: all of this machine's); ``max_concurrent``: trials at once (default: what they hold)."""
    from ..data import BUILTIN_SCENARIOS, ensure_dataset, load_dataset
    from ..procedure.job import Splits
    from ..sim.model_io import DataInfo

    if data is not None and game is not None:
        raise SearchError("give data= (a dataset folder) or game= (a built-in scenario), one of them")
    if game is not None and game not in BUILTIN_SCENARIOS:
        raise SearchError(f"game={game!r}: choose one of {', '.join(BUILTIN_SCENARIOS)}, or pass a dataset of your "
                          "own as data=")
    scenario = scenario_from(game, data)  # --game's, or the dataset's; a SearchError when neither is given
    if profile not in PROFILES:
        raise SearchError(f"profile={profile!r}: choose one of {', '.join(PROFILES)}")
    for name, value in (("trials", trials), ("trial_minutes", trial_minutes), ("cpus_per_trial", cpus_per_trial),
                        ("max_concurrent", max_concurrent), ("num_cpus", num_cpus)):
        if value is not None and (isinstance(value, bool) or not value > 0):
            raise SearchError(f"{name}={value!r}: must be > 0")
    space = load_recipe_space(recipe_space, profile)
    space = dataclasses.replace(space, trials=int(trials or space.trials),
                                trial_minutes=float(trial_minutes or space.trial_minutes))
    builtin = data is None
    data_path = ensure_dataset(game, profile, data_root, seed=seed) if builtin else Path(data)
    dataset = load_dataset(data_path)
    m = dataset.manifest
    raw, source = data_space(scenario, builtin or m.game is not None, m.length)
    base = parse_search_space(raw, profile, source).train
    out = Path(out) if out is not None else Path("runs") / f"{scenario}-recipe-{profile}-seed{seed}"
    if (out / "report.json").exists():
        raise SearchError(f"{out}: a recipe stage already wrote its report there; pass another --out")
    out.mkdir(parents=True, exist_ok=True)
    say = (lambda *a: None) if quiet else (lambda text: print(text, flush=True))
    say(f"focus-tune recipe: {scenario} ({profile}) | data {data_path}: {m.splits['train']}/{m.splits['val']}/"
        f"{m.splits['test']} items, L={m.length} | {space.trials} trials of at most {space.trial_minutes:g} min, "
        "OptunaSearch + ASHAScheduler on val/ce")
    splits = Splits.of(dataset)
    info = DataInfo.of(m)
    hand = base_recipe(base, space)
    t0 = time.time()
    results, tracker = _fit(space, base, hand, splits, info, dataset, data_path, scenario, out, seed,
                            cpus_per_trial, max_concurrent, num_cpus, address, tracking_uri, experiment, profile)
    df = _trials_frame(results, space)
    result = _conclude(df, space, base, hand, raw, profile, out, scenario, data_path, seed, tracker,
                       time.time() - t0)
    say(f"recipe: {_recipe_text(result.recipe)} | val CE {result.val_ce:.4f}, image-blind {result.blind_ce:.4f} "
        f"(below by {result.ce_below_blind:.4f} +- {result.ce_below_blind_se:.4f}), AUC {result.val_auc:.3f}: "
        f"{'in' if result.in_regime else 'NOT in'} the regime | wrote {result.space_path} and {out / 'report.md'}")
    return result


def _fit(space, base, hand, splits, info, dataset, data_path, scenario, out, seed, cpus_per_trial, max_concurrent,
         num_cpus, address, tracking_uri, experiment, profile):
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    from ..search import ray_runtime
    from ..tracking import Tracker

    ray_runtime.quiet()
    tracker = Tracker(tracking_uri, experiment or f"focus-tune/{scenario}", f"recipe-{profile}-seed{seed}")
    tracker.client.set_tag(tracker.parent_run_id, "kind", "recipe")
    tracker.log_dataset(dataset.manifest, data_path)
    tracker.log_search(params={"recipe.profile": profile, "recipe.trials": space.trials,
                               "recipe.trial_minutes": space.trial_minutes, "recipe.searcher": "OptunaSearch",
                               "recipe.scheduler": "ASHAScheduler", "recipe.grace_period": space.grace_period,
                               "recipe.reduction_factor": space.reduction_factor,
                               **{f"recipe.space.{k}": json.dumps(v) for k, v in space.dims.items()}})
    ray_runtime.secure_local_ray(address)
    local = not ray_runtime.joins_cluster(address)
    if local:
        for key, value in ray_runtime.NO_PRESTART.items():
            os.environ.setdefault(key, value)
    cpus = num_cpus or os.cpu_count() or 1
    ray.init(address=address, num_cpus=cpus if local else None, include_dashboard=False, log_to_driver=False,
             configure_logging=True, logging_level="ERROR")
    failed = True
    try:
        held = max(1, int(cpus // cpus_per_trial)) if local else None
        slots = min(held, max_concurrent) if held and max_concurrent else held or max_concurrent
        points = [hand] if space.holds(hand) else None
        searcher = OptunaSearch(metric=METRIC, mode="min", points_to_evaluate=points, seed=seed)
        scheduler = ASHAScheduler(time_attr="epoch", max_t=space.max_epochs, grace_period=space.grace_period,
                                  reduction_factor=space.reduction_factor)
        trainable = tune.with_parameters(recipe_trial, data=splits, base=base, info=info, seed=seed,
                                         threads=max(1, int(cpus_per_trial)))
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": cpus_per_trial}),
            param_space=space.tune_space(),
            tune_config=tune.TuneConfig(metric=METRIC, mode="min", search_alg=searcher, scheduler=scheduler,
                                        num_samples=space.trials, max_concurrent_trials=slots, reuse_actors=True),
            run_config=tune.RunConfig(name="recipe", storage_path=str((out / "tune").resolve()),
                                      callbacks=[_tracking_callback(tracker, base, space),
                                                 *ray_runtime.tune_loggers(False)],
                                      stop=_trial_time_stopper(space.trial_minutes), verbose=0,
                                      failure_config=tune.FailureConfig(max_failures=0)),
        )
        ray_runtime.hide_reported_errors()
        ray_runtime.plain_trial_actors()
        results = tuner.fit()
        failed = False
    finally:
        ray.shutdown()
        if failed:
            tracker.end_running_children("FAILED", "the recipe stage stopped")
            tracker.finish(failed=True)
    return results, tracker


def _trials_frame(results, space: RecipeSpace) -> "pd.DataFrame":
    """A row per trial: its recipe, last val/ce and the regime numbers, epochs done, seconds, how it ended."""
    import pandas as pd

    rows = []
    for r in results:
        last = r.metrics or {}
        config = r.config or {}
        epochs = int(config.get("epochs", 0))
        done = int(last.get("epoch", 0) or 0)
        if r.error is not None:
            ended = "error"
        elif done >= epochs:
            ended = "finished"
        elif last.get("time_total_s", 0) >= space.trial_minutes * 60:
            ended = "trial-minutes"
        else:
            ended = "asha"
        rows.append({"trial_id": last.get("trial_id", ""), **{k: config.get(k) for k in space.dims},
                     METRIC: last.get(METRIC, math.nan), "val/auc": last.get("val/auc", math.nan),
                     "val/blind_ce": last.get("val/blind_ce", math.nan),
                     "val/ce_below_blind": last.get("val/ce_below_blind", math.nan),
                     "val/ce_below_blind_se": last.get("val/ce_below_blind_se", math.nan),
                     "epochs_done": done, "seconds": float(last.get("time_total_s", math.nan)), "ended": ended})
    return pd.DataFrame(rows)


def _recipe_text(recipe: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in recipe.items())


def _conclude(df, space, base, hand, raw, profile, out, scenario, data_path, seed, tracker, seconds) -> RecipeResult:
    import numpy as np

    from ..config.space import yaml_text
    from ..durable import write_atomic

    finished = df[(df["ended"] == "finished") & np.isfinite(df[METRIC])]
    pool = finished if len(finished) else df[np.isfinite(df[METRIC])]
    if not len(pool):
        tracker.finish(failed=True, reason="no trial reported a validation CE")
        raise SearchError(f"the recipe stage's {len(df)} trial(s) reported no validation CE (every one failed); "
                          f"Ray Tune's logs: {out / 'tune' / 'recipe'}")
    best = pool.loc[pool[METRIC].idxmin()]
    recipe = {k: (best[k].item() if hasattr(best[k], "item") else best[k]) for k in space.dims}
    regime = regime_of(float(best[METRIC]), float(best["val/blind_ce"]), float(best["val/ce_below_blind_se"]),
                       float(best["val/auc"]), space)
    with_recipe = space_with_recipe(raw, profile, recipe, base)
    parse_search_space(with_recipe, profile, out / "space.yaml")  # the lambda search will take it
    hand_row = df[np.all([df[k] == v for k, v in hand.items()], axis=0)] if len(df) else df
    base_info = {"recipe": hand, "trial_id": None, METRIC: None, "seconds": None}
    if len(hand_row):
        h = hand_row.iloc[0]
        base_info.update(trial_id=h["trial_id"], seconds=float(h["seconds"]), epochs_done=int(h["epochs_done"]),
                         ended=h["ended"], **{METRIC: float(h[METRIC]), "val/auc": float(h["val/auc"])})
    head = (f"# The lambda search space of {scenario}, with the training recipe that python -m focus_tune.recipe found "
            f"on its validation split\n# (profile {profile}: its train keys {', '.join(recipe)}; report: report.md).\n"
            f"# Run it with: python -m focus_tune.search --data {data_path} --space {out / 'space.yaml'} "
            f"--profile {profile}\n")
    import yaml

    write_atomic(out / "space.yaml", head + yaml.safe_dump(with_recipe, sort_keys=False, default_flow_style=None))
    report = {
        "kind": REPORT_KIND, "scenario": scenario, "data": str(data_path), "profile": profile, "seed": seed,
        "searcher": "ray.tune.search.optuna.OptunaSearch", "scheduler": "ray.tune.schedulers.ASHAScheduler",
        "metric": METRIC, "mode": "min", "space": {k: v for k, v in space.dims.items()},
        "budget": {"trials": space.trials, "trial_minutes": space.trial_minutes,
                   "grace_period": space.grace_period, "reduction_factor": space.reduction_factor},
        "best": {"trial_id": best["trial_id"], "recipe": recipe, METRIC: float(best[METRIC]),
                 "val/auc": float(best["val/auc"]), "val/blind_ce": float(best["val/blind_ce"]),
                 "val/ce_below_blind": float(best["val/ce_below_blind"]),
                 "val/ce_below_blind_se": float(best["val/ce_below_blind_se"]), "seconds": float(best["seconds"]),
                 "epochs_done": int(best["epochs_done"]), "ended": best["ended"]},
        "base": base_info, "regime": regime,
        "trials": json.loads(df.to_json(orient="records")),
        "trial_seconds": float(df["seconds"].sum()), "seconds": seconds,
        "ended": {k: int(v) for k, v in df["ended"].value_counts().items()},
        "space_file": str(out / "space.yaml"), "tune": str(out / "tune" / "recipe"),
        "mlflow": {"tracking_uri": tracker.uri, "parent_run_id": tracker.parent_run_id},
    }
    write_atomic(out / "report.json", json.dumps(report, indent=1))
    write_atomic(out / "report.md", _markdown(report, yaml_text))
    tracker.log_search(metrics={f"recipe/{METRIC}": report["best"][METRIC], "recipe/val/auc": report["best"]["val/auc"],
                                "recipe/val/blind_ce": report["best"]["val/blind_ce"],
                                "recipe/val/ce_below_blind": report["best"]["val/ce_below_blind"],
                                "recipe/val/ce_below_blind_se": report["best"]["val/ce_below_blind_se"],
                                "recipe/in_regime": float(regime["in_regime"])},
                       tags={"recipe.best_trial": best["trial_id"], "recipe.recipe": _recipe_text(recipe)})
    for name in ("space.yaml", "report.md", "report.json"):
        tracker.client.log_artifact(tracker.parent_run_id, str(out / name), "recipe")
    tracker.finish()
    return RecipeResult(out_folder=out, space_path=out / "space.yaml", report_path=out / "report.json",
                        recipe=recipe, val_ce=float(best[METRIC]), val_auc=float(best["val/auc"]),
                        blind_ce=float(best["val/blind_ce"]), ce_below_blind=float(best["val/ce_below_blind"]),
                        ce_below_blind_se=float(best["val/ce_below_blind_se"]), in_regime=regime["in_regime"],
                        base=base_info, trials=df, parent_run_id=tracker.parent_run_id)


def _markdown(r: dict, yaml_text) -> str:
    b, base = r["best"], r["base"]
    lines = [f"# The training recipe of {r['scenario']} ({r['profile']})", "",
             f"Searched by `python -m focus_tune.recipe` with Ray Tune's OptunaSearch (TPE, seed {r['seed']}) and "
             f"ASHAScheduler (grace {r['budget']['grace_period']} epochs, reduction factor "
             f"{r['budget']['reduction_factor']:g}) on the validation CE (`val/ce`, lower is better), the model "
             f"unregularized: {len(r['trials'])} trials of at most {r['budget']['trial_minutes']:g} min each "
             f"({', '.join(f'{n} {k}' for k, n in r['ended'].items())}), {r['trial_seconds']:.0f} trial-seconds in "
             f"all. Data: `{r['data']}`.", "",
             "| | " + " | ".join(b["recipe"]) + " | val CE | val AUC | epochs done | seconds |",
             "|---|" + "---|" * len(b["recipe"]) + "---:|---:|---:|---:|",
             "| found | " + " | ".join(f"`{yaml_text(v)}`" for v in b["recipe"].values()) +
             f" | {b['val/ce']:.4f} | {b['val/auc']:.3f} | {b['epochs_done']} | {b['seconds']:.0f} |"]
    if base.get("trial_id"):
        lines.append("| base profile's own | " + " | ".join(f"`{yaml_text(v)}`" for v in base["recipe"].values()) +
                     f" | {base['val/ce']:.4f} | {base['val/auc']:.3f} | {base['epochs_done']} | "
                     f"{base['seconds']:.0f} |")
    else:
        lines.append("| base profile's own | " + " | ".join(f"`{yaml_text(v)}`" for v in base["recipe"].values()) +
                     " | not a trial (outside the space) | | | |")
    verdict = "**in the regime**" if r["regime"]["in_regime"] else "**not in the regime**"
    lines += ["", "## The regime (validation split)", "",
              f"The found recipe's validation CE is {b['val/ce']:.4f} against image-blind's {b['val/blind_ce']:.4f} "
              f"on the same items: below it by {b['val/ce_below_blind']:.4f} ± {b['val/ce_below_blind_se']:.4f} "
              f"(SE of the paired difference over the items); macro AUC {b['val/auc']:.3f}. It is {verdict}:", ""]
    lines += [f"- {c['check']}: {c['value']:.4f} against {c['limit']:.4f}: {'kept' if c['kept'] else 'missed'}"
              for c in r["regime"]["checks"]]
    if not r["regime"]["in_regime"]:
        lines += ["", "The lambda schedule is only worth searching where the unregularized model reads the image "
                  "(docs/RESULTS.md, 'Where the effect lives'); more data, a larger budget (`--trials`, "
                  "`--trial-minutes`) or another recipe space (`--recipe-space`) may reach it."]
    lines += ["", "## Next", "", f"`python -m focus_tune.search --data {r['data']} --space {r['space_file']} "
              f"--profile {r['profile']}` runs the lambda search with this recipe (`space.yaml`: the data's own "
              "search space with the recipe as this profile's `train:`). Ray Tune's experiment: "
              f"`{r['tune']}`; MLflow: parent run `{r['mlflow']['parent_run_id']}`.", "",
              "## Trials", "", "| trial | " + " | ".join(b["recipe"]) + " | val CE | AUC | epochs | s | ended |",
              "|---|" + "---|" * len(b["recipe"]) + "---:|---:|---:|---:|---|"]
    for t in sorted(r["trials"], key=lambda t: (t["val/ce"] is None, t["val/ce"] or 0)):
        lines.append(f"| {t['trial_id']} | " + " | ".join(f"`{yaml_text(t[k])}`" for k in b["recipe"]) +
                     f" | {_num(t['val/ce'], 4)} | {_num(t['val/auc'], 3)} | {t['epochs_done']} | "
                     f"{_num(t['seconds'], 0)} | {t['ended']} |")
    return "\n".join(lines) + "\n"


def _num(value, digits: int) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


# -- the command line ---------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The recipe stage's parser: every command's --game, --profile and --data (``ScenarioFlags``),
    the flags it shares with the search (``SearchOptions``' fields of the same name) and its own;
    each flag is :func:`run_recipe`'s keyword of the same name (``--game``: ``game``)."""
    from ..search.cli import SearchOptions

    p = argparse.ArgumentParser(
        prog="python -m focus_tune.recipe",
        description="Search the unregularized model's training recipe (lr and its schedule, epochs, encoder width, "
                    "batch size) on the validation CE with Ray Tune's OptunaSearch and ASHAScheduler, and write the "
                    "lambda search's space with it (space.yaml) and the regime's report (report.md, report.json).")
    add_flags(p, ScenarioFlags, ("data", "scenario", "profile"), helps={
        "scenario": "a built-in scenario (its dataset built under --data-root); without it, --data names the scenario",
        "profile": "the base profile of the data's space (the recipe becomes its train:) and of recipe.yaml"})
    p.add_argument("--trials", type=int, help="Optuna's suggestions (default: recipe.yaml's budget.trials)")
    p.add_argument("--trial-minutes", type=float,
                   help="each trial's own time budget: it stops at its next epoch after this many minutes "
                        "(default: recipe.yaml's budget.trial_minutes)")
    p.add_argument("--recipe-space", type=Path, help="a recipe space of your own instead of search_spaces/recipe.yaml")
    p.add_argument("--out", type=Path, help="the output folder (default: runs/<scenario>-recipe-<profile>-seed<seed>)")
    add_flags(p, SearchOptions, ("seed", "data_root", "cpus_per_trial", "max_concurrent"), helps={
        "seed": "the trials' seed and the TPE sampler's",
        "max_concurrent": "at most this many trials at once (default: what the CPUs hold)"})
    p.add_argument("--num-cpus", type=int, help="CPUs of the local Ray it starts (default: all of this machine's)")
    add_flags(p, SearchOptions, ("address", "tracking_uri", "experiment"))
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m focus_tune.recipe``: the flags, then :func:`run_recipe`; an expected failure is
    one line on stderr and exit 2."""
    from ..arguments import error_exit

    args = vars(build_parser().parse_args(argv))
    try:
        run_recipe(game=args.pop("scenario"), **args)
        return 0
    except (ConfigError, DataError, SearchError) as err:
        return error_exit(err)
