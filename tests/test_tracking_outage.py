"""A tracking server (a real `mlflow server`, sqlite behind it, proxied artifacts, reached
through a relay the test opens and closes) that goes away and comes back: a call made while
it is down waits, says so on one line, and succeeds once it is back; a 4xx answer is not
waited for; a server that stays away ends with TrackingUnavailable. The slow tests take the
server away in the middle of a real search."""

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

from focus_tune.search.driver import UNSENT_FILE
from focus_tune.tracking.backend import create_local_store
from smoke_search import GAME, RUN
from test_tracking import dataset, job, manifest  # noqa: F401  (fixtures and a trial job)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Relay:
    """A TCP relay on a port of its own in front of ``target``: while open it forwards every
    connection; ``close()`` refuses new connections and cuts the open ones (connection refused,
    a connection closed mid-request: what a client sees of a server that went away) and
    ``open()`` is back at once. An outage then lasts as long as the test decides, whatever the
    server's start-up would take on a loaded machine."""

    def __init__(self, target: int):
        self.port, self.target = _free_port(), target
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def is_open(self) -> bool:
        return self._listener is not None

    def open(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() below (Linux)
            except OSError:
                pass
            listener.close()
        with self._lock:
            cut, self._open = self._open, set()
        for s in cut:
            _shut(s)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        """a -> b until either side ends; then both ends shut (which ends the other direction's
        thread too) and a closed."""
        try:
            while data := a.recv(1 << 16):
                b.sendall(data)
        except OSError:
            pass
        finally:
            _shut(a)
            _shut(b)
            with self._lock:
                self._open.discard(a)
            a.close()


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class Server:
    """`mlflow server` on 127.0.0.1 (one worker), its store and artifacts under ``root``, reached
    at ``uri`` through a :class:`Relay`: ``stop()`` takes the server away as its clients see it
    and ``start()`` brings it back at once (the first ``start()`` also starts the server process;
    ``close()`` ends it)."""

    def __init__(self, root: Path):
        self.root, self.proc = root, None
        self.server_port = _free_port()
        self.relay = Relay(self.server_port)
        self.port = self.relay.port
        self.uri = f"http://127.0.0.1:{self.port}"
        root.mkdir(parents=True, exist_ok=True)
        create_local_store(f"sqlite:///{root / 'mlflow.db'}")  # the server's store, without its migrations

    @property
    def up(self) -> bool:
        return self.proc is not None and self.relay.is_open

    def start(self, timeout: float = 120) -> None:
        if self.proc is None:
            self._launch(timeout)
        if not self.relay.is_open:
            self.relay.open()

    def stop(self) -> None:
        self.relay.close()

    def _launch(self, timeout: float) -> None:
        env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        with open(self.root / "server.log", "a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.server_port),
                 "--workers", "1", "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
                 "--serve-artifacts", "--artifacts-destination", str(self.root / "artifacts")],
                cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + timeout
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.server_port}/health", timeout=2)
                return
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    self.close()
                    pytest.fail("the server did not start: " + (self.root / "server.log").read_text()[-3000:])
                time.sleep(0.5)

    def close(self) -> None:
        self.relay.close()
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


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    """One server for the tests below (a start costs ~7 s here); each test may stop it."""
    srv = Server(tmp_path_factory.mktemp("server"))
    yield srv
    srv.close()


@pytest.fixture
def server(shared_server):
    """The shared server, running when the test begins (an earlier test may have left it stopped)."""
    if not shared_server.up:
        shared_server.start()
    return shared_server


def test_a_call_waits_for_the_server_and_a_4xx_is_not_retried(server, tmp_path, monkeypatch):
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from focus_tune.errors import TrackingUnavailable
    from focus_tune.tracking.outage import HTTP_DEFAULTS, PatientClient

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
    threading.Timer(3, server.start).start()  # back after 3 s
    t0 = time.time()
    client.log_metric(run_id, "val/ece", 0.5, timestamp=1000, step=1)  # waits
    client.log_artifact(run_id, str(tmp_path / "a.txt"))  # proxied artifacts, right after
    waited = time.time() - t0
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"MLflow at {server.uri}: unreachable (ConnectionError); retrying for up to 2 min")
    assert lines[1].startswith(f"MLflow at {server.uri}: reachable again after ")
    assert waited >= 3
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
    from mlflow.tracking import MlflowClient

    from focus_tune.tracking.outage import PatientClient

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


def test_what_the_patience_did_not_get_through_is_sent_on_resume(server, tmp_path, manifest):  # noqa: F811
    """The trial records that met the end of the patience are kept in the run folder; the
    Tracker of the resumed search sends them and the trial's run ends as it would have."""
    from focus_tune.errors import TrackingUnavailable
    from focus_tune.tracking import Tracker

    unsent = tmp_path / UNSENT_FILE
    tracker = Tracker(server.uri, "outage", "search", unsent=unsent)
    run_id = tracker.start_trial(job(manifest))
    tid = job(manifest).trial_id
    server.stop()
    tracker.client.patience = 2
    tracker.client.out = io.StringIO()
    with pytest.raises(TrackingUnavailable):
        tracker.log_result(tid, {"epoch": 3, "timestamp": 1700000000, "val/ece": 0.25, "train/loss": 1.5})
    with pytest.raises(TrackingUnavailable):  # at once now
        tracker.end_trial(tid, failed=False)
    assert len(json.loads(unsent.read_text())) == 2
    server.start()
    again = Tracker(server.uri, "outage", "search", parent_run_id=tracker.parent_run_id, unsent=unsent)
    assert again.send_unsent() == 2 and not unsent.exists()
    run = again.client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.metrics == {"val/ece": 0.25, "train/loss": 1.5}
    assert [(m.step, m.timestamp) for m in again.client.get_metric_history(run_id, "val/ece")] == \
        [(3, 1700000000000)]


def test_ctrl_c_while_waiting_stops_the_waiting_for_good(monkeypatch):
    """An interrupt while the server is away: Interrupted at once, and no later call waits
    (the driver then leaves the runs as they were)."""
    from mlflow.tracking import MlflowClient

    from focus_tune.errors import TrackingUnavailable
    from focus_tune.interrupt import INTERRUPT, Interrupted
    from focus_tune.tracking.outage import HTTP_DEFAULTS, PatientClient

    for key, value in HTTP_DEFAULTS.items():
        monkeypatch.setenv(key, value)
    uri = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    client = PatientClient(MlflowClient(uri), uri, patience=600, out=io.StringIO())
    threading.Timer(4, INTERRUPT.event.set).start()
    t0 = time.time()
    try:
        with pytest.raises(Interrupted):
            client.get_experiment_by_name("x")
    finally:
        INTERRUPT.event.clear()
    assert time.time() - t0 < 15
    with pytest.raises(TrackingUnavailable, match="interrupted"):
        client.get_experiment_by_name("x")


def test_what_counts_as_an_outage():
    import requests
    from mlflow.exceptions import MlflowException, RestException

    from focus_tune.tracking.outage import outage_cause

    def http_error(status):
        response = requests.Response()
        response.status_code = status
        return requests.HTTPError("x", response=response)

    def wrapped(err):  # how MLflow's http_request raises: an MlflowException in the except block
        try:
            raise err
        except Exception:
            try:
                raise MlflowException("API request failed")
            except MlflowException as outer:
                return outer

    def cut_off():  # the server stopped while sending its answer: how requests raises it
        from urllib3.exceptions import IncompleteRead, ProtocolError
        try:
            try:
                raise IncompleteRead(0, 2)
            except IncompleteRead as e:
                raise ProtocolError(f"Connection broken: {e!r}", e) from e
        except ProtocolError as e:
            return requests.exceptions.ChunkedEncodingError(e)

    assert outage_cause(wrapped(requests.ConnectionError("refused"))) == "ConnectionError"
    assert outage_cause(wrapped(requests.ReadTimeout("slow"))) == "ReadTimeout"
    assert outage_cause(wrapped(requests.exceptions.RetryError("503"))).startswith("RetryError")
    assert outage_cause(wrapped(cut_off())) == "ChunkedEncodingError"
    assert outage_cause(http_error(503)) == "HTTP 503"
    assert outage_cause(http_error(404)) is None
    assert outage_cause(RestException({"error_code": "INVALID_PARAMETER_VALUE", "message": "bad"})) is None
    assert outage_cause(ValueError("a bug")) is None


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


def _wait_for_results(work: Path, proc: subprocess.Popen, count: int, lines: list[str], timeout: float = 300) -> dict:
    path, deadline = work / "runs" / RUN / "search_state.json", time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        try:
            state = json.loads(path.read_text())
            if len(state.get("results", {})) >= count:
                return state
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    pytest.fail(f"no {count} finished trials (exit {proc.poll()}):\n" + "".join(lines)[-4000:])


def _check_mlflow(uri: str, work: Path) -> dict:
    """One FINISHED child run per trial with its score, and every training trial with every
    train/ and val/ metric at every epoch (the smoke profile validates each epoch); the parent
    FINISHED, the models and the report logged."""
    from mlflow.tracking import MlflowClient

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
    trained = {tid: run for tid, (run,) in by_trial.items() if "source_trial" not in run.data.tags}
    keys = {k for run in trained.values() for k in run.data.metrics if k.startswith(("train/", "val/"))}
    assert "train/loss" in keys and "val/ece" in keys, keys
    steps = {}
    for tid, (run,) in by_trial.items():
        assert run.info.status == "FINISHED", (tid, run.info.status)
        if tid in trained:
            for key in keys:
                steps[tid, key] = {int(m.step) for m in client.get_metric_history(run.info.run_id, key)}
        score = state["results"][tid]
        assert any(v == pytest.approx(score) for k, v in run.data.metrics.items() if k.startswith("val/")), tid
    epochs = max((max(v) for v in steps.values() if v), default=0)
    missing = {k: v for k, v in steps.items() if v != set(range(1, epochs + 1))}
    assert not missing, missing
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


# The searches' patience below: an outage shorter than this is waited out. The relay brings the
# server back the moment the search says it is gone, and the backoff tries again within 5 s.
PATIENCE_S = 20


def _wait_for_line(proc: subprocess.Popen, lines: list[str], text: str, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while text not in "".join(lines):
        if proc.poll() is not None or time.time() > deadline:
            pytest.fail(f"the search never said {text!r} (exit {proc.poll()}):\n" + "".join(lines)[-3000:])
        time.sleep(0.2)


@pytest.mark.slow
def test_an_outage_is_waited_out_and_one_that_outlasts_the_patience_ends_the_search_resumably(
        server, tmp_path, smoke_data):
    """One search on the module's server, patience 20 s, two outages:

    - the server taken away once two trials have finished, and back as soon as the search says
      it is unreachable: the search waits, says so on one line and again when the server is
      back, and goes on;
    - taken away again once one more trial has finished, and kept away: exit 2 after the
      patience with one error line, the state kept;

    then --resume with the server back finishes with complete MLflow data, every trial once."""
    work = tmp_path / "work"
    work.mkdir()
    proc, lines = _search(work, smoke_data, server.uri, env={"FOCUS_TUNE_TRACKING_PATIENCE_S": str(PATIENCE_S)}), []
    reader = _read_out(proc, lines)
    try:
        # A brief outage: waited out. Back as soon as the search has met it.
        _wait_for_results(work, proc, 2, lines)
        server.stop()
        t_stop = time.time()
        _wait_for_line(proc, lines, f"MLflow at {server.uri}: unreachable (")
        server.start()
        print(f"server away for {time.time() - t_stop:.0f} s")
        _wait_for_line(proc, lines, f"MLflow at {server.uri}: reachable again after ")
        out = "".join(lines)
        assert f"MLflow at {server.uri}: unreachable (" in out, out[-4000:]
        assert f"retrying for up to {PATIENCE_S} s" in out, out[-4000:]

        # An outage that outlasts the patience: the search ends, resumably.
        done = len(json.loads((work / "runs" / RUN / "search_state.json").read_text())["results"])
        _wait_for_results(work, proc, done + 1, lines)
        server.stop()
        proc.wait(timeout=PATIENCE_S + 120)
        reader.join(5)
        out = "".join(lines)
        print(out[-1500:])
        assert proc.returncode == 2, out[-4000:]
        assert "Traceback" not in out, out[-4000:]
        assert out.count(f"MLflow at {server.uri}: unreachable (") == 2, out[-4000:]
        errors = [line for line in out.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "unreachable for" in errors[0] and "--resume" in errors[0], out[-3000:]
        assert (work / "runs" / RUN / "search_state.json").exists()
        unsent = work / "runs" / RUN / UNSENT_FILE
        print(f"kept for --resume: {unsent.read_text() if unsent.exists() else 'nothing'}"[:300])

        server.start()
        resumed = _search(work, smoke_data, server.uri, "--resume")
        out, _ = resumed.communicate(timeout=400)
        assert resumed.returncode == 0, out[-4000:]
        assert not unsent.exists()
        state = _check_mlflow(server.uri, work)
        assert state["results"] and all(v is not None for v in state["results"].values()), state["results"]
    finally:
        proc.kill()
