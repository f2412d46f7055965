"""The main job: ``python -m focus_tune.search --game hero``.

Runs the paper's staged lambda search (stages 1..k1, the joint lambda_all x k2 grid, the
constant family, the unregularized model), retrains the three winners over three seeds,
evaluates them on the test set and writes the paper's tables and figures. Trials run on
Ray Tune (a local Ray by default, ``--address`` for a cluster), every trial is tracked in
MLflow from this driver, and the search state is saved after every trial so that
``--resume`` finishes an interrupted search without retraining what was done.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .config import PROFILES, ConfigError, SearchConfig, load_search_config, space_path
from .data import GAMES, DataError, ensure_dataset, load_dataset
from .plan import Batch, SearchPlan, StageFailed, TrialSpec

STATE_FILE = "search_state.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m focus_tune.search",
        description="Staged search of the time-dependent logit regularization of a foCus simulator.",
    )
    p.add_argument("--game", required=True, choices=GAMES, help="scenario (search_spaces/<game>.yaml)")
    p.add_argument("--profile", default="quick", choices=PROFILES,
                   help="smoke: seconds (tests); quick: a laptop (default); paper: the paper's sizes (GPUs)")
    p.add_argument("--space", type=Path, help="a search-space YAML of your own instead of the packaged one")
    p.add_argument("--data", type=Path, help="an imported dataset folder instead of the built-in data")
    p.add_argument("--data-root", type=Path, default=Path("data_cache"),
                   help="where built-in datasets are built and cached (default: ./data_cache)")
    p.add_argument("--storage", default="runs",
                   help="Ray Tune storage: a folder (default runs/), on a multi-node cluster one every node "
                        "reaches, or a URI such as s3://bucket/prefix (the search state and report then "
                        "stay in runs/ on the driver's machine)")
    p.add_argument("--address", help="an existing Ray cluster ('auto' on a cluster head); default: start a local Ray")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db in the working directory)")
    p.add_argument("--cpus-per-trial", type=float,
                   help="CPUs per trial, also its torch threads (default 1)")
    p.add_argument("--gpus-per-trial", type=float, default=0.0, help="GPUs per trial; fractions share a GPU")
    p.add_argument("--max-concurrent", type=int, default=0, help="at most this many trials at once (0: no limit)")
    p.add_argument("--seed", type=int, default=0, help="search seed; the finals use seed, seed+1, seed+2")
    p.add_argument("--resume", action="store_true", help="continue the search in its run folder")
    p.add_argument("--joint-search", choices=("grid", "optuna"), default="grid",
                   help="the joint lambda_all x k2 stage: the paper's grid, or Optuna with the same budget")
    p.add_argument("--max-retries", type=int, default=2, help="retries of a crashed trial from its checkpoint")
    p.add_argument("--dry-run", action="store_true", help="print the trial plan and its cost, run nothing")
    p.add_argument("--cluster-gpus", type=int,
                   help="with --dry-run: estimate wall time and GPU-hours on this many GPUs")
    p.add_argument("--trial-minutes", type=float,
                   help="with --cluster-gpus: minutes per training at --gpus-per-trial "
                        "(default: measured from this search's run folder, if any)")
    return p


# -- state that survives the driver -----------------------------------------------------------
@dataclass
class SearchState:
    """Everything the driver must remember to resume: saved after every finished trial."""

    path: Path
    results: dict[str, float | None] = field(default_factory=dict)  # trial id -> selection score
    checkpoints: dict[str, str] = field(default_factory=dict)  # trial id -> latest checkpoint path
    finals: dict[str, dict] = field(default_factory=dict)  # trial id -> test result
    trial_seconds: dict[str, float] = field(default_factory=dict)
    batch_seconds: list[dict] = field(default_factory=list)
    attempts: int = 0  # driver starts; names the Tune experiments of a resumed search apart
    parent_run_id: str | None = None
    fingerprint: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> "SearchState":
        raw = json.loads(path.read_text())
        return cls(path=path, **raw)

    def save(self) -> None:
        data = {k: v for k, v in self.__dict__.items() if k != "path"}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.path)  # atomic: a kill never leaves half a state file


# -- running a batch on Ray Tune ----------------------------------------------------------------
def _make_state_callback(state: SearchState, selection: str, progress: "Progress"):
    from ray.tune import Callback

    class StateCallback(Callback):
        def __init__(self):
            self.val_history: dict[str, list[float]] = {}

        def on_trial_result(self, iteration, trials, trial, result, **info):
            tid = trial.config["trial_config"]["trial"]["trial_id"]
            if "val/ece" in result:
                self.val_history.setdefault(tid, []).append(result["val/ece"])
                progress.evaluated(tid, result["epoch"], trial.config["trial_config"]["train"]["epochs"],
                                   result["val/ece"])
            if trial.checkpoint is not None:
                state.checkpoints[tid] = _checkpoint_uri(trial.checkpoint)
                state.save()

        def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
            state.checkpoints[trial.config["trial_config"]["trial"]["trial_id"]] = _checkpoint_uri(checkpoint)
            state.save()

        def on_trial_complete(self, iteration, trials, trial, **info):
            cfg = trial.config["trial_config"]
            tid = cfg["trial"]["trial_id"]
            last = trial.last_result or {}
            if last.get("failed") or "score" not in last:
                state.results[tid] = None
                progress.failed(tid, last.get("error", "no score reported"))
            else:
                hist = self.val_history.get(tid) or [last["score"]]
                score = min(hist) if selection == "best" and cfg["trial"]["stage"] != "final" else last["score"]
                state.results[tid] = float(score)
                if cfg["trial"]["stage"] == "final":
                    state.finals[tid] = {k: v for k, v in last.items()
                                         if k.startswith("test") or k.startswith("val/") or k == "epoch"}
                    state.finals[tid]["seed"] = cfg["trial"]["seed"]
            state.trial_seconds[tid] = float(last.get("time_total_s", 0.0))
            state.save()
            progress.trial_done(tid, state.results[tid])

        def on_trial_error(self, iteration, trials, trial, **info):
            tid = trial.config["trial_config"]["trial"]["trial_id"]
            state.results[tid] = None
            state.save()
            progress.failed(tid, f"crashed {trial.num_failures} times; see {trial.error_file}")

    return StateCallback()


class Progress:
    """One line per finished trial: stage, trials done / total, best so far, ETA."""

    def __init__(self, total_trainings: int, done: int):
        self.total, self.done, self.t0 = total_trainings, done, time.time()
        self.started_with = done
        self.best: dict[str, tuple[float, str]] = {}
        self.stage_of: dict[str, str] = {}

    def trial_done(self, tid: str, score: float | None) -> None:
        self.done += 1
        stage = self.stage_of.get(tid, "?")
        if score is not None and (stage not in self.best or score < self.best[stage][0]):
            self.best[stage] = (score, tid)
        rate = (time.time() - self.t0) / max(1, self.done - self.started_with)
        eta = max(0, self.total - self.done) * rate
        best = self.best.get(stage)
        best_s = f"best {stage} val ECE {best[0]:.4f} ({best[1]})" if best else "no result yet"
        score_s = "failed" if score is None else f"val ECE {score:.4f}"
        print(f"  [{stage}] {tid}: {score_s} | {self.done}/{self.total} trials | {best_s} | ETA {_fmt_s(eta)}",
              flush=True)

    def evaluated(self, tid: str, epoch: int, epochs: int, val_ece: float) -> None:
        if epoch < epochs:  # the last evaluation is printed when the trial completes
            print(f"  [{self.stage_of.get(tid, '?')}] {tid}: epoch {epoch}/{epochs}, val ECE {val_ece:.4f}",
                  flush=True)

    def failed(self, tid: str, why: str) -> None:
        print(f"  [{self.stage_of.get(tid, '?')}] {tid} FAILED: {why}", flush=True)


def _is_uri(storage: str) -> bool:
    return "://" in storage


def _run_dir(args) -> Path:
    """Where the search state and the report live: under --storage, or runs/ for a URI storage."""
    base = Path("runs") if _is_uri(args.storage) else Path(args.storage)
    return base / f"{args.game}-{args.profile}-seed{args.seed}"


def _tune_storage(storage: str, run_dir: Path) -> str:
    """Ray Tune's storage_path for this search: the run folder, or the same name under a URI."""
    if _is_uri(storage):
        return f"{storage.rstrip('/')}/{run_dir.name}"
    return str(run_dir.resolve())


def _checkpoint_uri(checkpoint) -> str:
    """A checkpoint's location that tune.Checkpoint(...) reopens: a path, or a URI off the local disk."""
    kind = checkpoint.filesystem.type_name
    return checkpoint.path if kind == "local" else f"{kind}://{checkpoint.path}"


def _fmt_s(s: float) -> str:
    return f"{int(s // 60)}m{int(s % 60):02d}s"


def _run_batch(batch: Batch, configs: list[dict] | dict, args, data_ref, state: SearchState, tracker,
               selection: str, progress: Progress, run_dir: Path, name: str, searcher=None,
               num_samples: int = 1) -> None:
    """One Tuner: a grid over the batch's trial configs, or (``searcher``) a search space."""
    from ray import tune

    from .tracking import MLflowTrialCallback
    from .trainable import run_trial

    if searcher is None:
        param_space = {"trial_config": tune.grid_search(configs)}
    else:  # the searcher puts each suggestion's trial_config into the trial's config
        param_space, configs = configs, list(searcher.candidates.values())
    # One CPU (one torch thread) per trial by default: on a laptop, trials beyond the core
    # count wait their turn, which trains faster than oversubscribing the cores (measured:
    # 10.5 vs 6.5 CPU-seconds per quick epoch with 5 trials on 2 cores).
    cpus = args.cpus_per_trial or 1.0
    for c in configs:
        c["threads"] = max(1, int(cpus))
    resources = {"cpu": cpus, "gpu": args.gpus_per_trial}
    trainable = tune.with_resources(tune.with_parameters(run_trial, data=data_ref), resources)
    tuner = tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            num_samples=num_samples,
            max_concurrent_trials=args.max_concurrent or None,
            trial_name_creator=lambda t: t.config["trial_config"]["trial"]["trial_id"],
            trial_dirname_creator=lambda t: t.config["trial_config"]["trial"]["trial_id"],
        ),
        run_config=tune.RunConfig(
            name=name,
            storage_path=_tune_storage(args.storage, run_dir),
            callbacks=[MLflowTrialCallback(tracker), _make_state_callback(state, selection, progress)],
            failure_config=tune.FailureConfig(max_failures=args.max_retries),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            verbose=0,
        ),
    )
    t0 = time.time()
    tuner.fit()
    longest = max(state.trial_seconds.get(c["trial"]["trial_id"], 0.0) for c in configs)
    state.batch_seconds.append({"name": name, "wall_s": time.time() - t0, "longest_trial_s": longest})
    state.save()


# -- the driver -----------------------------------------------------------------------------
def _quiet() -> None:
    """Keep the terminal for our progress lines: Ray's and MLflow's chatter goes to their logs."""
    import logging
    import warnings

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # no per-batch banner and TensorBoard hint
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # no TensorBoard/CSV loggers
    for name in ("mlflow", "alembic", "ray", "ray.tune"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="mlflow")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _quiet()
    try:
        return run(args)
    except (ConfigError, DataError, StageFailed, SearchError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


class SearchError(RuntimeError):
    """A search that cannot start or continue; the message says what to do."""


def run(args) -> int:
    cfg = load_search_config(args.space or space_path(args.game), args.profile)
    if cfg.game != args.game:
        raise ConfigError(f"{cfg.source}: game {cfg.game!r} does not match --game {args.game}")
    if args.dry_run:
        return _dry_run(cfg, args)

    t_start = time.time()
    data_path = args.data or ensure_dataset(args.game, args.profile, args.data_root, seed=args.seed)
    dataset = load_dataset(data_path)
    m = dataset.manifest
    print(f"focus-tune: {args.game} ({args.profile}) | data {data_path}: "
          f"{m.splits['train']}/{m.splits['val']}/{m.splits['test']} items, L={m.length}, "
          f"{m.num_classes} classes, images {tuple(m.image_shape)}", flush=True)

    run_dir = _run_dir(args)
    run_dir.mkdir(parents=True, exist_ok=True)
    state_path = run_dir / STATE_FILE
    fingerprint = {"config": cfg.to_dict(), "data": str(Path(data_path).resolve()),
                   "files": m.files, "joint_search": args.joint_search}
    fingerprint["config"]["source"] = str(fingerprint["config"]["source"])
    if state_path.exists() and not args.resume:
        raise SearchError(f"a search already exists in {run_dir}; pass --resume to continue it, "
                          f"or --storage/--seed for a new one")
    if args.resume and state_path.exists():
        state = SearchState.load(state_path)
        if state.fingerprint != json.loads(json.dumps(fingerprint)):
            raise SearchError(f"{state_path} was made with another config or dataset; "
                              f"resume with the same arguments or start a new --storage")
        print(f"resuming: {sum(v is not None for v in state.results.values())} trials already done", flush=True)
    else:
        state = SearchState(path=state_path, fingerprint=json.loads(json.dumps(fingerprint)))
        state.save()

    state.attempts += 1
    state.save()

    import ray

    from .tracking import Tracker

    tracker = Tracker(args.tracking_uri, experiment=f"focus-tune/{args.game}",
                      run_name=f"search-{args.profile}-seed{args.seed}", parent_run_id=state.parent_run_id)
    if state.parent_run_id is None:
        state.parent_run_id = tracker.parent_run_id
        state.save()
        tracker.log_search(params={"game": args.game, "profile": args.profile, "seed": args.seed,
                                   "joint_search": args.joint_search, "data": str(data_path),
                                   **{f"grid.{k}": v for k, v in cfg.to_dict()["grid"].items()},
                                   **{f"train.{k}": v for k, v in cfg.to_dict()["train"].items()}})

    plan = SearchPlan(cfg.grid, length=m.length, seed=args.seed, final_seeds=cfg.final_seeds,
                      joint_search=args.joint_search)
    expected = plan.stats(plan.dry_run(state.results))  # the grid's count, an estimate with Optuna
    progress = Progress(expected.trainings + expected.evaluations,
                        done=sum(1 for tid in state.results if not tid.startswith("joint-optuna-done")))

    ray.init(address=args.address, include_dashboard=False, log_to_driver=False,
             configure_logging=True, logging_level="ERROR")
    try:
        data_ref = _data_for_trials(dataset)
        data_info = {"num_classes": m.num_classes, "event": m.event_class,
                     "condition_class": m.condition_class, "in_channels": m.image_shape[0]}
        while batch := plan.next_batch(state.results):
            if batch.joint_space is not None:
                _run_optuna_joint(batch, cfg, args, data_ref, data_info, state, tracker, progress, run_dir)
                continue
            for t in batch.trials:
                progress.stage_of[t.trial_id] = t.stage if t.stage != "final" else f"final {t.family}"
            stages = ", ".join(batch.stages)
            print(f"batch: {stages} | {len(batch.trials)} trials ({batch.trainings} trainings)", flush=True)
            configs = [_trial_config(t, cfg, data_info, state) for t in batch.trials]
            _run_batch(batch, configs, args, data_ref, state, tracker, cfg.train.selection, progress,
                       run_dir, name=_batch_name(state, batch))
    finally:
        ray.shutdown()

    winners = plan.winners(state.results)
    report = _report(cfg, args, plan, state, dataset, run_dir, tracker, winners)
    wall = time.time() - t_start
    tracker.log_search(metrics={**report.summary, "search/wall_s": wall})
    tracker.finish()
    print(report.table)
    print(f"\nchosen time-dependent schedule: {winners['joint'].schedule}")
    print(f"report: {run_dir / 'report' / 'results.md'}  |  MLflow: mlflow ui --backend-store-uri {tracker.uri}")
    print(f"wall time {_fmt_s(wall)}")
    return 0


def _run_optuna_joint(batch, cfg, args, data_ref, data_info, state, tracker, progress, run_dir) -> None:
    """The joint stage searched by Ray Tune's OptunaSearch with the grid's training budget."""
    from ray import tune

    from .optuna_joint import DedupOptunaSearch

    js = batch.joint_space
    candidates = {(la, k2): _trial_config(js.joint_trial(la, k2), cfg, data_info, state)
                  for la in js.lambdas for k2 in js.k2}
    known = {(la, k2): score for la, k2, score in js.evaluated}
    for c in candidates.values():
        progress.stage_of[c["trial"]["trial_id"]] = "joint"
    print(f"batch: joint (Optuna) | {js.remaining} trainings of {js.budget}, "
          f"{len(known)} candidates known", flush=True)
    searcher = DedupOptunaSearch(candidates, known, metric="score", mode="min", seed=args.seed)
    space = {"lambda_all": tune.choice(list(js.lambdas)), "k2": tune.choice(list(js.k2))}
    _run_batch(batch, space, args, data_ref, state, tracker, cfg.train.selection, progress, run_dir,
               name=_batch_name(state, batch), searcher=searcher, num_samples=js.remaining)
    state.results[js.done_id] = None  # the Optuna search has used its budget
    state.save()


def _batch_name(state: SearchState, batch: Batch) -> str:
    name = f"batch-{len(state.batch_seconds) + 1}-{'-'.join(batch.stages)}"
    return name if state.attempts == 1 else f"{name}-attempt{state.attempts}"


def _trial_config(spec: TrialSpec, cfg: SearchConfig, data_info: dict, state: SearchState) -> dict:
    from .trainable import trial_config

    source = state.checkpoints.get(spec.source_trial) if spec.source_trial else None
    if spec.source_trial and source is None:
        raise SearchError(f"the checkpoint of {spec.source_trial} is missing; cannot evaluate {spec.trial_id}")
    return trial_config(spec, cfg.to_dict()["train"], data_info, evaluate_test=spec.stage == "final",
                        source_checkpoint=source, resume_from=state.checkpoints.get(spec.trial_id))


def _data_for_trials(dataset) -> dict:
    """The splits as plain numpy arrays, decoded once here and shared through Ray's object store."""
    return {
        name: {
            "images": split.images, "sequences": split.sequences, "time_to_event": split.time_to_event,
            "exact_marginals": split.exact_marginals,
        }
        for name, split in (("train", dataset.train), ("val", dataset.val), ("test", dataset.test))
    }


def _report(cfg, args, plan, state, dataset, run_dir, tracker, winners):
    from .baselines import with_baselines
    from .report import write_report

    finals = {}
    for family, by_seed in plan.finals(state.results).items():
        finals[family] = [state.finals[tid] for seed, tid in sorted(by_seed.items()) if tid in state.finals]
    seeds = sorted({seed for by_seed in plan.finals(state.results).values() for seed in by_seed})
    finals = with_baselines(finals, dataset, cfg.to_dict()["train"], seeds)  # temperature-scaled, image-blind, oracle
    schedules = {family: str(winners[stage].schedule)
                 for family, stage in (("none", "none"), ("constant", "constant"), ("time-dependent", "joint"))}
    m = dataset.manifest
    out = run_dir / "report"
    report = write_report(out, args.game, args.profile, finals, schedules, m.class_names, m.condition_class)
    _write_efficiency(state, out)
    tracker.log_artifacts(out, "report")
    tracker.log_search(tags={f"schedule.{f}": s for f, s in schedules.items()},
                       params={"chosen_schedule": schedules["time-dependent"]})
    _log_final_models(plan, state, cfg, dataset, tracker)
    return report


def _write_efficiency(state: SearchState, out: Path) -> None:
    """Search efficiency: wall time of the batches over the sum of their longest trials."""
    wall = sum(b["wall_s"] for b in state.batch_seconds)
    longest = sum(b["longest_trial_s"] for b in state.batch_seconds)
    ratio = wall / longest if longest else float("nan")
    (out / "efficiency.json").write_text(json.dumps(
        {"batches": state.batch_seconds, "wall_s": wall, "sum_longest_trial_s": longest, "ratio": ratio}, indent=1))


def _log_final_models(plan, state, cfg, dataset, tracker) -> None:
    """Each family's final model of the search seed, as an mlflow.pytorch model in the parent run."""
    import torch
    from ray import tune

    from .trainable import build_model, load_checkpoint

    m = dataset.manifest
    info = {"num_classes": m.num_classes, "in_channels": m.image_shape[0]}
    for family, by_seed in plan.finals(state.results).items():
        tid = by_seed[min(by_seed)]
        spec_source = next((t.source_trial for t in plan.all_trials(state.results) if t.trial_id == tid), None)
        path = state.checkpoints.get(spec_source or tid)
        if path is None:
            continue
        model = build_model(cfg.to_dict()["train"], info)
        model.load_state_dict(load_checkpoint(tune.Checkpoint(path))["model"])
        tracker.log_model(model.eval().to(torch.float32), name=f"model-{family}")


def _dry_run(cfg: SearchConfig, args) -> int:
    """Print the trial plan and what overlap and deduplication save; runs nothing."""
    from .data import get_spec

    length = get_spec(args.game, args.profile).length if args.data is None else load_dataset(args.data).manifest.length
    plan = SearchPlan(cfg.grid, length=length, seed=args.seed, final_seeds=cfg.final_seeds)
    print(f"focus-tune dry run: {args.game} ({args.profile}), L={length}, "
          f"{cfg.train.epochs} epochs per training, grid {cfg.to_dict()['grid']}")
    from .planner import measured_trial_minutes, plan_cost

    minutes = args.trial_minutes or measured_trial_minutes(_run_dir(args))
    print(plan_cost(plan, cfg, args.cluster_gpus, args.gpus_per_trial, minutes,
                    cpus_per_trial=args.cpus_per_trial, max_concurrent=args.max_concurrent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
