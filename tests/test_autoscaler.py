"""The search on a cluster that grows and shrinks: Ray's own fake multi-node autoscaler
(``RAY_FAKE_CLUSTER=1``, scripts/local_cluster.py's ``autoscale``) with a head that has no
GPU and a node type with one (fake) GPU, at most 2 nodes of it. The smoke search asks for
1 GPU per trial with ``--wait-for-resources``: the autoscaler must add the GPU nodes the
queued trials need (at most 2), the search must finish on them, and the nodes must be
released once idle. The cost model (``cost.simulate`` on 2 slots with the trials' measured
times) is set beside the measured wall time of the search's Tune run."""

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fault_search import Gate
from focus_tune.config.space import load_search_config, space_path
from focus_tune.procedure.cost import simulate
from focus_tune.procedure.plan import SearchPlan

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("local_cluster", ROOT / "scripts" / "local_cluster.py")
local_cluster = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("local_cluster", local_cluster)
_spec.loader.exec_module(local_cluster)

GAME, RUN, MAX_NODES = "facemed", "facemed-smoke-seed0", 2
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def autoscaled():
    root = Path(tempfile.mkdtemp(prefix="fta-", dir="/tmp"))
    c = local_cluster.LocalCluster(root=root, nodes_wanted=1, cpus=1, memory=2 * local_cluster.GiB,
                                   object_store_memory=128 * local_cluster.MiB,
                                   autoscale={"gpu": {"resources": {"CPU": 1, "GPU": 1}, "max_workers": MAX_NODES}})
    try:
        c.start()
        # The stage-1 trials wait at a gate (tests/fault_search.py) until both run, each on a GPU
        # node, so that the first outlasts the start of the second node: smoke trials alone
        # take about a second, less than the autoscaler needs.
        stage1 = ["stage1-l0.01-s0", "stage1-l0.05-s0"]
        faults = dict.fromkeys(stage1, "gate")
        gate = Gate(root / "gate")
        cmd = [sys.executable, str(ROOT / "tests" / "fault_search.py"), "--game", GAME, "--profile", "smoke",
               "--address", c.address, "--storage", str(root / "runs"), "--tracking-uri",
               f"sqlite:///{root / 'mlflow.db'}", "--data-root", str(root / "data"),
               "--gpus-per-trial", "1", "--cpus-per-trial", "1", "--wait-for-resources"]
        t0 = time.time()
        env = dict(c.full_env(), **gate.env, PYTHONUNBUFFERED="1", FOCUS_TUNE_TEST_FAULTS=json.dumps(faults))
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            gate.wait(proc, stage1, timeout=300, what="both stage-1 trials running, one per GPU node")
            gate.release(*stage1)
            out, _ = proc.communicate(timeout=480)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        seconds = time.time() - t0
        assert proc.returncode == 0, out[-6000:]
        t_end = time.time()
        while len(c.alive_nodes()) > 1 and time.time() - t_end < 120:
            time.sleep(2)
        released_s = time.time() - t_end
        alive = c.alive_nodes()
        monitor = (root / "head" / "session_latest" / "logs" / "monitor.log").read_text(errors="replace")
        yield {"root": root, "out": out, "seconds": seconds, "alive": alive, "released_s": released_s,
               "monitor": monitor, "state": json.loads((root / "runs" / RUN / "search_state.json").read_text())}
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_the_autoscaler_adds_the_gpu_nodes_the_queued_trials_need(autoscaled):
    launched = sum(int(n) for n in re.findall(r"Adding (\d+) node\(s\) of type gpu", autoscaled["monitor"]))
    # The autoscaler logs each decision more than once as it retries; what it could start is
    # bounded by max_workers, and it started some.
    assert launched >= 1
    state = autoscaled["state"]
    assert all(v is not None for v in state["results"].values()) and len(state["results"]) == 17
    # Every slot the GPUs allow was used: 2 trials at once, never more.
    assert state["slots"] == MAX_NODES


def test_each_trial_is_one_finished_mlflow_run(autoscaled):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{autoscaled['root'] / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(f"focus-tune/{GAME}").experiment_id], max_results=500)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.data.tags["trial_id"] for r in children) == sorted(autoscaled["state"]["results"])
    assert all(r.info.status == "FINISHED" for r in runs) and len(runs) == len(children) + 1


def test_idle_nodes_are_released_after_the_search(autoscaled):
    assert len(autoscaled["alive"]) == 1, autoscaled["alive"]  # the head only
    assert autoscaled["alive"][0]["Resources"].get("GPU", 0) == 0
    assert "Removing" in autoscaled["monitor"]
    print(f"\nsearch {autoscaled['seconds']:.0f} s; GPU nodes released {autoscaled['released_s']:.0f} s after it ended")


def test_the_cost_model_beside_what_ran(autoscaled):
    state = autoscaled["state"]
    cfg = load_search_config(space_path(GAME), "smoke")
    plan = SearchPlan(cfg.grid, length=20, seed=0, final_seeds=cfg.final_seeds)
    seconds = state["trial_seconds"]
    modelled = simulate(plan, MAX_NODES, lambda t: seconds.get(t.trial_id, 0.0), state["results"])
    measured = sum(state["fit_seconds"])
    # The model schedules the measured trial times on 2 slots; the run adds the autoscaler's
    # node starts and Tune's own scheduling, never less.
    assert measured >= 0.95 * modelled, (measured, modelled)
    print(f"\ncost model (measured trial times on {MAX_NODES} GPUs) {modelled:.0f} s, the run {measured:.0f} s "
          f"({measured / modelled:.2f}x)")
