"""Bad inputs and interrupts through the real search CLI (subprocesses), as a user meets them.

Every bad input: exit code 2, one line on stderr naming the flag, file or field and what is
expected, a bounded quote of the value, and nothing left behind (no state file, no MLflow
store, no run folder). The slow ones start Ray: resources that can never be met, the
sockets of the local Ray, and a second Ctrl-C (exit at once). The first Ctrl-C (stop, save,
KILLED, exit 130, --resume continues) is held on the search of
tests/test_replicate.py's smoke replication, which stops one and resumes it anyway.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from netstat import descendants
from smoke_search import search_runs
from test_data_store import _rewrite_marginals, write_small

ROOT = Path(__file__).resolve().parent.parent
RUN = "facemed-smoke-seed0"


def search(cwd: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "focus_tune.search", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, PYTHONUNBUFFERED="1"))


def assert_one_line_error(result: subprocess.CompletedProcess, *words: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout[-2000:], result.stderr[-3000:])
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and len(err) < 700, err[:2000]
    assert "Traceback" not in result.stdout + result.stderr
    for w in words:
        assert w in err, (w, err)
    return err


def assert_nothing_left(cwd: Path) -> None:
    assert not (cwd / "mlflow.db").exists(), "an MLflow store was created"
    assert not list(cwd.rglob("search_state.json")), "a search state was created"
    assert not (cwd / "runs").exists(), "a run folder was created"


@pytest.fixture(scope="module")
def smoke_data(tmp_path_factory) -> Path:
    """The built-in FaceMed smoke dataset, built once (the data root the searches use)."""
    root = tmp_path_factory.mktemp("data")
    subprocess.run([sys.executable, "-m", "focus_tune.data", "build", "--game", "facemed", "--profile", "smoke",
                    "--out", str(root / RUN)], check=True, capture_output=True, timeout=300)
    return root


@pytest.mark.parametrize("argv, words", [
    (["--seed", "-1"], ["argument --seed", "expected an integer >= 0", "'-1'"]),
    (["--seed", "7" * 300], ["argument --seed", "at most 2147483647"]),
    (["--max-concurrent", "-1"], ["argument --max-concurrent", ">= 1"]),
    (["--max-concurrent", "0"], ["argument --max-concurrent", ">= 1"]),
    (["--gpus-per-trial", "-0.5"], ["argument --gpus-per-trial", ">= 0"]),
    (["--gpus-per-trial", "1.5"], ["--gpus-per-trial 1.5", "whole GPUs"]),
    (["--cpus-per-trial", "0"], ["argument --cpus-per-trial", "> 0"]),
    (["--max-retries", "-2"], ["argument --max-retries", ">= 0"]),
    (["--dry-run", "--gpus-per-trial", "2", "--cluster-gpus", "1"], ["--gpus-per-trial 2", "--cluster-gpus 1"]),
    (["--dry-run", "--cluster-gpus", "2", "--trial-minutes", "-3"], ["argument --trial-minutes", "> 0"]),
    (["--dry-run", "--cluster-gpus", "0"], ["argument --cluster-gpus", ">= 1"]),
    (["--cluster-gpus", "2"], ["use them with --dry-run"]),
    (["--data", "/no/such/folder"], ["--data /no/such/folder", "not a folder"]),
])
def test_bad_flags(tmp_path, argv, words):
    assert_one_line_error(search(tmp_path, "--game", "facemed", "--profile", "smoke", *argv), *words)
    assert_nothing_left(tmp_path)


def test_yaml_alias_bomb_and_deep_nesting(tmp_path):
    from test_config import _alias_bomb

    text = (ROOT / "search_spaces" / "facemed.yaml").read_text()
    (tmp_path / "bomb.yaml").write_text(text.replace("scenario: facemed", f"scenario: {_alias_bomb()}"))
    (tmp_path / "deep.yaml").write_text(text.replace("scenario: facemed", "scenario: " + "[" * 20000 + "]" * 20000))
    assert_one_line_error(search(tmp_path, "--game", "facemed", "--space", "bomb.yaml", "--dry-run"),
                          "bomb.yaml", "YAML aliases")
    assert_one_line_error(search(tmp_path, "--game", "facemed", "--space", "deep.yaml", "--dry-run"),
                          "deep.yaml", "nested deeper than 32 levels")


def test_k2_with_300_digits(tmp_path):
    text = (ROOT / "search_spaces" / "facemed.yaml").read_text()
    assert "k2: [" in text
    (tmp_path / "k2.yaml").write_text(text.replace("k2: [", "k2: [" + "1" * 300 + ", ", 1))
    assert_one_line_error(search(tmp_path, "--game", "facemed", "--space", "k2.yaml", "--dry-run"),
                          "k2.yaml", "grid.k2[0]", "is too large")


def test_dataset_of_another_game_and_nan_marginals(tmp_path):
    write_small(tmp_path / "toy")  # its manifest says game "toy"
    for flags in ([], ["--dry-run"]):
        assert_one_line_error(search(tmp_path, "--game", "facemed", "--data", "toy", *flags),
                              "--data toy", "scenario 'toy', not --game facemed")
    write_small(tmp_path / "nan")
    manifest = tmp_path / "nan" / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"game": "toy"', '"game": "facemed"'))
    _rewrite_marginals(tmp_path / "nan", lambda m: m.__setitem__((0, 0), float("nan")))
    for flags in ([], ["--dry-run"]):
        assert_one_line_error(search(tmp_path, "--game", "facemed", "--data", "nan", *flags),
                              "test.parquet", "NaN")
    assert_nothing_left(tmp_path)


def test_unwritable_storage(tmp_path, smoke_data):
    (tmp_path / "a-file").write_text("")
    base = ["--game", "facemed", "--profile", "smoke", "--data-root", str(smoke_data)]
    assert_one_line_error(search(tmp_path, *base, "--storage", "a-file"), "--storage a-file", "is a file")
    assert_one_line_error(search(tmp_path, *base, "--storage", "/proc/focus-runs"),
                          "--storage /proc/focus-runs", "cannot write")
    assert_nothing_left(tmp_path)


def test_truncated_state_with_resume(tmp_path, smoke_data):
    state = tmp_path / "runs" / RUN / "search_state.json"
    state.parent.mkdir(parents=True)
    state.write_text('{"results": {"none-s0": 0.1')
    err = assert_one_line_error(search(tmp_path, "--game", "facemed", "--profile", "smoke", "--data-root",
                                       str(smoke_data), "--resume"), str(state.relative_to(tmp_path)), "unreadable")
    assert "move it away" in err and not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_resources_that_no_node_has_fail_fast(tmp_path, smoke_data):
    t0 = time.time()
    err = assert_one_line_error(search(tmp_path, "--game", "facemed", "--profile", "smoke", "--data-root",
                                       str(smoke_data), "--gpus-per-trial", "0.3"),
                                "needs 1 CPU + 0.3 GPU", "no node has enough GPU", "0 GPU", "--wait-for-resources")
    assert time.time() - t0 < 120, err
    assert_nothing_left(tmp_path)


LIST_SOCKETS = r"""
import json, os, sys, types
sys.path.insert(0, sys.argv[1])
from netstat import descendants, sockets_of
from focus_tune.search import ray_runtime
ray_runtime.start_ray(types.SimpleNamespace(address=None))
import ray
ray.get(ray.remote(lambda: 1).remote())  # a worker too
rows = sockets_of(descendants(os.getpid()))
gcs = ray.get_runtime_context().gcs_address
for r in rows:  # /proc/PID/environ is the environment at exec: this process set its own later
    if r["pid"] == os.getpid():
        r["environ"] = dict(os.environ)
print("ROWS=" + json.dumps([{k: r[k] for k in ("pid", "name", "address", "port")}
                            | {"auth": r["environ"].get("RAY_AUTH_MODE")} for r in rows]))
print("GCS=" + gcs, flush=True)
sys.stdin.readline()  # keep Ray up while the test knocks without the token
ray.shutdown()
"""

KNOCK = r"""
import sys
import ray
try:
    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
except Exception as err:
    print("REFUSED", type(err).__name__, str(err)[:200])
else:
    print("ACCEPTED")
"""


def _http_refused(row: dict) -> bool:
    """Whether an HTTP request without the token to this socket is refused with 401."""
    import urllib.error
    import urllib.request

    host = "127.0.0.1" if row["address"] in ("0.0.0.0", "::") else row["address"]
    try:
        urllib.request.urlopen(f"http://{host}:{row['port']}/", timeout=10)
    except urllib.error.HTTPError as err:
        return err.code == 401
    except OSError:
        return False
    return False


@pytest.mark.slow
def test_local_ray_requires_its_token(tmp_path):
    """Ray 2.60 binds its GCS, raylet and workers to every interface (no loopback-only switch):
    every listening socket of the local Ray must belong to a process in token mode, and a
    client without the token is refused."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    proc = subprocess.Popen([sys.executable, "-c", LIST_SOCKETS, str(ROOT / "tests")], cwd=tmp_path, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = {}
        while len(lines) < 2:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()[-3000:]
            if line.startswith(("ROWS=", "GCS=")):
                key, value = line.rstrip("\n").split("=", 1)
                lines[key] = value
        rows = json.loads(lines["ROWS"])
        assert rows, "no listening socket found"
        for r in rows:
            # /proc/PID/environ of a process that is still starting can be partial (the
            # runtime-env agent was seen with 24-44 variables): such a socket must then refuse
            # a request without the token itself.
            assert r["address"] in ("127.0.0.1", "::1") or r["auth"] == "token" or _http_refused(r), r
        assert {"gcs_server" in r["name"] for r in rows} >= {True}, rows
        # Both knocks at once, with RAY_NUM_REDIS_GET_RETRIES=2 (Ray's default 20): a refusal is
        # final, the client's retries only made each knock take ~20 s.
        knocks = [subprocess.Popen([sys.executable, "-c", KNOCK, lines["GCS"]], cwd=tmp_path,
                                   env=dict(client_env, RAY_NUM_REDIS_GET_RETRIES="2"),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for client_env in (env, dict(env, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="0" * 64))]
        for knock in knocks:
            out, err = knock.communicate(timeout=120)
            assert "REFUSED" in out and "ACCEPTED" not in out, out + err[-2000:]
            assert "InvalidAuthToken" in err, err[-2000:]  # refused for its token, not for a slow GCS
    finally:
        proc.stdin.close()
        proc.wait(timeout=120)


def _start(cwd: Path, data_root: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "focus_tune.search", "--game", "facemed", "--profile", "smoke",
                             "--data-root", str(data_root)], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))


@pytest.mark.slow
def test_second_ctrl_c_exits_at_once_and_leaves_no_process(tmp_path, smoke_data):
    proc = _start(tmp_path, smoke_data)
    for line in proc.stdout:
        if "epoch 1/" in line:
            break
    tree = descendants(proc.pid)
    proc.send_signal(signal.SIGINT)
    seen = []
    for line in proc.stdout:  # the second Ctrl-C once the driver has taken the first
        seen.append(line)
        if "SIGINT: stopping the running trials" in line:
            break
    else:
        pytest.fail(f"the search ended ({proc.wait()}) without taking the first Ctrl-C:\n{''.join(seen)[-3000:]}")
    t0 = time.time()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    assert proc.returncode == 130 and time.time() - t0 < 10
    deadline = time.time() + 15
    while time.time() < deadline:
        alive = [p for p in tree[1:] if Path(f"/proc/{p}").exists()
                 and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
        if not alive:
            break
        time.sleep(0.5)
    assert not alive, f"processes of the search still alive: {alive}"


@pytest.mark.slow
def test_a_search_that_fails_midway_marks_its_parent_failed(tmp_path, smoke_data):
    """Every stage-1 trial turns NaN: the plan cannot pick lambda_1. The search stops with one
    line, its MLflow parent is FAILED with the reason, and the finished trials stay resumable."""
    faults = {"stage1-l0.01-s0": "nan", "stage1-l0.05-s0": "nan"}
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "fault_search.py"), "--game", "facemed", "--profile", "smoke",
         "--data-root", str(smoke_data)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONUNBUFFERED="1", FOCUS_TUNE_TEST_FAULTS=json.dumps(faults)))
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    assert "stage1" in result.stderr and "Traceback" not in result.stderr
    assert "rerun with --resume" in result.stderr
    client, exp, parents, _ = search_runs(tmp_path / "mlflow.db", "focus-tune/facemed")
    assert [p.info.status for p in parents] == ["FAILED"]
    assert "StageFailed" in parents[0].data.tags["stop_reason"]
    kids = client.search_runs([exp.experiment_id], filter_string="tags.kind != 'search'")
    assert "RUNNING" not in {k.info.status for k in kids}
    saved = json.loads((tmp_path / "runs" / RUN / "search_state.json").read_text())["results"]
    assert saved["stage1-l0.01-s0"] is None and saved["stage1-l0.05-s0"] is None  # kept, not rerun on --resume
