"""The driver: validate, start Ray and MLflow, run the search as one Tune experiment, report
(:func:`run`; the CLI and the Python API on top of it are :mod:`.api`)."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..config.space import SearchConfig
from ..data import ensure_dataset, load_dataset
from ..durable import disk_full, fsync_path
from ..errors import SearchError, TrackingUnavailable
from ..interrupt import INTERRUPT, Interrupted
from ..names import SELECT_NAMES
from ..procedure.job import CONFIG_KEY, Splits, TrialJob
from ..procedure.plan import SearchPlan, TrialSpec
from ..procedure.rates import resolve_pack
from ..procedure.state import disk_full_of
from ..quote import short
from ..sim.model_io import DataInfo
from . import ray_runtime
from .checks import check_scenario, load_config, load_splits
from .cli import SearchOptions, check_split_sizes
from .lock import SearchLock
from .progress import Progress, fmt_s
from .storage import (
    STATE_FILE,
    SearchState,
    check_resumable,
    check_storage,
    fingerprint,
    remove_if_empty,
    run_dir,
    tune_storage,
    write_config,
)


@dataclass
class Prepared:
    """Everything checked before the search touches the state, MLflow or Ray."""

    cfg: SearchConfig
    data_path: Path
    dataset: object
    splits: Splits
    run_dir: Path
    fingerprint: dict


def prepare(opts: SearchOptions) -> Prepared:
    """Validate the flags, the config, the dataset (its contents too) and the search state
    (the caller holds the run folder's lock: :func:`run`)."""
    check_split_sizes(opts)  # a dataset of one's own too small to tell a family from image-blind
    cfg = load_config(opts)
    data_path = opts.data or ensure_dataset(opts.scenario, opts.profile, opts.data_root, seed=opts.seed)
    dataset = load_dataset(data_path)
    check_scenario(dataset.manifest, opts, data_path)
    splits = load_splits(dataset)
    folder = run_dir(opts)
    made = fingerprint(opts, cfg, data_path, dataset.manifest.files)
    state_path = folder / STATE_FILE
    if state_path.exists() and not opts.resume:
        raise SearchError(f"a search already exists in {folder}; pass --resume to continue it, "
                          f"or --name (or --storage, --seed) for a new one")
    if opts.resume and state_path.exists():
        check_resumable(state_path, SearchState.load(state_path).fingerprint, made)
    return Prepared(cfg, Path(data_path), dataset, splits, folder, made)


def run(opts: SearchOptions, trainable=None) -> int:
    """The search: the run folder is made writable and locked first (a second search on it is
    refused before anything else, :mod:`.lock`); a check that fails leaves no folder, lock or
    state behind; a full disk at any point ends in :class:`~focus_tune.errors.DiskFull`."""
    if opts.print_config:
        from ..config.space import dump_search_config

        print(dump_search_config(load_config(opts), opts.overrides), end="")
        return 0
    if opts.dry_run:
        from .dry_run import dry_run

        return dry_run(load_config(opts), opts)
    t_start = time.time()
    INTERRUPT.install()
    folder = run_dir(opts)
    lock = SearchLock(folder)
    created: list[Path] = []
    try:
        created = check_storage(opts, folder)  # folders made here are removed again if the search does not start
        lock.acquire()
        if lock.notice:
            print(lock.notice, file=sys.stderr, flush=True)
        prep = prepare(opts)
        INTERRUPT.check()
        m = prep.dataset.manifest
        print(f"focus-tune: {opts.scenario} ({opts.profile}) | data {prep.data_path}: "
              f"{m.splits['train']}/{m.splits['val']}/{m.splits['test']} items, L={m.length}, "
              f"{m.num_classes} classes, images {tuple(m.image_shape)}", flush=True)
        ray_runtime.start_ray(opts)
        import ray

        try:
            ray_runtime.check_resources(opts)
            ray_runtime.check_shared_storage(opts, prep.run_dir)
            INTERRUPT.check()
            return search(opts, prep, t_start, trainable)
        finally:
            ray.shutdown()
    except BaseException as err:
        lock.release()  # before the folders it lives in are removed
        for made in created:
            remove_if_empty(made)
        if isinstance(err, Exception) and not isinstance(err, SearchError) and disk_full(err) is not None:
            raise disk_full_of(err, folder) from None
        raise
    finally:
        lock.release()
        INTERRUPT.restore()


UNSENT_FILE = "mlflow_unsent.json"  # trial records the tracking server never got (tracking.Tracker)


def open_tracker(opts: SearchOptions, parent_run_id, folder: Path):
    from ..tracking import Tracker

    try:
        return Tracker(opts.tracking_uri, experiment=opts.experiment_name, run_name=opts.parent_run_name,
                       parent_run_id=parent_run_id,
                       unsent=folder / UNSENT_FILE)
    except SearchError:
        raise
    except Exception as err:  # MLflow raises many kinds for an unusable URI or store
        uri = opts.tracking_uri or "sqlite:///mlflow.db"
        raise SearchError(f"--tracking-uri {short(uri)[1:-1]}: cannot open the MLflow store "
                          f"({type(err).__name__}: {short(str(err), 160)[1:-1]})") from None


def search(opts: SearchOptions, prep: Prepared, t_start: float, trainable=None) -> int:
    """The search proper: from here on the state file and the MLflow parent run exist."""
    from ..tracking import tracking_uri, ui_command
    from .outputs import write_outputs

    cfg, m, folder = prep.cfg, prep.dataset.manifest, prep.run_dir
    state_path = folder / STATE_FILE
    resumed = opts.resume and state_path.exists()
    state = SearchState.load(state_path) if resumed else SearchState(path=state_path, fingerprint=prep.fingerprint)
    if resumed:
        again = state.retry_crashed()
        print(f"resuming: {sum(v is not None for v in state.results.values())} trials already done"
              + (f"; {len(again)} that crashed run again from their last checkpoint ({', '.join(again)})"
                 if again else ""), flush=True)
    tracker = open_tracker(opts, state.parent_run_id, folder)
    new_parent, state.parent_run_id = state.parent_run_id is None, tracker.parent_run_id
    progress = None
    try:  # from here on the parent run exists: whatever stops the search ends it (a full disk at the first save too)
        state.attempts += 1
        if resumed:  # trials of an earlier, dead driver on this cluster must have stopped first
            ray_runtime.wait_for_earlier_drivers(state.drivers)
        state.drivers.append(ray_runtime.driver_record(state.attempts))
        state.save()
        print(f"MLflow: experiment {opts.experiment_name}, run {tracker.parent_run_id} | watch it: "
              f"{ui_command(tracker.uri, tracker.experiment_id)}", flush=True)
        write_config(folder, cfg, opts.overrides)  # config.yaml: what --space takes back
        if new_parent:
            tracker.log_search(params={"scenario": opts.scenario, "profile": opts.profile, "seed": opts.seed,
                                       "joint_search": opts.joint_search, "joint_budget": opts.joint_budget,
                                       "data": str(prep.data_path), "run_folder": str(folder.resolve()),
                                       **{f"grid.{k}": v for k, v in cfg.to_dict()["grid"].items()},
                                       **{f"train.{k}": v for k, v in cfg.to_dict()["train"].items()},
                                       **{f"set.{k}": v for k, v in opts.overrides}})
        else:
            tracker.reopen()
            tracker.send_unsent()
        tracker.log_dataset(m, prep.data_path)
        plan = SearchPlan(cfg.grid, length=m.length, seed=opts.seed, final_seeds=cfg.final_seeds,
                          joint_search=opts.joint_search, tie_se=cfg.train.tie_se, difference_se=state.difference_se)
        plan = dataclasses.replace(plan, joint_budget=joint_budget(opts, plan))
        progress = new_progress(plan, state, f"val {SELECT_NAMES[cfg.train.select_by]}")
        fit(opts, prep, plan, state, tracker, progress, trainable)
        INTERRUPT.check()
        winners = plan.winners(state.results)
        report = write_outputs(cfg, opts, plan, state, prep.dataset, folder, tracker, winners)
    except Interrupted:
        progress and progress.close()
        state.save()
        reason = f"interrupted by {INTERRUPT.signal_name or 'SIGINT'}"
        marked = end_runs(tracker, "KILLED", reason)
        done = sum(v is not None for v in state.results.values())
        print(f"interrupted: {done} finished trials saved in {state_path}; MLflow run {tracker.parent_run_id} "
              f"{'is KILLED' if marked else 'left as it was (the server is unreachable)'}; continue with the same "
              f"command and --resume", file=sys.stderr, flush=True)
        raise
    except BaseException as err:
        progress and progress.close()
        end_runs(tracker, "FAILED", f"{type(err).__name__}: {err}")
        if not state.results and not resumed and not tracker.unavailable:
            state_path.unlink(missing_ok=True)  # nothing done: a plain rerun starts afresh
            fsync_path(folder)
        else:
            print(f"the search state is kept in {state_path}: rerun with --resume to continue",
                  file=sys.stderr, flush=True)
        raise
    progress.close()
    wall = time.time() - t_start
    tracker.log_search(metrics={"search/wall_s": wall})
    tracker.finish()
    print(report.table)
    print(f"\nchosen time-dependent schedule: {winners['joint'].schedule}")
    print(f"report: {folder / 'report' / 'results.md'}  |  MLflow: {ui_command(tracker.uri, tracker.experiment_id)}")
    print(f"wall time {fmt_s(wall)}")
    rec = report.recommendation  # by the validation evidence (focus_tune.procedure.recommend), the search's last line
    family = rec.family if rec else "time-dependent"
    flags = rec.predict_flags(cfg.train.estimator, cfg.train.num_samples) if rec else ""
    print(f"use it: python -m focus_tune.predict --model runs:/{tracker.parent_run_id}/model-{family} {flags}"
          f"{'' if tracker.uri == tracking_uri(None) else '--tracking-uri ' + tracker.uri + ' '}IMAGE..."
          + (f"  ({rec.reason})" if rec else ""))
    return 0


def end_runs(tracker, status: str, reason: str) -> bool:
    """The parent run and its RUNNING children ended as ``status`` with ``reason``, unless the
    tracking server is unreachable (the patience ran out: nothing more is sent, a resumed
    search reopens them). Returns whether they were."""

    if tracker.unavailable:
        return False
    try:
        tracker.end_running_children(status, reason)
        tracker.finish(status=status, reason=reason)
    except TrackingUnavailable as err:
        print(f"the MLflow runs are left as they were: {err}", file=sys.stderr, flush=True)
        return False
    return True


def joint_budget(opts: SearchOptions, plan: SearchPlan) -> int | None:
    """Joint trainings of an Optuna joint stage: --joint-budget, or the default of optuna_joint."""
    if opts.joint_search != "optuna":
        return None
    if opts.joint_budget is not None:
        return opts.joint_budget
    from ..procedure.optuna_joint import default_budget

    return default_budget(plan.joint_trainings)


def new_progress(plan: SearchPlan, state: SearchState, score_name: str = "val ECE") -> Progress:
    """The progress display, counting what an earlier driver of a resumed search finished."""
    from ..procedure.cost import stats

    expected = stats(plan, plan.dry_run(state.results))  # as if the joint stage were the grid
    trainings = expected.trainings
    if plan.joint_budget is not None:  # Optuna trains `joint_budget` of the joint grid's candidates
        trainings -= max(0, plan.joint_trainings - plan.joint_budget)
    evaluations = {t.trial_id for t in plan.all_trials(state.results) if t.source_trial}
    done_evaluations = sum(tid in evaluations for tid in state.results)
    return Progress(trainings, expected.evaluations, done_trainings=len(state.results) - done_evaluations,
                    done_evaluations=done_evaluations, score_name=score_name)


def fit(opts: SearchOptions, prep: Prepared, plan: SearchPlan, state: SearchState, tracker, progress: Progress,
        trainable=None) -> None:
    """Every trial of the search in one Ray Tune experiment, handed out by the PlanSearcher."""
    from ray import tune

    from .callbacks import MLflowCallback, StateCallback
    from .scheduler import RaceScheduler
    from .searcher import PlanSearcher
    from .trainable import run_trial

    # One CPU (one torch thread) per trial by default (search/cli.py): on a laptop, trials
    # beyond the core count wait their turn, which trains faster than oversubscribing the
    # cores (measured: 10.5 vs 6.5 CPU-seconds per quick epoch with 5 trials on 2 cores).
    cpus = opts.cpus_per_trial
    cfg, folder, data_info = prep.cfg, prep.run_dir, DataInfo.of(prep.dataset.manifest)

    def make_job(spec: TrialSpec) -> TrialJob:
        source = state.checkpoints.get(spec.source_trial) if spec.source_trial else None
        if spec.source_trial and source is None:
            raise SearchError(f"the checkpoint of {spec.source_trial} is missing; cannot evaluate {spec.trial_id}")
        return TrialJob(spec, cfg.train, data_info, source_checkpoint=source,
                        resume_from=state.checkpoints.get(spec.trial_id), threads=max(1, int(cpus)), k1=cfg.grid.k1)

    def handout(job: TrialJob) -> None:
        progress.handed_out(job.trial_id, job.spec.label, evaluation=not job.trains)

    optuna = None
    if opts.joint_search == "optuna":
        from ..procedure.optuna_joint import JointOptuna

        def optuna(space):
            return JointOptuna(space, budget=plan.joint_budget, seed=opts.seed,
                               storage=f"sqlite:///{(folder / 'optuna.db').resolve()}",
                               study_name=f"joint-s{opts.seed}")

    slots = ray_runtime.trial_slots(opts)
    # Tune asks a custom searcher for one trial at a time until that trial leaves PENDING;
    # the searcher itself keeps at most `slots` trials out, so Tune may hold that many
    # pending: every free slot gets its trial (and its actor) at once. With an autoscaler
    # (no slot limit) the whole runnable demand is visible to it.
    os.environ["TUNE_MAX_PENDING_TRIALS_PG"] = str(slots or 1000)
    pack, why = resolve_pack(opts.pack, opts.gpus_per_trial, prep.dataset.manifest)
    if opts.pack == "auto":
        progress.line(f"--pack auto: {why}")
    if pack > 1 and cfg.train.validation[0] != "counted":
        raise SearchError(f"--pack {opts.pack}: a pack validates with the counted estimator, and the search space "
                          f"asks for {cfg.train.validation[0]!r} in validation; use --pack 1")
    racing = cfg.train.racing != "off" and pack == 1  # a pack's members cannot be stopped one by one
    if cfg.train.racing != "off" and not racing:
        progress.line(f"racing {cfg.train.racing!r} is off with --pack {pack}: a pack's members train as one trial")
    searcher = PlanSearcher(plan, state, make_job, slots, cfg.train.epochs, optuna, handout, pack=pack,
                            race=cfg.train if racing else None)
    name = "search" if state.attempts == 1 else f"search-attempt{state.attempts}"
    mlflow_callback = MLflowCallback(tracker, state)
    tuner = tune.Tuner(
        tune.with_resources(tune.with_parameters(trainable or run_trial, data=prep.splits),
                            {"cpu": cpus, "gpu": opts.gpus_per_trial}),
        tune_config=tune.TuneConfig(
            search_alg=searcher, num_samples=-1, reuse_actors=True,
            scheduler=RaceScheduler(searcher) if racing else None,
            trial_name_creator=lambda t: t.config[CONFIG_KEY].trial_id,
            trial_dirname_creator=lambda t: t.config[CONFIG_KEY].trial_id,
        ),
        run_config=tune.RunConfig(
            name=name,
            storage_path=tune_storage(opts.storage, folder),
            callbacks=[mlflow_callback, StateCallback(state, progress, on_full=searcher.stop_for),
                       *ray_runtime.tune_loggers(opts.tensorboard)],
            failure_config=tune.FailureConfig(max_failures=opts.max_retries),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            stop=ray_runtime.interrupt_stopper(),
            verbose=0,
        ),
    )
    ray_runtime.hide_reported_errors()
    ray_runtime.plain_trial_actors()
    t0 = time.time()
    try:
        tuner.fit()
    except Exception:
        if mlflow_callback.error is not None:  # raised by it, or what followed in Tune
            raise mlflow_callback.error from None
        raise
    if mlflow_callback.error is not None:
        raise mlflow_callback.error
    INTERRUPT.check()  # an interrupted fit is not a measured one
    if searcher.error is not None:
        raise searcher.error
    state.fit_seconds.append(time.time() - t0)
    state.save()
