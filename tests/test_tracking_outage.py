"""A tracking server (a real `mlflow server`, sqlite behind it, proxied artifacts) that goes
away and comes back: a call made while it is down waits, says so on one line, and succeeds
once it is back; a 4xx answer is not waited for; a server that stays away ends with
TrackingUnavailable. The slow tests stop the server in the middle of a real search."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from smoke_search import GAME, RUN


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`mlflow server` on 127.0.0.1 (one worker), its store and artifacts under ``root``; stop
    and start it again on the same port and store."""

    def __init__(self, root: Path):
        self.root, self.port, self.proc = root, _free_port(), None
        self.uri = f"http://127.0.0.1:{self.port}"
        root.mkdir(parents=True, exist_ok=True)

    def start(self, timeout: float = 120) -> None:
        env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        log = open(self.root / "server.log", "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1", "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
             "--serve-artifacts", "--artifacts-destination", str(self.root / "artifacts")],
            cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{self.uri}/health", timeout=2)
                return
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    self.stop()
                    pytest.fail("the server did not start: " + (self.root / "server.log").read_text()[-3000:])
                time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass
        self.proc = None


@pytest.fixture
def server(tmp_path):
    srv = Server(tmp_path / "server")
    srv.start()
    yield srv
    srv.stop()


def test_a_call_waits_for_the_server_and_a_4xx_is_not_retried(server, tmp_path, monkeypatch):
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from focus_tune.tracking.outage import HTTP_DEFAULTS, PatientClient, TrackingUnavailable

    for key, value in HTTP_DEFAULTS.items():
        monkeypatch.setenv(key, value)
    out = io.StringIO()
    client = PatientClient(MlflowClient(server.uri), server.uri, patience=120, out=out)
    run_id = client.create_run(client.create_experiment("outage")).info.run_id
    (tmp_path / "a.txt").write_text("kept")

    # a bad parameter is an error at once, not an outage
    t0 = time.time()
    with pytest.raises(MlflowException):
        client.get_run("no-such-run")
    assert time.time() - t0 < 5 and out.getvalue() == ""

    server.stop()
    threading.Timer(8, server.start).start()  # back after 8 s (plus its start-up)
    t0 = time.time()
    client.log_metric(run_id, "val/ece", 0.5, timestamp=1000, step=1)  # waits
    client.log_artifact(run_id, str(tmp_path / "a.txt"))  # proxied artifacts, right after
    waited = time.time() - t0
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"MLflow at {server.uri}: unreachable (ConnectionError); retrying for up to 2 min")
    assert lines[1].startswith(f"MLflow at {server.uri}: reachable again after ")
    assert waited >= 8
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "val/ece")] == [(1, 0.5)]
    assert [a.path for a in client.list_artifacts(run_id)] == ["a.txt"]

    # a server that stays away: TrackingUnavailable after the patience, then at once
    server.stop()
    client.patience = 3
    t0 = time.time()
    with pytest.raises(TrackingUnavailable, match=r"unreachable for \d+ s .*--resume"):
        client.set_tag(run_id, "k", "v")
    assert 3 <= time.time() - t0 < 15
    t0 = time.time()
    with pytest.raises(TrackingUnavailable):
        client.set_tag(run_id, "k", "v")
    assert time.time() - t0 < 1


def test_a_run_created_before_its_answer_was_lost_is_not_created_twice(server, tmp_path):
    """create_run is not idempotent: a retry first asks whether the earlier try made the run."""
    from focus_tune.tracking.outage import PatientClient

    from mlflow.tracking import MlflowClient

    out = io.StringIO()
    client = PatientClient(MlflowClient(server.uri), server.uri, patience=60, out=out)
    exp = client.create_experiment("dup")
    tries = []

    def create_then_lose_the_answer():
        run = client.raw.create_run(exp, tags={"trial_id": "t1"})
        tries.append(run.info.run_id)
        if len(tries) == 1:
            raise ConnectionError("the answer was lost")
        return run

    def found():
        runs = client.raw.search_runs([exp], filter_string="tags.trial_id = 't1'")
        return runs[0] if runs else None

    run = client.call(create_then_lose_the_answer, found=found)
    assert tries == [run.info.run_id]
    assert len(client.raw.search_runs([exp])) == 1
    assert "unreachable (ConnectionError)" in out.getvalue()


# -- a real search ----------------------------------------------------------------------------

def _search(work: Path, data: Path, uri: str, *extra: str, env: dict | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "focus_tune.search", "--game", GAME, "--profile", "smoke", "--storage", "runs",
           "--data-root", str(data), "--tracking-uri", uri, *extra]
    return subprocess.Popen(cmd, cwd=work, env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _read_out(proc: subprocess.Popen, lines: list[str]) -> threading.Thread:
    thread = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    thread.start()
    return thread


def _wait_for_results(work: Path, proc: subprocess.Popen, count: int, timeout: float = 300) -> dict:
    path, deadline = work / "runs" / RUN / "search_state.json", time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        try:
            state = json.loads(path.read_text())
            if len(state.get("results", {})) >= count:
                return state
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    pytest.fail(f"no {count} finished trials (exit {proc.poll()})")


def _tune_results(work: Path, tid: str) -> list[dict]:
    """Every result a trial reported, as Ray Tune recorded them (every attempt of the search)."""
    out = []
    for path in (work / "runs" / RUN).glob(f"search*/{tid}/result.json"):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def _check_mlflow(uri: str, work: Path) -> dict:
    """One FINISHED child run per trial holding every metric of every result Tune recorded and
    the trial's score, the parent FINISHED, the models and the report logged."""
    from mlflow.tracking import MlflowClient

    from focus_tune.tracking.store import _is_metric

    state = json.loads((work / "runs" / RUN / "search_state.json").read_text())
    client = MlflowClient(uri)
    parent = client.get_run(state["parent_run_id"])
    assert parent.info.status == "FINISHED"
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'", max_results=1000)
    by_trial: dict[str, list] = {}
    for run in children:
        by_trial.setdefault(run.data.tags["trial_id"], []).append(run)
    assert set(by_trial) == set(state["results"]), "a trial without a run, or a run without a trial"
    assert all(len(runs) == 1 for runs in by_trial.values()), "a duplicate child run"
    checked = 0
    for tid, (run,) in by_trial.items():
        assert run.info.status == "FINISHED", (tid, run.info.status)
        histories = {}
        for result in _tune_results(work, tid):
            for key, value in result.items():
                if _is_metric(key, value):
                    if key not in histories:
                        histories[key] = {(int(m.step), m.value) for m in client.get_metric_history(run.info.run_id, key)}
                    epoch = int(result["epoch"])
                    assert any(step == epoch and v == pytest.approx(value) for step, v in histories[key]), \
                        (tid, key, epoch)
                    checked += 1
        score = state["results"][tid]
        assert any(v == pytest.approx(score) for k, v in run.data.metrics.items() if k.startswith("val/")), tid
    assert checked > 100
    models = client.search_logged_models([parent.info.experiment_id],
                                         filter_string=f"source_run_id = '{parent.info.run_id}'")
    assert sorted(m.name for m in models if m.status.name == "READY") == \
        ["model-constant", "model-none", "model-time-dependent"]
    assert "report" in [a.path for a in client.list_artifacts(parent.info.run_id)]
    return state


@pytest.fixture(scope="module")
def smoke_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    subprocess.run([sys.executable, "-m", "focus_tune.data", "build", "--game", GAME, "--profile", "smoke",
                    "--out", str(root / RUN)], check=True, capture_output=True, timeout=300)
    return root


@pytest.mark.slow
def test_search_survives_a_server_outage(tmp_path, smoke_data):
    """The server stopped for ~35 s once trials have finished: the search waits and ends with
    every trial scored and everything in MLflow, once."""
    server = Server(tmp_path / "server")
    server.start()
    work = tmp_path / "work"
    work.mkdir()
    proc, lines = _search(work, smoke_data, server.uri), []
    reader = _read_out(proc, lines)
    try:
        _wait_for_results(work, proc, 2)
        server.stop()
        time.sleep(35)
        server.start()
        proc.wait(timeout=400)
        reader.join(5)
        out = "".join(lines)
        assert proc.returncode == 0, out[-4000:]
        assert f"MLflow at {server.uri}: unreachable (" in out, out[-4000:]
        assert f"MLflow at {server.uri}: reachable again after " in out
        state = _check_mlflow(server.uri, work)
        assert state["results"] and all(v is not None for v in state["results"].values()), state["results"]
    finally:
        proc.kill()
        server.stop()


@pytest.mark.slow
def test_a_server_that_stays_away_ends_the_search_resumably(tmp_path, smoke_data):
    """Patience 5 s: exit 2 with one error line, the state kept; --resume with the server back
    finishes with complete MLflow data."""
    server = Server(tmp_path / "server")
    server.start()
    work = tmp_path / "work"
    work.mkdir()
    proc, lines = _search(work, smoke_data, server.uri, env={"FOCUS_TUNE_TRACKING_PATIENCE_S": "5"}), []
    reader = _read_out(proc, lines)
    try:
        _wait_for_results(work, proc, 2)
        server.stop()
        proc.wait(timeout=120)
        reader.join(5)
        out = "".join(lines)
        assert proc.returncode == 2, out[-4000:]
        assert "Traceback" not in out, out[-4000:]
        assert "retrying for up to 5 s" in out
        errors = [line for line in out.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "unreachable for" in errors[0] and "--resume" in errors[0], out[-3000:]
        assert (work / "runs" / RUN / "search_state.json").exists()
        server.start()
        resumed = _search(work, smoke_data, server.uri, "--resume")
        out, _ = resumed.communicate(timeout=400)
        assert resumed.returncode == 0, out[-4000:]
        state = _check_mlflow(server.uri, work)
        assert all(v is not None for v in state["results"].values()), state["results"]
    finally:
        proc.kill()
        server.stop()
