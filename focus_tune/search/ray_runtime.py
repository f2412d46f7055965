"""The Ray side of the driver: starting (or joining) Ray, what the cluster can hold, Ctrl-C."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import sys
import time
import uuid
import warnings
from pathlib import Path

from ..errors import SearchError
from .storage import is_uri


def quiet() -> None:
    """Keep the terminal for our progress lines: Ray's and MLflow's chatter goes to their logs."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # no experiment banner and TensorBoard hint
    # Tune's automatic loggers off (CSV, TensorBoard, JSON): the search passes the ones it wants (tune_loggers).
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    for name in ("mlflow", "alembic", "ray", "ray.tune"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="mlflow")


def tune_loggers(tensorboard: bool) -> list:
    """Ray Tune's own loggers of a search's experiment folder: the JSON logger always (each trial's
    result.json and params.json, which ``ray.tune.ExperimentAnalysis`` reads; docs/BENCHMARKS.md
    has its cost), TensorBoard's event files with ``--tensorboard``. The CSV logger stays off
    (:func:`quiet`): it would repeat result.json."""
    from ray.tune.logger import JsonLoggerCallback, TBXLoggerCallback

    return [JsonLoggerCallback(), TBXLoggerCallback()] if tensorboard else [JsonLoggerCallback()]


class _HideReported(logging.Filter):
    """Drops Tune's tracebacks of a full disk: the driver reports it itself, on one line. Tune
    logs one when a callback of ours could not save the search state, and when its own
    experiment snapshot (which --resume does not read) could not be written; a full disk then
    also stops the search through a checkpoint or the search state that cannot be written."""

    def filter(self, record: logging.LogRecord) -> bool:
        from ..durable import disk_full

        return not (record.exc_info and disk_full(record.exc_info[1]) is not None)


def hide_reported_errors() -> None:
    for name in ("ray.tune.execution.tune_controller", "ray.tune.execution.experiment_state"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _HideReported) for f in logger.filters):
            logger.addFilter(_HideReported())


def joins_cluster(address: str | None) -> bool:
    """Whether a command joins an existing Ray cluster (its --address, or RAY_ADDRESS) rather
    than starting a local Ray of its own."""
    return bool(address or os.environ.get("RAY_ADDRESS"))


def secure_local_ray(address: str | None) -> None:
    """A local Ray requires a token made for this search: its GCS, raylet and workers listen
    on every interface (Ray 2.60 has no loopback-only switch), and with token authentication
    a stranger who reaches those ports is refused. The token lives only in this process's
    environment (inherited by the Ray processes it starts); nothing is written to ~/.ray.

    Each local Ray gets a token of its own, a second one in the same process too (a notebook's
    ``run_recipe`` then ``run_search``): Ray's driver caches the token it first read (and takes
    it out of the environment), so the cache is reset here, else the driver would present the
    first token to a Ray started with the new one."""
    if joins_cluster(address):
        return  # a cluster's own authentication applies (cluster.yaml: token auth everywhere)
    if "ray._raylet" in sys.modules and os.environ.get("RAY_AUTH_MODE") != "token":
        return  # Ray was imported before (an embedding program): its auth mode is fixed already
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    if "ray._raylet" in sys.modules:
        from ray._raylet import AuthenticationTokenLoader

        AuthenticationTokenLoader.instance().reset_cache()


# A local Ray's raylet starts one idle worker per CPU (Python and Ray imported, ~0.4 CPU-s
# each) as the first driver registers. A search's trials run in Tune's actors, in placement
# groups, one per slot: the first actors took the prestarted workers in some smoke searches
# here, and in others Ray started workers of their own and stopped the prestarted ones; on a
# GPU node with more CPUs than trials most of them only idle. Without prestarting, a trial
# actor's worker starts when the actor asks for it (tests/test_search_e2e.py reads the
# raylet's log). Read by the raylet, which inherits this process's environment.
NO_PRESTART = {"RAY_prestart_worker_first_driver": "0"}


def start_ray(opts) -> None:
    """ray.init for the search: the cluster at --address, or a local Ray that requires a token
    and starts no worker before a trial asks for one (:data:`NO_PRESTART`)."""
    secure_local_ray(opts.address)
    if not joins_cluster(opts.address):
        for key, value in NO_PRESTART.items():
            os.environ.setdefault(key, value)
    import ray

    ray.init(address=opts.address, include_dashboard=False, log_to_driver=False,
             configure_logging=True, logging_level="ERROR")


def plain_trial_actors() -> None:
    """Tune's trial actors without the runtime env Tune gives them by default.

    Tune makes every trainable actor with ``runtime_env={"env_vars": {"PL_DISABLE_FORK":
    "1"}}`` (a switch of PyTorch Lightning, which this project does not use). With it, every
    worker a trial actor starts in waits for Ray's runtime-env agent to create that env
    first. Variables Tune propagates from the driver's environment (cloud credentials, Ray
    Train's) still travel as a runtime env when they are set."""
    from ray.tune.execution import class_cache

    class_cache.DEFAULT_ENV_VARS.pop("PL_DISABLE_FORK", None)


def _node_slots(opts) -> tuple[list[dict], list[int]]:
    """The alive nodes, and how many trials of --cpus-per-trial / --gpus-per-trial each holds
    (``cost.Resources.slots``, the rule the dry run uses)."""
    import ray

    from ..procedure.cost import Resources

    cpus, gpus = opts.cpus_per_trial, opts.gpus_per_trial
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    return nodes, [Resources(cpus, gpus, cluster_gpus=n.get("GPU", 0), cluster_cpus=n.get("CPU", 0)).slots
                   for n in nodes]


def check_resources(opts) -> None:
    """Fail fast when no node can ever hold one trial, naming what the cluster has."""
    nodes, fits = _node_slots(opts)
    if any(fits) or opts.wait_for_resources:
        return
    cpus, gpus = opts.cpus_per_trial, opts.gpus_per_trial
    have = "; ".join(f"{n.get('CPU', 0):g} CPU, {n.get('GPU', 0):g} GPU" for n in nodes) or "no node"
    lacking = "GPU" if gpus > max((n.get("GPU", 0) for n in nodes), default=0) else "CPU"
    raise SearchError(
        f"no node can run a trial: each needs {cpus:g} CPU + {gpus:g} GPU (--cpus-per-trial, --gpus-per-trial), "
        f"and no node has enough {lacking} (cluster: {len(nodes)} node(s): {have}); lower the request, or pass "
        "--wait-for-resources if an autoscaler will add such nodes")


def check_shared_storage(opts, folder) -> None:
    """On a cluster (--address), every alive node must see the run folder: the trials write
    their checkpoints there and --resume reads them back from any node. A probe file written
    here is looked for by one zero-CPU task pinned to each node; a node that does not see it
    is named, with what the storage must be. A URI storage (s3://, gs://) is reached through
    pyarrow by every node and is not probed; nodes an autoscaler adds later are not either.

    A node that is gone by the time its probe runs is left out: it runs no trial. Ray lists a
    lost node as alive until it has missed enough heartbeats (seconds to a minute), so a search
    resumed right after a node was lost lists it and then cannot place its probe there."""
    if not joins_cluster(opts.address) or is_uri(opts.storage):
        return
    import ray
    from ray.exceptions import NodeDiedError, TaskUnschedulableError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = Path(folder).resolve() / f".node-probe-{uuid.uuid4().hex}"
    probe.write_bytes(b"")

    @ray.remote(num_cpus=0, max_retries=0)
    def sees(path: str) -> bool:
        return os.path.exists(path)

    def answer(ref) -> bool | None:
        """The node's answer; None for a node that is gone."""
        try:
            return ray.get(ref)
        except (TaskUnschedulableError, NodeDiedError):
            return None

    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        refs = [sees.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                .remote(str(probe)) for n in nodes]
        _, waiting = ray.wait(refs, num_returns=len(refs), timeout=120)
        if waiting:
            late = ", ".join(f"{n['NodeManagerAddress']} (node {n['NodeID'][:8]})"
                             for n, ref in zip(nodes, refs) if ref in waiting)
            raise SearchError(f"--storage {opts.storage}: {len(waiting)} of {len(refs)} node(s) of the cluster did not "
                              f"answer whether they see the run folder within 120 s: {late}")
        seen = [answer(ref) for ref in refs]
    finally:
        probe.unlink(missing_ok=True)
    there = [(n, ok) for n, ok in zip(nodes, seen) if ok is not None]
    nodes = [n for n, _ in there]
    blind = [n for n, ok in there if not ok]
    if blind:
        names = ", ".join(f"{n['NodeManagerAddress']} (node {n['NodeID'][:8]})" for n in blind[:3])
        raise SearchError(
            f"--storage {opts.storage}: {len(blind)} of {len(nodes)} node(s) of the cluster cannot see the run folder "
            f"{Path(folder).resolve()}: {names}; on a cluster the storage must be one filesystem mounted at the same "
            "path on every node (NFS, EFS, ...) or a URI (s3://..., gs://...)")


def trial_slots(opts) -> int | None:
    """How many trials the cluster runs at once (at most --max-concurrent), or None when an
    autoscaler may add nodes (--wait-for-resources): then every runnable trial is queued,
    so that the autoscaler sees the whole demand."""
    if opts.wait_for_resources:
        return None
    slots = max(1, sum(_node_slots(opts)[1]))
    return min(slots, opts.max_concurrent) if opts.max_concurrent else slots


# How long a resumed search waits for the trials of an earlier driver that died (kill -9, a
# lost laptop) to be stopped by Ray (the trials' actors share their owner's fate: seconds).
STRAY_WAIT_S = 60.0
_LIVE_ACTOR_STATES = ("DEPENDENCIES_UNREADY", "PENDING_CREATION", "ALIVE", "RESTARTING")


def driver_record(attempt: int) -> dict:
    """This driver start as the search state keeps it (``SearchState.drivers``)."""
    import ray

    ctx = ray.get_runtime_context()
    return {"attempt": attempt, "cluster": ctx.get_session_name(), "ray_job": ctx.get_job_id(),
            "host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}


def live_trials_of(job_ids: list[str]) -> dict[str, int]:
    """{Ray job id: actors of that job not yet DEAD} on the connected cluster (read from the
    GCS, which needs no dashboard)."""
    from ray._private import state as gcs_state  # the GCS actor table; ray.util.state needs the dashboard

    wanted = set(job_ids)
    counts = dict.fromkeys(job_ids, 0)
    for actor in gcs_state.actors().values():
        if actor["JobID"] in wanted and actor["State"] in _LIVE_ACTOR_STATES:
            counts[actor["JobID"]] += 1
    return counts


def wait_for_earlier_drivers(drivers: list[dict], wait_s: float = STRAY_WAIT_S, log=print) -> None:
    """Before a resumed search starts trials: the trials that an earlier driver of this search
    started on this same cluster must have stopped. When a driver dies, Ray stops the actors it
    owned within seconds; until then they could still write checkpoints into the run folder
    (and Tune's ``num_to_keep`` would delete older ones the state points to). Waits up to
    ``wait_s``, then refuses with the earlier driver's job, host and pid."""
    import ray

    here = ray.get_runtime_context()
    cluster, me = here.get_session_name(), here.get_job_id()
    earlier = {d["ray_job"]: d for d in drivers if d.get("cluster") == cluster and d.get("ray_job") != me}
    if not earlier:
        return
    deadline, told = time.monotonic() + wait_s, False
    while True:
        live = {job: n for job, n in live_trials_of(list(earlier)).items() if n}
        if not live:
            if told:
                log("the earlier driver's trials have stopped", flush=True)
            return
        job, n = next(iter(live.items()))
        d = earlier[job]
        who = f"Ray job {job} (driver pid {d.get('pid')} on {d.get('host')})"
        if time.monotonic() > deadline:
            raise SearchError(f"{n} trial(s) of an earlier driver of this search, {who}, still run on the cluster "
                              f"after {wait_s:.0f} s: is that driver still running? Stop it (or its Ray job), then "
                              "resume again")
        if not told:
            log(f"waiting for {n} trial(s) of the earlier driver, {who}, to stop on the cluster "
                f"(at most {wait_s:.0f} s)", flush=True)
            told = True
        time.sleep(1.0)


def interrupt_stopper():
    from ray.tune import Stopper

    class StopOnInterrupt(Stopper):
        """Ends every trial at the next step of Tune's loop once Ctrl-C was pressed, or once
        the search must stop for an error (INTERRUPT.abort: a full disk)."""

        def __call__(self, trial_id, result) -> bool:
            return False

        def stop_all(self) -> bool:
            # Looked up at call time: Tune pickles its stopper, and an Event cannot be pickled.
            from focus_tune.interrupt import INTERRUPT

            return INTERRUPT.event.is_set() or INTERRUPT.abort.is_set()

    return StopOnInterrupt()
