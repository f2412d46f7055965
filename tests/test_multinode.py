"""A real 2-node Ray cluster on this machine, the smoke search against it, and its results.

Two ``ray start`` nodes on loopback (1 CPU each, explicit memory and object store, each with
its own temp dir and free ports, token authentication with a token made for this test), the
search driver as a subprocess with ``--address`` and a storage folder both nodes share. One
search, disturbed twice (a worker node lost, the driver killed and resumed), with the faults of
the session's smoke search (tests/smoke_search.py): every trial ran on a node of the cluster
and trials ran on two nodes at once (both share 127.0.0.1, so the trial's worker pid, found in
one node's log folder, tells them apart); MLflow holds one FINISHED parent with one child per
trial, tagged with stage and family; and every score is the smoke search's, run on a local
Ray without disturbance. A client with a wrong token is refused before it. The cluster is
stopped by its own processes only (``ray stop`` would stop every Ray on the machine), also
when a test fails.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fault_search import Gate
from smoke_search import FAULTS, GAME, RUN, search_runs

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("local_cluster", ROOT / "scripts" / "local_cluster.py")
local_cluster = importlib.util.module_from_spec(_spec)
sys.modules["local_cluster"] = local_cluster
_spec.loader.exec_module(local_cluster)

@pytest.fixture(scope="module")
def sentinel():
    """A process that looks like someone else's Ray (another session, another temp dir):
    stopping our cluster must leave it alone."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)", "raylet", "--temp-dir=/tmp/ray"],
                            start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def cluster(sentinel):
    # Short root: Ray's unix sockets live under it (paths are limited to ~107 bytes).
    root = Path(tempfile.mkdtemp(prefix="ftc-", dir="/tmp"))
    c = local_cluster.LocalCluster(root=root, nodes_wanted=2, cpus=1, memory=2 * local_cluster.GiB,
                                   object_store_memory=256 * local_cluster.MiB)
    try:
        t0 = time.time()
        c.start()
        c.start_seconds = time.time() - t0
        yield c
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_two_nodes_with_explicit_resources(cluster):
    nodes = cluster.alive_nodes()
    assert len(nodes) == 2
    for n in nodes:
        assert n["Resources"]["CPU"] == 1.0
        assert n["Resources"]["memory"] == 2 * local_cluster.GiB
        assert n["Resources"]["object_store_memory"] == 256 * local_cluster.MiB
    assert sorted(cluster.node_ids.values()) == ["head", "worker1"]


# -- one search, disturbed: a lost worker node, a lost driver -------------------------------------
# The smoke search's faults (tests/smoke_search.py: one stage-1 trial turns NaN, two trials
# raise once at epoch 2), and gates before epoch 2 (tests/fault_search.py) for the two trials
# held in each round. stage2-l0.01-s0's raise becomes a gate: either way it goes on from its
# epoch-1 checkpoint, retried by Tune there, resumed by the new driver here.
ROUND1, ROUND2 = ["stage1-l0.01-s0", "none-s0"], ["stage2-l0.01-s0", "stage2-l0.05-s0"]
DISTURBED = {**FAULTS, **dict.fromkeys(ROUND1 + ROUND2, "gate@2")}
NAN, RAISED = "stage1-l0.05-s0", "constant-0.01-s0"
assert FAULTS[NAN] == "nan" and FAULTS[RAISED] == "raise@2" and not set(ROUND1 + ROUND2) & {NAN, RAISED}


def _state(folder: Path) -> dict:
    try:
        return json.loads((folder / "search_state.json").read_text())
    except (OSError, ValueError):
        return {}


def _checkpointed(folder: Path, trials: list[str]) -> bool:
    """The driver has recorded a checkpoint of each of ``trials`` and no result: held at its
    gate before epoch 2 (gate@2), a trial lost now is retried from its epoch-1 checkpoint."""
    s = _state(folder)
    return all(t in s.get("checkpoints", {}) and t not in s.get("results", {}) for t in trials)


def _live_trials_of(cluster, job: str, wait_s: float = 60) -> tuple[int, float]:
    """How many actors of Ray job ``job`` are not DEAD, once they are all dead or ``wait_s`` has passed
    (asked from a fresh client of the cluster); and the seconds that took."""
    code = (f"import json, time, ray; "
            f"ray.init(address={cluster.address!r}, logging_level='ERROR', log_to_driver=False)\n"
            "from focus_tune.search.ray_runtime import live_trials_of\n"
            f"t0 = time.time()\n"
            f"while live_trials_of([{job!r}])[{job!r}] and time.time() - t0 < {wait_s}: time.sleep(0.5)\n"
            f"print('LIVE=%d' % live_trials_of([{job!r}])[{job!r}])")
    t0 = time.time()
    out = subprocess.run([sys.executable, "-c", code], cwd=cluster.root, env=cluster.full_env(), capture_output=True,
                         text=True, timeout=wait_s + 120)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("LIVE=")), None)
    assert line, out.stdout[-2000:] + out.stderr[-3000:]
    return int(line.removeprefix("LIVE=")), time.time() - t0


@pytest.fixture(scope="module")
def disturbed(cluster):
    """The smoke search against the cluster, disturbed twice, each time while two trials wait
    at their gates before epoch 2, one per node (each node has one CPU). Round 1: while
    stage1-l0.01-s0 and none-s0 run, worker1 is lost (SIGKILL to all its processes at once, as
    a preempted machine) and a replacement node, worker2, joins; then their gates open. Round
    2: while both stage-2 trials run, the driver is killed (kill -9); once Ray has stopped its
    trials, their gates open and the same command with ``--resume`` finishes the search on the
    same cluster. Before it, a client with a wrong token knocks."""
    root = cluster.root
    bad = root / "wrong_token"
    bad.write_text("0" * 64)
    code = f"import ray; ray.init(address={cluster.address!r}, logging_level='ERROR'); print('CONNECTED')"
    # Two connection retries instead of Ray's 20: a refusal is final, the retries only make it
    # take ~20 s.
    intruder = subprocess.run([sys.executable, "-c", code], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=120, env=dict(cluster.full_env(), RAY_AUTH_TOKEN_PATH=str(bad),
                                                               RAY_NUM_REDIS_GET_RETRIES="2"))
    storage, db = root / "runs", root / "mlflow.db"
    folder = storage / RUN
    cmd = [sys.executable, str(ROOT / "tests" / "fault_search.py"), "--game", GAME, "--profile", "smoke",
           "--address", cluster.address, "--storage", str(storage), "--tracking-uri", f"sqlite:///{db}",
           "--data-root", str(root / "data"), "--cpus-per-trial", "1"]
    gate = Gate(root / "gate")
    env = dict(cluster.full_env(), **gate.env, PYTHONUNBUFFERED="1", FOCUS_TUNE_TEST_FAULTS=json.dumps(DISTURBED))
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        gate.wait(proc, ROUND1, until=lambda: _checkpointed(folder, ROUND1),
                  what="two trials at their gates, one per node")
        killed = cluster.kill_node("worker1")
        cluster.add_node("worker2")
        gate.release(*ROUND1)  # the trial of worker1 is retried from its checkpoint, past its gate
        gate.wait(proc, ROUND2, until=lambda: _checkpointed(folder, ROUND2), what="two stage-2 trials at their gates")
        before = _state(folder)
        proc.kill()  # kill -9 of the driver
        t_kill = time.time()
        first_out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    job = before["drivers"][-1]["ray_job"]
    live, live_s = _live_trials_of(cluster, job)
    # Open only now, with the dead driver's trials gone: the resumed ones start from their
    # epoch-1 checkpoints and do not stop at a gate; one restarted from scratch passes it.
    gate.release(*ROUND2)
    t_resume = time.time()
    resumed = subprocess.run([*cmd, "--resume"], cwd=root, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=480)
    assert resumed.returncode == 0, resumed.stdout[-6000:]
    return {"folder": folder, "storage": storage, "db": db, "first_out": first_out, "out": resumed.stdout,
            "killed": killed, "before": before, "job": job, "live": live, "strays_gone_s": t_resume - t_kill,
            "live_s": live_s, "t_resume": t_resume, "seconds": time.time() - t0,
            "intruder": (intruder.returncode, intruder.stdout)}


def test_token_auth_is_enforced(disturbed):
    # The right auth mode with a wrong token is refused by the cluster.
    returncode, out = disturbed["intruder"]
    assert returncode != 0 and "CONNECTED" not in out, (returncode, out[-3000:])
    assert "InvalidAuthToken" in out, out[-3000:]


def test_every_trial_ran_on_the_cluster_and_is_one_mlflow_run(cluster, disturbed):
    """``local_cluster.verify``, as ``run --verify`` checks a search: where each trial's last
    result came from (its Ray node id, else its worker's pid in a node's log folder), a node of
    this cluster for every trial with a score; one FINISHED parent run and one child per trial,
    tagged with stage and family, FINISHED but for the trial whose loss turned NaN, which is
    FAILED. Here, not every node (worker1 was lost mid-search), but more than one: the two
    trials held in each round ran at once, and a node has one CPU."""
    report = local_cluster.verify(cluster, disturbed["storage"], f"sqlite:///{disturbed['db']}", f"focus-tune/{GAME}",
                                  every_node=False)
    used = set(report["placement"].values())
    assert used <= {"head", "worker1", "worker2"} and len(used) >= 2, report["placement"]
    assert report["failed"] == [NAN], report
    print(f"\ncluster start {cluster.start_seconds:.0f}s, search with its resume {disturbed['seconds']:.0f}s, "
          f"trials per node {report['trials_per_node']}")


def test_a_lost_worker_node_costs_one_retry_from_the_checkpoint(disturbed):
    assert disturbed["killed"], "worker1 had no process to kill"
    out = disturbed["first_out"]
    assert "retrying from its last checkpoint" in out, out[-4000:]
    client, _, _, children = search_runs(disturbed["db"])
    retried = {r.data.tags["trial_id"]: r for r in children if r.data.tags.get("retries")}
    assert "injected fault" in retried.pop(RAISED).data.tags["retry.1"]  # the smoke search's fault
    # Exactly the held trial that ran on worker1 crashed, once: Ray lost its actor with the node.
    assert list(retried) in ([ROUND1[0]], [ROUND1[1]]), list(retried)
    tags = next(iter(retried.values())).data.tags
    assert tags["retries"] == "1" and "actor" in tags["retry.1"].lower(), tags
    # It went on from its epoch-1 checkpoint: each epoch logged once (a restart from scratch
    # would log epoch 1 twice).
    steps = [m.step for m in client.get_metric_history(next(iter(retried.values())).info.run_id, "train/loss")]
    assert sorted(steps) == [1, 2, 3], steps


def test_a_killed_driver_resumes_on_the_cluster_without_retraining(disturbed):
    before, folder = disturbed["before"], disturbed["folder"]
    done = set(before["results"])
    # Both stage-1 trials and both round-1 trials had finished (stage 2 waits for stage 1); the
    # NaN one without a score.
    scored = sum(v is not None for v in before["results"].values())
    assert set(ROUND1) | {NAN} <= done and f"resuming: {scored} trials already done" in disturbed["out"], \
        (sorted(done), disturbed["out"][:2000])
    # Ray stopped the dead driver's trials (their actors shared its fate) before the resume.
    assert disturbed["live"] == 0
    # Nothing finished before the kill was trained again: the resumed Tune experiment holds
    # only trials that were not done.
    again = {p.name for p in (folder / "search-attempt2").iterdir() if p.is_dir()}
    assert again and not (again & done), again & done
    # No stray trial of the dead driver wrote into the run folder after the resume began.
    late = [p for p in (folder / "search").rglob("*") if p.is_file() and p.stat().st_mtime > disturbed["t_resume"]]
    assert not late, late[:5]
    state = json.loads((folder / "search_state.json").read_text())
    assert [d["attempt"] for d in state["drivers"]] == [1, 2]
    print(f"\ndead driver's trials gone {disturbed['strays_gone_s']:.0f} s after the kill")


def test_the_disturbed_search_picks_the_smoke_searchs_winners(disturbed, smoke_search):
    """The same scores, to 1e-9, and the same decisions as the session's smoke search: the same
    faults on a local Ray, undisturbed."""
    def outcome(folder: Path):
        report = json.loads((folder / "report" / "search.json").read_text())
        return {s["stage"]: s["winner"] for s in report["stages"]}, report["chosen"]

    reference = smoke_search.work / "runs" / RUN
    assert outcome(disturbed["folder"]) == outcome(reference)
    ref = json.loads((reference / "search_state.json").read_text())["results"]
    got = json.loads((disturbed["folder"] / "search_state.json").read_text())["results"]
    assert got.keys() == ref.keys()
    assert all(got[k] == pytest.approx(ref[k], rel=1e-9, abs=1e-12) for k in ref if ref[k] is not None)
    assert [k for k in ref if ref[k] is None] == [k for k in got if got[k] is None]


def _private_mounts() -> list[str] | None:
    """A command prefix giving a process its own mount namespace, or None where this is not allowed."""
    if not shutil.which("unshare"):
        return None
    prefix = ["unshare", "-m", "--propagation", "private"] if os.geteuid() == 0 else ["unshare", "-r", "-m"]
    ok = subprocess.run([*prefix, "true"], capture_output=True).returncode == 0
    return prefix if ok else None


def test_a_node_that_cannot_see_the_run_folder_is_named_at_start(cluster):
    """A third node whose view of the storage is an empty tmpfs (its own mount namespace): the
    search refuses to start, naming the node, before it writes a state or opens MLflow."""
    prefix = _private_mounts()
    if prefix is None:
        pytest.skip("no private mount namespace here (unshare missing or not permitted)")
    storage = cluster.root / "runs-blind"
    storage.mkdir()
    cover = f"mount -t tmpfs -o size=1m tmpfs {storage} && exec \"$@\""
    cluster.add_node("blind", wrap=[*prefix, "sh", "-c", cover, "sh"])
    cmd = [sys.executable, "-m", "focus_tune.search", "--game", GAME, "--profile", "smoke",
           "--address", cluster.address, "--storage", str(storage), "--tracking-uri",
           f"sqlite:///{cluster.root / 'mlflow-blind.db'}", "--data-root", str(cluster.root / "data")]
    proc = subprocess.run(cmd, cwd=cluster.root, env=cluster.full_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = proc.stderr.strip().splitlines()[-1]
    blind = next(node_id for node_id, name in cluster.node_ids.items() if name == "blind")
    assert line.startswith(f"error: --storage {storage}: 1 of 3 node(s) of the cluster cannot see the run folder "
                           f"{storage / RUN}: "), line
    assert f"(node {blind[:8]})" in line, line
    assert "same path on every node" in line
    assert not (storage / RUN / "search_state.json").exists() and not (cluster.root / "mlflow-blind.db").exists()


def test_stop_ends_this_cluster_and_nothing_else(cluster, sentinel):
    pids = cluster.processes()
    assert pids
    t0 = time.time()
    signalled = cluster.stop()
    # Every process listed was signalled, unless it had already exited on its own in between
    # (short-lived workers do, on a loaded machine).
    gone = {pid for pid in pids if not Path(f"/proc/{pid}").exists()}
    assert set(pids) <= set(signalled) | gone
    assert cluster.processes() == []
    assert sentinel.poll() is None, "stopping the cluster killed a process that was not its own"
    assert time.time() - t0 < 30


PROBE_WITH_A_LOST_NODE = """
import sys, types
import ray
from focus_tune.search import ray_runtime

folder = sys.argv[1]
opts = types.SimpleNamespace(address=None, storage=folder)
ray_runtime.secure_local_ray(opts.address)  # a local Ray with a token, as the search starts one
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
real = ray.nodes()
lost = dict(real[0], NodeID="ab" * 28, NodeManagerAddress="192.0.2.99")
ray.nodes = lambda: real + [lost]  # listed as alive: Ray has not yet missed enough heartbeats
opts.address = "the cluster"
ray_runtime.check_shared_storage(opts, folder)
print("PROBED", sorted(p.name for p in __import__("pathlib").Path(folder).iterdir()))
"""


def test_a_node_lost_before_its_storage_probe_is_left_out(tmp_path):
    """A search resumed right after a node was lost (the disturbed search here, on a fast
    machine) lists the node as alive, and its storage probe cannot be placed there: the node
    runs no trial, so the probe leaves it out instead of failing the search. The probe file
    is gone afterwards."""
    proc = subprocess.run([sys.executable, "-c", PROBE_WITH_A_LOST_NODE, str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "PROBED []" in proc.stdout, proc.stdout
