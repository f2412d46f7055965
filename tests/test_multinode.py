"""A real 2-node Ray cluster on this machine, the smoke search against it, and its results.

Two ``ray start`` nodes on loopback (1 CPU each, explicit memory and object store, each with
its own temp dir and free ports, token authentication with a token made for this test), the
search driver as a subprocess with ``--address`` and a storage folder both nodes share. Then:
every trial ran on one of the two nodes and both nodes ran trials (both share 127.0.0.1, so
the trial's worker pid, found in one node's log folder, tells them apart); MLflow holds one
FINISHED parent with one FINISHED child per trial, tagged with stage and family. The cluster
is stopped by its own processes only (``ray stop`` would stop every Ray on the machine),
also when a test fails.
"""

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("local_cluster", ROOT / "scripts" / "local_cluster.py")
local_cluster = importlib.util.module_from_spec(_spec)
sys.modules["local_cluster"] = local_cluster
_spec.loader.exec_module(local_cluster)

GAME = "facemed"


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


@pytest.fixture(scope="module")
def search(cluster):
    """The smoke search against the cluster; beside it, a client with a wrong token (its
    ~20 s of connection retries overlap the search instead of adding to the test)."""
    root = cluster.root
    bad = root / "wrong_token"
    bad.write_text("0" * 64)
    code = f"import ray; ray.init(address={cluster.address!r}, logging_level='ERROR'); print('CONNECTED')"
    intruder = subprocess.Popen([sys.executable, "-c", code], env=dict(cluster.full_env(), RAY_AUTH_TOKEN_PATH=str(bad)),
                                cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # The two stage-1 trials are slowed (tests/fault_search.py) so that they must run at the
    # same time, one per node: smoke trials otherwise finish in under a second, and Tune
    # hands the next one to the warm actor that just finished rather than start another.
    faults = {"stage1-l0.01-s0": "slow", "stage1-l0.05-s0": "slow"}
    cmd = [sys.executable, str(ROOT / "tests" / "fault_search.py"), "--game", GAME, "--profile", "smoke",
           "--address", cluster.address, "--storage", str(root / "runs"),
           "--tracking-uri", f"sqlite:///{root / 'mlflow.db'}", "--data-root", str(root / "data"),
           "--cpus-per-trial", "1"]
    try:
        t0 = time.time()
        proc = subprocess.run(cmd, cwd=root, env=dict(cluster.full_env(), PYTHONUNBUFFERED="1",
                                                      FOCUS_TUNE_TEST_FAULTS=json.dumps(faults)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=480)
        seconds = time.time() - t0
        intruder_out, _ = intruder.communicate(timeout=120)
    finally:
        if intruder.poll() is None:
            intruder.kill()
            intruder.wait()
    assert proc.returncode == 0, proc.stdout[-6000:]
    return {"out": proc.stdout, "seconds": seconds, "intruder": (intruder.returncode, intruder_out)}


def test_two_nodes_with_explicit_resources(cluster):
    nodes = cluster.alive_nodes()
    assert len(nodes) == 2
    for n in nodes:
        assert n["Resources"]["CPU"] == 1.0
        assert n["Resources"]["memory"] == 2 * local_cluster.GiB
        assert n["Resources"]["object_store_memory"] == 256 * local_cluster.MiB
    assert sorted(cluster.node_ids.values()) == ["head", "worker1"]


def test_token_auth_is_enforced(search):
    # The right auth mode with a wrong token is refused by the cluster.
    returncode, out = search["intruder"]
    assert returncode != 0 and "CONNECTED" not in out
    assert "InvalidAuthToken" in out, out[-3000:]


def test_search_runs_on_both_nodes_and_mlflow_is_complete(cluster, search):
    out, seconds = search["out"], search["seconds"]
    assert "chosen time-dependent schedule:" in out
    report = local_cluster.verify(cluster, cluster.root / "runs", f"sqlite:///{cluster.root / 'mlflow.db'}",
                                  f"focus-tune/{GAME}")
    state = json.loads((cluster.root / "runs" / f"{GAME}-smoke-seed0" / "search_state.json").read_text())
    assert sorted(report["placement"]) == sorted(state["results"])
    assert all(v is not None for v in state["results"].values())
    assert min(report["trials_per_node"].values()) >= 1
    print(f"\ncluster start {cluster.start_seconds:.0f}s, search {seconds:.0f}s, "
          f"trials per node {report['trials_per_node']}")


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
