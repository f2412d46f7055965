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
import secrets
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .atomic import fsync_path, short, write_atomic
from .cli import OneLineParser, non_negative_int, non_negative_number, positive_int, positive_number
from .config import PROFILES, ConfigError, SearchConfig, load_search_config, space_path
from .data import GAMES, DataError, ensure_dataset, load_dataset
from .interrupt import EXIT_INTERRUPTED, INTERRUPT, Interrupted
from .plan import Batch, SearchPlan, StageFailed, TrialSpec
from .progress import Progress
from .progress import fmt_s as _fmt_s

STATE_FILE = "search_state.json"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
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
    p.add_argument("--cpus-per-trial", type=positive_number,
                   help="CPUs per trial, also its torch threads (default 1)")
    p.add_argument("--gpus-per-trial", type=non_negative_number, default=0.0,
                   help="GPUs per trial; fractions below 1 share a GPU")
    p.add_argument("--max-concurrent", type=positive_int, help="at most this many trials at once (default: no limit)")
    p.add_argument("--wait-for-resources", action="store_true",
                   help="start even when no node has the CPUs/GPUs a trial needs, and wait for an autoscaler "
                        "to add one (default: fail at once, naming what the cluster has)")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="search seed; the finals use seed, seed+1, seed+2")
    p.add_argument("--resume", action="store_true", help="continue the search in its run folder")
    p.add_argument("--joint-search", choices=("grid", "optuna"), default="grid",
                   help="the joint lambda_all x k2 stage: the paper's grid, or Optuna with the same budget")
    p.add_argument("--max-retries", type=non_negative_int, default=2,
                   help="retries of a crashed trial from its checkpoint")
    p.add_argument("--dry-run", action="store_true", help="print the trial plan and its cost, run nothing")
    p.add_argument("--cluster-gpus", type=positive_int,
                   help="with --dry-run: estimate wall time and GPU-hours on this many GPUs")
    p.add_argument("--trial-minutes", type=positive_number,
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
        what = None
        try:
            raw = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
            what = f"unreadable ({short(str(err), 100)[1:-1]})"
        else:
            names = {f for f in cls.__dataclass_fields__ if f != "path"}
            kinds = {"results": dict, "checkpoints": dict, "finals": dict, "trial_seconds": dict,
                     "batch_seconds": list, "attempts": int, "fingerprint": dict}
            if not isinstance(raw, dict) or set(raw) - names:
                what = f"not a search state (fields {short(sorted(raw) if isinstance(raw, dict) else raw)})"
            else:
                wrong = [k for k, t in kinds.items() if k in raw and not isinstance(raw[k], t)]
                if wrong:
                    what = f"field(s) {', '.join(wrong)} of the wrong type"
        if what:
            raise SearchError(f"{path}: {what}; it cannot be resumed: move it away to start the search again")
        return cls(path=path, **raw)

    def save(self) -> None:
        data = {k: v for k, v in self.__dict__.items() if k != "path"}
        write_atomic(self.path, json.dumps(data, indent=1))  # atomic and durable (fsync file and folder)


# -- running a batch on Ray Tune ----------------------------------------------------------------
def _make_state_callback(state: SearchState, selection: str, progress: Progress):
    from ray.tune import Callback

    class StateCallback(Callback):
        def __init__(self):
            self.val_history: dict[str, list[float]] = {}

        def on_step_end(self, iteration, trials, **info):
            progress.tick()  # the live bar's clock and ETA, between results

        def on_trial_start(self, iteration, trials, trial, **info):
            progress.started(trial.config["trial_config"]["trial"]["trial_id"])

        def on_trial_result(self, iteration, trials, trial, result, **info):
            tid = trial.config["trial_config"]["trial"]["trial_id"]
            epochs = trial.config["trial_config"]["train"]["epochs"]
            if "epoch" in result:
                progress.epoch(tid, result["epoch"], epochs, result.get("time_total_s"))
            if "val/ece" in result:
                self.val_history.setdefault(tid, []).append(result["val/ece"])
                progress.evaluated(tid, result["epoch"], epochs, result["val/ece"])
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
            progress.trial_done(tid, state.results[tid], state.trial_seconds[tid])

        def on_trial_error(self, iteration, trials, trial, **info):
            tid = trial.config["trial_config"]["trial"]["trial_id"]
            state.results[tid] = None
            state.save()
            progress.failed(tid, f"crashed {trial.num_failures} times; see {trial.error_file}")
            progress.trial_done(tid, None)

    return StateCallback()


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


def _interrupt_stopper():
    from ray.tune import Stopper

    class StopOnInterrupt(Stopper):
        """Ends every trial of the batch at the next step of Tune's loop once Ctrl-C was pressed."""

        def __call__(self, trial_id, result) -> bool:
            return False

        def stop_all(self) -> bool:
            # Looked up at call time: Tune pickles its stopper, and an Event cannot be pickled.
            from focus_tune.interrupt import INTERRUPT

            return INTERRUPT.event.is_set()

    return StopOnInterrupt()


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
            max_concurrent_trials=args.max_concurrent,
            trial_name_creator=lambda t: t.config["trial_config"]["trial"]["trial_id"],
            trial_dirname_creator=lambda t: t.config["trial_config"]["trial"]["trial_id"],
        ),
        run_config=tune.RunConfig(
            name=name,
            storage_path=_tune_storage(args.storage, run_dir),
            callbacks=[MLflowTrialCallback(tracker), _make_state_callback(state, selection, progress)],
            failure_config=tune.FailureConfig(max_failures=args.max_retries),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            stop=_interrupt_stopper(),
            verbose=0,
        ),
    )
    t0 = time.time()
    tuner.fit()
    INTERRUPT.check()  # an interrupted batch is not a measured one
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


class SearchError(RuntimeError):
    """A search that cannot start or continue; the message says what to do."""




def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _quiet()
    try:
        return run(args)
    except Interrupted:
        return EXIT_INTERRUPTED
    except (ConfigError, DataError, StageFailed, SearchError) as err:
        text = " ".join(str(err).split())
        print(f"error: {text if len(text) <= 600 else text[:597] + '...'}", file=sys.stderr)
        return 2


@dataclass
class _Prepared:
    """Everything checked before the search touches the disk, MLflow or Ray."""

    cfg: SearchConfig
    data_path: Path
    dataset: object
    arrays: dict
    run_dir: Path
    created: list[Path]  # folders made by the storage check, removed again if the search does not start
    fingerprint: dict


def _check_flags(args) -> None:
    if args.gpus_per_trial > 1 and args.gpus_per_trial != int(args.gpus_per_trial):
        raise SearchError(f"--gpus-per-trial {args.gpus_per_trial:g}: above 1, a trial takes whole GPUs "
                          "(Ray shares only fractions below 1)")
    if not args.dry_run and (args.cluster_gpus is not None or args.trial_minutes is not None):
        raise SearchError("--cluster-gpus and --trial-minutes estimate costs: use them with --dry-run")
    if args.cluster_gpus is not None and args.gpus_per_trial > args.cluster_gpus:
        raise SearchError(f"--gpus-per-trial {args.gpus_per_trial:g} is more than --cluster-gpus {args.cluster_gpus}: "
                          "no trial could ever start")
    if args.data is not None and not args.data.is_dir():
        raise SearchError(f"--data {args.data}: not a folder; expected a dataset folder "
                          "(python -m focus_tune.data import-... --out FOLDER)")


def _check_game(manifest, args, data_path) -> None:
    if manifest.game != args.game:
        raise DataError(f"--data {data_path}: holds a dataset of game {short(manifest.game)}, not --game {args.game}")


def _check_storage(args, run_dir: Path) -> list[Path]:
    """Make the run folder and prove it writable; returns the folders created here (deepest first)."""
    base = run_dir.parent
    if base.exists() and not base.is_dir():
        raise SearchError(f"--storage {short(str(base))[1:-1]}: is a file; expected a folder for the search runs")
    created = [d for d in (run_dir, *run_dir.parents) if not d.exists()]
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise SearchError(f"--storage {short(args.storage)[1:-1]}: cannot write {run_dir} ({err.strerror or err}); "
                          "choose a folder you can write") from None
    return created


def _prepare(args) -> _Prepared:
    """Validate the flags, the config, the dataset (its contents too) and the storage."""
    _check_flags(args)
    cfg = load_search_config(args.space or space_path(args.game), args.profile)
    if cfg.game != args.game:
        raise ConfigError(f"{cfg.source}: game {short(cfg.game)} does not match --game {args.game}")
    data_path = args.data or ensure_dataset(args.game, args.profile, args.data_root, seed=args.seed)
    dataset = load_dataset(data_path)
    _check_game(dataset.manifest, args, data_path)
    arrays = _data_for_trials(dataset)  # decodes every split: class ids, time to event, marginals
    run_dir = _run_dir(args)
    m = dataset.manifest
    fingerprint = {"config": cfg.to_dict(), "data": str(Path(data_path).resolve()),
                   "files": m.files, "joint_search": args.joint_search}
    fingerprint["config"]["source"] = str(fingerprint["config"]["source"])
    state_path = run_dir / STATE_FILE
    if state_path.exists() and not args.resume:
        raise SearchError(f"a search already exists in {run_dir}; pass --resume to continue it, "
                          f"or --storage/--seed for a new one")
    if args.resume and state_path.exists():
        state = SearchState.load(state_path)
        if state.fingerprint != json.loads(json.dumps(fingerprint)):
            raise SearchError(f"{state_path} was made with another config or dataset; "
                              f"resume with the same arguments or start a new --storage")
    created = _check_storage(args, run_dir)  # last: nothing is left on disk when a check above fails
    return _Prepared(cfg, Path(data_path), dataset, arrays, run_dir, created, json.loads(json.dumps(fingerprint)))


def _secure_local_ray(args) -> None:
    """A local Ray requires a token made for this search: its GCS, raylet and workers listen
    on every interface (Ray 2.60 has no loopback-only switch), and with token authentication
    a stranger who reaches those ports is refused. The token lives only in this process's
    environment (inherited by the Ray processes it starts); nothing is written to ~/.ray."""
    if args.address or os.environ.get("RAY_ADDRESS"):
        return  # a cluster's own authentication applies (cluster.yaml: token auth everywhere)
    if "ray._raylet" in sys.modules and os.environ.get("RAY_AUTH_MODE") != "token":
        return  # Ray was imported before (an embedding program): its auth mode is fixed already
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)


def _start_ray(args) -> None:
    """ray.init for the search: the cluster at --address, or a local Ray that requires a token."""
    _secure_local_ray(args)
    import ray

    ray.init(address=args.address, include_dashboard=False, log_to_driver=False,
             configure_logging=True, logging_level="ERROR")


def _check_resources(args) -> None:
    """Fail fast when no node can ever hold one trial, naming what the cluster has."""
    import ray

    cpus, gpus = args.cpus_per_trial or 1.0, args.gpus_per_trial
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    if any(n.get("CPU", 0) >= cpus and n.get("GPU", 0) >= gpus for n in nodes) or args.wait_for_resources:
        return
    have = "; ".join(f"{n.get('CPU', 0):g} CPU, {n.get('GPU', 0):g} GPU" for n in nodes) or "no node"
    lacking = "GPU" if gpus > max((n.get("GPU", 0) for n in nodes), default=0) else "CPU"
    raise SearchError(
        f"no node can run a trial: each needs {cpus:g} CPU + {gpus:g} GPU (--cpus-per-trial, --gpus-per-trial), "
        f"and no node has enough {lacking} (cluster: {len(nodes)} node(s): {have}); lower the request, or pass "
        "--wait-for-resources if an autoscaler will add such nodes")


def run(args) -> int:
    if args.dry_run:
        _check_flags(args)
        cfg = load_search_config(args.space or space_path(args.game), args.profile)
        if cfg.game != args.game:
            raise ConfigError(f"{cfg.source}: game {short(cfg.game)} does not match --game {args.game}")
        return _dry_run(cfg, args)

    t_start = time.time()
    INTERRUPT.install()
    try:
        prep = _prepare(args)
        INTERRUPT.check()
        m = prep.dataset.manifest
        print(f"focus-tune: {args.game} ({args.profile}) | data {prep.data_path}: "
              f"{m.splits['train']}/{m.splits['val']}/{m.splits['test']} items, L={m.length}, "
              f"{m.num_classes} classes, images {tuple(m.image_shape)}", flush=True)
        _start_ray(args)
        import ray

        try:
            _check_resources(args)
            INTERRUPT.check()
            return _search(args, prep, t_start)
        finally:
            ray.shutdown()
    except BaseException:
        for folder in prep.created if "prep" in locals() else ():
            _remove_if_empty(folder)
        raise
    finally:
        INTERRUPT.restore()


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def _open_tracker(args, parent_run_id):
    from .tracking import Tracker

    try:
        return Tracker(args.tracking_uri, experiment=f"focus-tune/{args.game}",
                       run_name=f"search-{args.profile}-seed{args.seed}", parent_run_id=parent_run_id)
    except Exception as err:  # MLflow raises many kinds for an unusable URI or store
        uri = args.tracking_uri or "sqlite:///mlflow.db"
        raise SearchError(f"--tracking-uri {short(uri)[1:-1]}: cannot open the MLflow store "
                          f"({type(err).__name__}: {short(str(err), 160)[1:-1]})") from None


def _search(args, prep: _Prepared, t_start: float) -> int:
    """The search proper: from here on the state file and the MLflow parent run exist."""
    from .tracking import tracking_uri, ui_command

    cfg, dataset, run_dir = prep.cfg, prep.dataset, prep.run_dir
    m = dataset.manifest
    state_path = run_dir / STATE_FILE
    resumed = args.resume and state_path.exists()
    if resumed:
        state = SearchState.load(state_path)
        print(f"resuming: {sum(v is not None for v in state.results.values())} trials already done", flush=True)
    else:
        state = SearchState(path=state_path, fingerprint=prep.fingerprint)
    tracker = _open_tracker(args, state.parent_run_id)
    new_parent = state.parent_run_id is None
    state.parent_run_id = tracker.parent_run_id
    state.attempts += 1
    state.save()
    print(f"MLflow: experiment focus-tune/{args.game}, run {tracker.parent_run_id} | watch it: "
          f"{ui_command(tracker.uri)}", flush=True)
    progress = None
    try:
        if new_parent:
            tracker.log_search(params={"game": args.game, "profile": args.profile, "seed": args.seed,
                                       "joint_search": args.joint_search, "data": str(prep.data_path),
                                       **{f"grid.{k}": v for k, v in cfg.to_dict()["grid"].items()},
                                       **{f"train.{k}": v for k, v in cfg.to_dict()["train"].items()}})
        else:
            tracker.reopen()
        plan = SearchPlan(cfg.grid, length=m.length, seed=args.seed, final_seeds=cfg.final_seeds,
                          joint_search=args.joint_search)
        expected = plan.stats(plan.dry_run(state.results))  # the grid's count, an estimate with Optuna
        evaluations = {t.trial_id for t in plan.all_trials(state.results) if t.source_trial}
        done = [tid for tid in state.results if not tid.startswith("joint-optuna-done")]
        done_evaluations = sum(tid in evaluations for tid in done)
        progress = Progress(expected.trainings, expected.evaluations, done_trainings=len(done) - done_evaluations,
                            done_evaluations=done_evaluations)
        data_ref = prep.arrays  # tune.with_parameters puts it in the object store once per batch
        data_info = {"num_classes": m.num_classes, "event": m.event_class,
                     "condition_class": m.condition_class, "in_channels": m.image_shape[0]}
        while batch := plan.next_batch(state.results):
            INTERRUPT.check()
            if batch.joint_space is not None:
                _run_optuna_joint(batch, cfg, args, data_ref, data_info, state, tracker, progress, run_dir)
                continue
            for t in batch.trials:
                progress.stage_of[t.trial_id] = t.stage if t.stage != "final" else f"final {t.family}"
                if t.source_trial:
                    progress.evaluation_ids.add(t.trial_id)
            stages = ", ".join(batch.stages)
            progress.batch(stages, f"batch: {stages} | {len(batch.trials)} trials ({batch.trainings} trainings)")
            configs = [_trial_config(t, cfg, data_info, state) for t in batch.longest_first()]
            _run_batch(batch, configs, args, data_ref, state, tracker, cfg.train.selection, progress,
                       run_dir, name=_batch_name(state, batch))
        INTERRUPT.check()
        winners = plan.winners(state.results)
        report = _report(cfg, args, plan, state, dataset, run_dir, tracker, winners, data_info)
    except Interrupted:
        if progress is not None:
            progress.close()
        state.save()
        reason = f"interrupted by {INTERRUPT.signal_name or 'SIGINT'}"
        tracker.end_running_children("KILLED", reason)
        tracker.finish(status="KILLED", reason=reason)
        done = sum(v is not None for v in state.results.values())
        print(f"interrupted: {done} finished trials saved in {state_path}; MLflow run {tracker.parent_run_id} "
              f"is KILLED; continue with the same command and --resume", file=sys.stderr, flush=True)
        raise
    except BaseException as err:
        if progress is not None:
            progress.close()
        reason = f"{type(err).__name__}: {err}"
        tracker.end_running_children("FAILED", reason)
        tracker.finish(status="FAILED", reason=reason)
        if not state.results and not resumed:
            state_path.unlink(missing_ok=True)  # nothing done: a plain rerun starts afresh
            fsync_path(run_dir)
        else:
            print(f"the search state is kept in {state_path}: rerun with --resume to continue",
                  file=sys.stderr, flush=True)
        raise
    progress.close()
    wall = time.time() - t_start
    tracker.log_search(metrics={**report.summary, "search/wall_s": wall})
    tracker.finish()
    print(report.table)
    print(f"\nchosen time-dependent schedule: {winners['joint'].schedule}")
    print(f"report: {run_dir / 'report' / 'results.md'}  |  MLflow: {ui_command(tracker.uri)}")
    print(f"use it: python -m focus_tune.predict --model runs:/{tracker.parent_run_id}/model-time-dependent "
          f"{'' if tracker.uri == tracking_uri(None) else '--tracking-uri ' + tracker.uri + ' '}IMAGE...")
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
    progress.batch("joint (Optuna)", f"batch: joint (Optuna) | {js.remaining} trainings of {js.budget}, "
                                     f"{len(known)} candidates known")
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


def _report(cfg, args, plan, state, dataset, run_dir, tracker, winners, data_info):
    from .baselines import with_baselines
    from .report import search_trace, write_report

    finals = {}
    for family, by_seed in plan.finals(state.results).items():
        finals[family] = [state.finals[tid] for seed, tid in sorted(by_seed.items()) if tid in state.finals]
    seeds = sorted({seed for by_seed in plan.finals(state.results).values() for seed in by_seed})
    finals = with_baselines(finals, dataset, cfg.to_dict()["train"], seeds)  # temperature-scaled, image-blind, oracle
    schedules = {family: str(winners[stage].schedule)
                 for family, stage in (("none", "none"), ("constant", "constant"), ("time-dependent", "joint"))}
    m = dataset.manifest
    out = run_dir / "report"
    # The search itself (every stage's candidates, each family's validation ECE over epochs) in the report.
    histories = tracker.metric_histories("val/ece")
    search = search_trace(plan, state.results, histories)
    report = write_report(out, args.game, args.profile, finals, schedules, m.class_names, m.condition_class,
                          search=search)
    _write_efficiency(state, out)
    for file in out.iterdir():  # durable before MLflow and the user are told it exists
        if file.is_file():
            fsync_path(file)
    fsync_path(out)
    tracker.log_artifacts(out, "report")
    tracker.log_search(tags={f"schedule.{f}": s for f, s in schedules.items()},
                       params={"chosen_schedule": schedules["time-dependent"]})
    _log_final_models(plan, state, cfg, data_info, tracker, run_dir, m)
    return report


def _write_efficiency(state: SearchState, out: Path) -> None:
    """Search efficiency: wall time of the batches over the sum of their longest trials."""
    wall = sum(b["wall_s"] for b in state.batch_seconds)
    longest = sum(b["longest_trial_s"] for b in state.batch_seconds)
    ratio = wall / longest if longest else float("nan")
    write_atomic(out / "efficiency.json", json.dumps(
        {"batches": state.batch_seconds, "wall_s": wall, "sum_longest_trial_s": longest, "ratio": ratio}, indent=1))


def _log_final_models(plan, state, cfg, data_info, tracker, run_dir: Path, manifest) -> None:
    """Each family's final model of the search seed, without pickle (``model_io``: numpy
    weights + JSON), in ``<run>/models/<family>`` and as a logged model of the parent run.
    Its model.json also records what ``focus_tune.predict`` needs to use it without the
    dataset: the class names, the sequence length and the image shape."""
    import torch
    from ray import tune

    from .model_io import save_model
    from .trainable import build_model, load_checkpoint

    train = cfg.to_dict()["train"]
    for family, by_seed in plan.finals(state.results).items():
        tid = by_seed[min(by_seed)]
        spec_source = next((t.source_trial for t in plan.all_trials(state.results) if t.trial_id == tid), None)
        path = state.checkpoints.get(spec_source or tid)
        if path is None:
            continue
        model = build_model(train, data_info)
        model.load_state_dict(load_checkpoint(tune.Checkpoint(path))["model"])
        folder = save_model(run_dir / "models" / family, model.eval().to(torch.float32), train, data_info,
                            extra={"family": family, "trial_id": spec_source or tid, "game": manifest.game,
                                   "class_names": list(manifest.class_names), "length": manifest.length,
                                   "image_shape": list(manifest.image_shape)})
        tracker.log_model(folder, name=f"model-{family}")


def _dry_run(cfg: SearchConfig, args) -> int:
    """Print the trial plan and what overlap and deduplication save; runs nothing."""
    from .data import get_spec

    if args.data is None:
        length = get_spec(args.game, args.profile).length
    else:  # the same checks as a real run: the game, and every split decoded
        dataset = load_dataset(args.data)
        _check_game(dataset.manifest, args, args.data)
        _data_for_trials(dataset)
        length = dataset.manifest.length
    plan = SearchPlan(cfg.grid, length=length, seed=args.seed, final_seeds=cfg.final_seeds)
    print(f"focus-tune dry run: {args.game} ({args.profile}), L={length}, "
          f"{cfg.train.epochs} epochs per training, grid {cfg.to_dict()['grid']}")
    from .planner import plan_cost, trial_minutes_for

    minutes, eval_minutes, source = trial_minutes_for(args.trial_minutes, _run_dir(args), cfg, args.game,
                                                      args.profile, args.gpus_per_trial,
                                                      builtin_data=args.data is None)
    if args.cluster_gpus and minutes:
        print(f"time per training: {source}")
    print(plan_cost(plan, cfg, args.cluster_gpus, args.gpus_per_trial, minutes, eval_minutes=eval_minutes,
                    cpus_per_trial=args.cpus_per_trial, max_concurrent=args.max_concurrent or 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
