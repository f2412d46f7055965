"""A randomized fault soak over whole smoke searches: faults at random moments, not only where
the tests put them (docs/RELIABILITY.md, "The soak").

Each run (a seed) takes one of two scenarios, the built-in FaceMed (``data build``, then the
search with ``--data-root``) or a dataset of one's own with right-censored items
(``data import-table`` of a CSV of PNGs written here, then ``--data``), both on the smoke
profile, and a schedule of faults drawn from ``random.Random(f"focus-tune-soak-{seed}")``:

- ``data_kill``: SIGKILL of the data command (``build`` / ``import-table``) at a uniform moment
  of its undisturbed duration, then the same command again;
- ``driver_kill``: SIGKILL of the search driver (its pid only, as ``kill -9 PID``);
- ``worker_kill``: SIGKILL of one of the search's Ray trial workers (``ray::ImplicitFunc``);
- ``driver_sigint``: SIGINT of the driver (Ctrl-C);
- ``tracking_restart``: the MLflow tracking server (``mlflow server``, sqlite store, proxied
  artifacts, ``--workers 1``, on 127.0.0.1) stopped (SIGTERM to its process group) and started
  again on the same port and store after 1-15 s; only in runs with ``--tracking-uri``
  (a third of the runs);
- ``disk_full``: the search's ``--storage``, a 64 MB tmpfs, filled up; the space is freed once
  the driver has ended. Where no tmpfs can be mounted (not root), the runs use the disk and
  this kind is left out (the summary says so).

A search fault fires at ``u * D`` seconds after its attempt started (or after the fault before
it, when that one left the driver running), ``u`` uniform on [0, 1) from the seed and ``D`` the
expected rest of the attempt: the undisturbed search's wall time T scaled by the share of trials
not yet finished (``D = T * (0.35 + 0.55 * left / total)``: start-up and outputs are about a third;
a resumed driver, Ray warm in the page cache, starts faster than the baseline's first one).
T is measured, not assumed: the median of the last :data:`TIMING_WINDOW` whole undisturbed
searches of this scenario (and server or not) on this commit, the baseline's the first of them
and then every attempt of a run that started with no trial done and ran to exit 0 with no
fault; a data fault's moment is ``u`` times the median of the last undisturbed data commands'
seconds (each run's last one). A baseline timed while the machine was busier than during the
runs (131-147 s against runs of 25-40 s) had put 96 of 126 drawn faults after the search's end.
A resumed attempt is not a measurement of T: it takes 0.5-1.1 T whatever is left (start-up,
restoring, the finals), more than the share above says, which only moves its faults earlier.
A fault whose moment falls after the driver ended is recorded as not reached. After a fault that
ends the driver the runner reruns the same command with ``--resume``, until the search exits 0.

Every wait is bounded (the numbers below); every server is on 127.0.0.1. The runner makes itself
a child subreaper (``PR_SET_CHILD_SUBREAPER``), so a process of the search that outlives its
driver is re-parented to the runner and cannot hide: ``no_process_left`` lists them.

Invariants, each a named check (a failure prints ``VIOLATION seed=S check=NAME: ...`` and the
command that replays the seed):

- ``data_complete_or_absent`` after each killed data command: the ``--out`` folder is absent or
  ``load_dataset`` verifies it (manifest hashes); ``data_rerun_exit_0``, ``dataset_verifies``;
- per attempt: ``exit_as_expected`` (SIGKILL -9, SIGINT 130, a full disk 2 with one ``error:`` line
  and no traceback, nothing: 0; 0 also when the search ended first), ``no_process_left`` (within
  60 s; after a SIGKILL of the driver within 120 s, watched while the resume goes on: Ray 2.60's
  dashboard and runtime-env agents first wait 60 s on the dead GCS; ``linger_s`` in the rows),
  ``lock_released`` (every end but a SIGKILL: no lock of this attempt's driver is left; one of an
  earlier, SIGKILLed attempt may be, when this one stopped before taking it over), ``state_parses``;
- at the end: ``final_exit_0``; ``results_csv_identical`` (byte for byte the undisturbed search's
  on this machine and code, run first as the baseline); ``mlflow_one_child_per_trial`` (each
  trial of the state one child run, FINISHED, or FAILED where its score is None);
  ``mlflow_parent_finished`` (one parent, FINISHED); ``mlflow_none_running``;
  ``no_stray_tmp`` (no temporary file or folder of ours under the run folder or the data,
  listed by name); ``lock_released``, ``no_process_left``, ``dataset_verifies``.

Usage (run it from a worktree at a fixed commit, so the code under test does not move)::

    git worktree add /work/soak-wt HEAD
    cd SCRATCH && PYTHONPATH=/work/soak-wt nice -n 10 python /path/to/benchmarks/fault_soak.py \\
        --work soak --runs 50            # seeds 0..49; rows appended to soak/rows.jsonl
    python benchmarks/fault_soak.py --work soak --summary          # the figures
    python benchmarks/fault_soak.py --work soak --seeds 7 --rows replay.jsonl   # replay one seed

The soak resumes: a seed with a row in ``--rows`` is skipped (a run cut off mid-way is run
again from its start). Not part of the test suite: tests/test_fault_soak.py checks its plan and its
timing; tests/test_soak_regressions.py holds the violations it found, each a fixed point.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import errno
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

PY = sys.executable
KINDS = ("data_kill", "driver_kill", "worker_kill", "driver_sigint", "tracking_restart", "disk_full")
SEARCH_WEIGHTS = {"driver_kill": 4.0, "worker_kill": 2.0, "driver_sigint": 2.0, "disk_full": 1.5,
                  "tracking_restart": 3.0}
TRACKED_SHARE = 1 / 3  # runs with an MLflow server (--tracking-uri)
STORE_MB = 64  # the tmpfs --storage
PROCESS_GRACE_S = 60  # the processes of a driver that ended (not SIGKILLed) must be gone within this
# those of a SIGKILLed driver: Ray 2.60's agents wait 60 s on the dead GCS first (76 s measured under load)
LINGER_LIMIT_S = 120
SIGINT_LIMIT_S = 180  # a Ctrl-C'd driver must end within this
DISK_FULL_LIMIT_S = 300  # a driver on a full disk must end within this
WORKER_WAIT_S = 30  # how long a worker_kill waits for a trial worker to exist
SERVER_START_S = 240  # an mlflow server must answer /health within this
ATTEMPT_FLOOR_S = 600  # an attempt is killed (and a violation) after max(this, 20 x the baseline)
TRIAL_TITLE = "ray::ImplicitFunc"  # the process title of a Ray Tune trial (function trainable)
TEMP_MARKS = (".tmp", ".tmp-", ".old-", ".search.lock.", ".search_state.json.")
CLASSES = ["ok", "warn", "fail"]
TIMING_WINDOW = 5  # T (and the data command's seconds): the median of this many latest measurements


# -- processes ---------------------------------------------------------------------------------
OURS: set[int] = set()  # pids of the Popen objects the runner waits on itself (never reaped here)


def become_subreaper() -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _proc_table() -> dict[int, tuple[int, str, int]]:
    """pid -> (ppid, state, pgid) of every process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                rest = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(name)] = (int(rest[1]), rest[0], int(rest[2]))
    return table


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def reap() -> None:
    """Reap the zombies re-parented to the runner (a subreaper), not its own Popen children."""
    me = os.getpid()
    for pid, (ppid, state, _) in _proc_table().items():
        if ppid == me and state == "Z" and pid not in OURS:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def descendants(exclude_pgids: set[int] = frozenset()) -> list[int]:
    """Live (not zombie) descendants of the runner, but for the process groups excluded (the
    tracking server's)."""
    reap()
    table = _proc_table()
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = [], list(kids.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        ppid, state, pgid = table[pid]
        if state != "Z" and pgid not in exclude_pgids:
            out.append(pid)
    return out


def start_ticks(pid: int) -> int | None:
    """A process's start time (clock ticks after boot), or None once it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            rest = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if rest[0] in "ZX" else int(rest[19])


class Linger:
    """The processes left behind by a SIGKILLed driver, watched without blocking the soak: the
    resume starts at once (as a user's would), and each must be gone within LINGER_LIMIT_S of
    the kill. ``seconds`` holds how long each one outlived the driver (to a poll's 0.5 s)."""

    def __init__(self):
        self.watched: dict[tuple[int, int], tuple[float, str, int]] = {}  # (pid, ticks) -> (since, title, attempt)
        self.seconds: list[float] = []
        self.late: list[str] = []

    def add(self, pids: list[int], since: float, attempt: int) -> None:
        for pid in pids:
            ticks = start_ticks(pid)
            if ticks is not None:
                self.watched[(pid, ticks)] = (since, cmdline(pid)[:80], attempt)

    def alive(self) -> set[int]:
        return {pid for pid, _ in self.watched}

    def poll(self) -> None:
        reap()
        now = time.monotonic()
        for key, (since, title, attempt) in list(self.watched.items()):
            if start_ticks(key[0]) != key[1]:
                self.seconds.append(round(now - since, 1))
                del self.watched[key]
            elif now - since > LINGER_LIMIT_S:
                self.late.append(f"{title} (pid {key[0]}, attempt {attempt}) alive {now - since:.0f} s after its "
                                 "driver was killed; killed")
                try:
                    os.kill(key[0], signal.SIGKILL)
                except ProcessLookupError:
                    pass
                del self.watched[key]

    def finish(self) -> None:
        while self.watched:
            self.poll()
            time.sleep(0.5)


LINGER = Linger()


def wait_gone(exclude: set[int], limit: float) -> list[tuple[int, str]]:
    """Wait (at most ``limit`` s) until the runner has no descendant outside ``exclude`` (process
    groups) but for those :data:`LINGER` watches; returns the ones still alive then (pid, command line)."""
    deadline = time.monotonic() + limit
    while True:
        LINGER.poll()
        left = [p for p in descendants(exclude) if p not in LINGER.alive()]
        if not left or time.monotonic() > deadline:
            return [(p, cmdline(p)[:160]) for p in left]
        time.sleep(0.5)


def kill_all(exclude: set[int]) -> None:
    for pid in descendants(exclude):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_gone(exclude, 10)


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Proc:
    """A command of the soak: its own session, output to a log file, timed."""

    def __init__(self, args: list[str], cwd: Path, log: Path, env: dict | None = None):
        self.args, self.log = args, log
        self.handle = open(log, "w")
        self.t0 = time.monotonic()
        self.popen = subprocess.Popen(args, cwd=cwd, env=env or child_env(), stdout=self.handle,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        OURS.add(self.popen.pid)
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def wait(self, limit: float) -> int | None:
        try:
            code = self.popen.wait(timeout=max(0.0, limit))
        except subprocess.TimeoutExpired:
            return None
        self.close()
        return code

    def signal(self, sig: int) -> bool:
        if not self.alive():
            return False
        try:
            os.kill(self.pid, sig)
            return True
        except ProcessLookupError:
            return False

    def close(self) -> None:
        if self.popen.poll() is not None:
            OURS.discard(self.pid)
        if not self.handle.closed:
            self.handle.close()

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


def sleep_or_exit(proc: Proc, seconds: float) -> bool:
    """Sleep ``seconds`` unless the process ends first; True if it is still running."""
    deadline = time.monotonic() + seconds
    polled = time.monotonic()
    while proc.alive():
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        time.sleep(min(0.05, left))
        if time.monotonic() - polled > 0.5:
            LINGER.poll()
            polled = time.monotonic()
    return False


# -- the tracking server -----------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`mlflow server` on 127.0.0.1, one worker, sqlite store and proxied artifacts under ``root``."""

    def __init__(self, root: Path):
        from focus_tune.tracking.backend import create_local_store

        self.root = root
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.db = root / "mlflow.db"
        self.proc: subprocess.Popen | None = None
        root.mkdir(parents=True, exist_ok=True)
        create_local_store(f"sqlite:///{self.db}")

    @property
    def pgid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> float:
        """Start it and wait for /health; returns the seconds it took. Raises after SERVER_START_S."""
        t0 = time.monotonic()
        env = dict(child_env(), MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        with open(self.root / "server.log", "a") as log:
            self.proc = subprocess.Popen(
                [PY, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
                 "--backend-store-uri", f"sqlite:///{self.db}", "--serve-artifacts",
                 "--artifacts-destination", str(self.root / "artifacts")],
                cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        OURS.add(self.proc.pid)
        while True:
            try:
                urllib.request.urlopen(f"{self.uri}/health", timeout=2).read()
                return time.monotonic() - t0
            except OSError:
                if self.proc.poll() is not None or time.monotonic() - t0 > SERVER_START_S:
                    self.stop()
                    raise RuntimeError("the mlflow server did not start: "
                                       + (self.root / "server.log").read_text()[-2000:])
                time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        except ProcessLookupError:
            self.proc.wait(timeout=30)
        pgid = self.proc.pid
        OURS.discard(self.proc.pid)
        self.proc = None
        # its workers (same group) must be gone before it starts again on the port
        deadline = time.monotonic() + 30
        while any(g == pgid for _, _, g in _proc_table().values()) and time.monotonic() < deadline:
            reap()
            time.sleep(0.2)


# -- the scenarios -----------------------------------------------------------------------------
@dataclass
class Scenario:
    name: str
    run: str  # the run folder's name
    experiment: str

    def data_command(self, work: Path, raw: Path) -> tuple[list[str], Path]:
        if self.name == "facemed":
            out = work / "data" / "facemed-smoke-seed0"
            return [PY, "-m", "focus_tune.data", "build", "--game", "facemed", "--profile", "smoke", "--out",
                    str(out)], out
        out = work / "alarms-data"
        return [PY, "-m", "focus_tune.data", "import-table", str(raw / "alarms.csv"), "--out", str(out), "--event",
                "fail", "--classes", *CLASSES, "--length", "8", "--name", "alarms", "--group-column", "site"], out

    def search_command(self, work: Path, storage: Path | None, tracking_uri: str | None) -> list[str]:
        cmd = [PY, "-m", "focus_tune.search", "--profile", "smoke"]
        cmd += (["--game", "facemed", "--data-root", str(work / "data")] if self.name == "facemed"
                else ["--data", str(work / "alarms-data")])
        if storage is not None:
            cmd += ["--storage", str(storage)]
        if tracking_uri:
            cmd += ["--tracking-uri", tracking_uri]
        return cmd


SCENARIOS = {"facemed": Scenario("facemed", "facemed-smoke-seed0", "focus-tune/facemed"),
             "alarms": Scenario("alarms", "alarms-smoke-seed0", "focus-tune/alarms")}


def write_table(root: Path, n: int = 160, seed: int = 0, height: int = 12, width: int = 20, length: int = 8) -> None:
    """The imported scenario's table (tests/test_own_data_e2e.py's): n grey PNGs whose brightness
    sets how fast a chain reaches `fail`; a quarter of the sequences cut short (right-censored)."""
    import numpy as np
    from PIL import Image

    if (root / "alarms.csv").exists():
        return
    rng = np.random.default_rng(seed)
    (root / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for k in range(n):
        level = int(rng.integers(0, 2))
        pixels = rng.integers(0, 60, (height, width)) + 150 * level
        Image.fromarray(pixels.astype(np.uint8), mode="L").save(root / "img" / f"{k}.png")
        hazard = 0.08 + 0.4 * level
        seq = []
        for _ in range(length):
            if rng.random() < hazard:
                seq.append("fail")
                break
            seq.append("warn" if rng.random() < 0.3 else "ok")
        if seq[-1] != "fail" and k % 4 == 0 and len(seq) > 2:
            seq = seq[: int(rng.integers(1, len(seq)))]
        rows.append({"image": f"img/{k}.png", "sequence": " ".join(seq), "site": k % 7})
    tmp = root / ".alarms.csv.part"
    with open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["image", "sequence", "site"])
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, root / "alarms.csv")


# -- the plan of a run -------------------------------------------------------------------------
@dataclass
class Fault:
    kind: str
    u: float  # the moment, a share of the expected rest of the attempt (of the data command)
    down_s: float = 0.0  # tracking_restart: how long the server stays stopped
    pick: float = 0.0  # worker_kill: which of the running trial workers (a share of their count)
    # what happened
    attempt: int | None = None
    moment_s: float | None = None
    injected: bool = False
    detail: str = ""
    killed_at: float = 0.0  # monotonic time of the injection (not in the rows)
    log_at: int = 0  # the driver's output up to the injection, in characters (not in the rows)


@dataclass
class Plan:
    seed: int
    scenario: str
    tracked: bool
    tmpfs: bool
    data_faults: list[Fault]
    search_faults: list[Fault]


def draw_plan(seed: int, tmpfs: bool, kinds: set[str]) -> Plan:
    rng = random.Random(f"focus-tune-soak-{seed}")
    scenario = ("facemed", "alarms")[seed % 2]
    tracked = rng.random() < TRACKED_SHARE and "tracking_restart" in kinds
    weights = {k: w for k, w in SEARCH_WEIGHTS.items() if k in kinds
               and (k != "tracking_restart" or tracked) and (k != "disk_full" or tmpfs)}
    n_data = rng.choice([0, 1, 1, 2]) if "data_kill" in kinds else 0
    data = [Fault("data_kill", rng.random()) for _ in range(n_data)]
    search = []
    for _ in range(rng.randint(3, 5) if weights else 0):
        kind = rng.choices(list(weights), list(weights.values()))[0]
        search.append(Fault(kind, rng.random(), down_s=round(rng.uniform(1, 15), 2), pick=rng.random()))
    return Plan(seed, scenario, tracked, tmpfs, data, search)


# -- how long an undisturbed search takes, from the soak's own attempts ------------------------
def expected_share(done: int, trials: int) -> float:
    """The share of an undisturbed search's wall time left once ``done`` of its ``trials`` have
    finished: start-up and outputs about a third, the trials the rest."""
    return 0.35 + 0.55 * max(0, trials - done) / max(1, trials)


def timing_key(scenario: str, tracked: bool) -> str:
    return scenario + ("-server" if tracked else "")


def search_seconds(rows: list[dict], key: str, commit: str) -> list[float]:
    """Whole undisturbed searches' wall times, oldest first: every attempt of ``rows`` (of
    scenario-and-server ``key``, at ``commit``) that started with no trial done (the first, or a
    rerun of a search that had finished none) and ran to exit 0 with no fault."""
    out = []
    for r in rows:
        if r.get("commit") != commit or timing_key(r["scenario"], r["tracked"]) != key:
            continue
        done = 0
        for a in r["attempts"]:
            done = a.get("done_before", done)  # rows before it was recorded: the attempt before's end
            if a["exit"] == 0 and a["ended_by"] is None and done == 0:
                out.append(a["seconds"])
            done = a["done_after"]
    return out


def data_seconds(rows: list[dict], scenario: str, commit: str) -> list[float]:
    """The undisturbed data commands' seconds (each run's last one), oldest first."""
    return [r["data_s"] for r in rows if r.get("commit") == commit and r["scenario"] == scenario and "data_s" in r]


def recent_median(values: list[float], first: float) -> float:
    """The median of ``first`` (the baseline's measurement) and ``values`` (the runs' own, oldest
    first), over the latest :data:`TIMING_WINDOW` of them."""
    return float(statistics.median(([first] + list(values))[-TIMING_WINDOW:]))


# -- checks ------------------------------------------------------------------------------------
@dataclass
class Checks:
    seed: int
    replay: str
    passed: dict[str, int] = field(default_factory=dict)
    failed: list[dict] = field(default_factory=list)

    def check(self, name: str, ok: bool, detail: str = "", **where) -> bool:
        if ok:
            self.passed[name] = self.passed.get(name, 0) + 1
        else:
            self.failed.append({"check": name, "detail": detail[:2000], **where})
            print(f"VIOLATION seed={self.seed} check={name}: {detail[:600]} {where or ''}\n"
                  f"  replay: {self.replay}", flush=True)
        return ok


def dataset_state(folder: Path) -> tuple[str, str]:
    """'absent', 'complete' (load_dataset verifies it) or 'broken', with the reason."""
    from focus_tune.data import load_dataset

    if not os.path.lexists(folder):
        return "absent", ""
    try:
        load_dataset(folder)
        return "complete", ""
    except Exception as err:  # noqa: BLE001  any failure to verify is the finding
        return "broken", f"{type(err).__name__}: {err}"


def stray_temp(*folders: Path) -> list[str]:
    """Temporary files and folders of ours (durable.write_atomic's ``.NAME.*.tmp``, the dataset
    writer's ``.NAME.tmp-*`` / ``.NAME.old-*``, the lock's ``.search.lock.*``) under ``folders``."""
    found = []
    for top in folders:
        if not top.exists():
            continue
        for path in top.rglob(".*"):
            if any(mark in path.name for mark in TEMP_MARKS) and not path.name.endswith(".lock"):
                found.append(str(path))
    return sorted(found)


def lock_holder(path: Path) -> int | None:
    """The pid in a search lock, None where there is none. An attempt must release its own; a
    lock left by an earlier, SIGKILLed attempt is stale by design (the next start takes it over,
    with a notice), and stays where an attempt stopped before taking it (a full disk at 0.4 s)."""
    from focus_tune.search.lock import Holder  # the search's own reader of its lock record

    try:
        holder = Holder.parse(path.read_text(errors="replace"))
    except FileNotFoundError:
        return None
    except OSError:
        holder = None
    return -1 if holder is None else holder.pid  # unreadable: nobody's, so never this attempt's


def trials_done(state_file: Path) -> int:
    """How many trials the search state records as finished (0 with no readable state)."""
    return len((read_state(state_file)[0] or {}).get("results", {}))


def read_state(path: Path) -> tuple[dict | None, str]:
    if not path.exists():
        return None, "absent"
    try:
        return json.loads(path.read_text()), ""
    except (OSError, ValueError) as err:
        return None, f"{type(err).__name__}: {err}"


def mlflow_checks(checks: Checks, db: Path, scenario: Scenario, state: dict) -> int:
    """The search's parent run (the state's) FINISHED, one child run per trial of the state under
    it with its final status, no run RUNNING. Earlier parents may exist, ended: a search that
    ended before any trial finished removes its state, and its rerun starts afresh (RELIABILITY,
    "Errors after the start"). Returns how many there were."""
    results, parent_id = state.get("results", {}), state.get("parent_run_id")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name(scenario.experiment)
    if not checks.check("mlflow_parent_finished", exp is not None, f"no experiment {scenario.experiment} in {db}"):
        return 0
    runs = client.search_runs([exp.experiment_id], max_results=5000)
    parents = [r for r in runs if r.data.tags.get("kind") == "search"]
    kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent_id]
    ours = [p for p in parents if p.info.run_id == parent_id]
    checks.check("mlflow_parent_finished", len(ours) == 1 and ours[0].info.status == "FINISHED",
                 f"the state's parent {parent_id}: "
                 + ", ".join(f"{p.info.run_id[:8]} {p.info.status}" for p in parents))
    running = [f"{r.info.run_name} ({r.info.run_id[:8]}, parent {r.data.tags.get('mlflow.parentRunId', '-')[:8]})"
               for r in runs if r.info.status == "RUNNING"]
    checks.check("mlflow_none_running", not running, "RUNNING: " + ", ".join(running))
    by_trial: dict[str, list] = {}
    for k in kids:
        by_trial.setdefault(k.data.tags.get("trial_id", "?"), []).append(k)
    wrong = []
    for tid, score in results.items():
        got = by_trial.get(tid, [])
        want = "FINISHED" if score is not None else "FAILED"
        if len(got) != 1 or got[0].info.status != want or got[0].data.tags["mlflow.parentRunId"] != parent_id:
            wrong.append(f"{tid}: {[(g.info.status, g.data.tags['mlflow.parentRunId'][:8]) for g in got]} "
                         f"(want one {want})")
    extra = sorted(set(by_trial) - set(results))
    checks.check("mlflow_one_child_per_trial", not wrong and not extra,
                 "; ".join(wrong[:8]) + (f"; runs of no trial of the state: {extra}" if extra else ""))
    return len(parents) - len(ours)


def csv_difference(a: bytes, b: bytes) -> str:
    """What differs between two results.csv files, briefly: rows, columns, the largest difference."""
    ra, rb = list(csv.reader(a.decode().splitlines())), list(csv.reader(b.decode().splitlines()))
    if len(ra) != len(rb):
        return f"{len(ra)} rows against {len(rb)} in the baseline"
    diffs, worst = [], 0.0
    for i, (x, y) in enumerate(zip(ra, rb)):
        for j, (p, q) in enumerate(zip(x, y)):
            if p != q:
                diffs.append((i, ra[0][j] if ra and j < len(ra[0]) else j))
                try:
                    worst = max(worst, abs(float(p) - float(q)))
                except ValueError:
                    worst = float("inf")
    cells = ", ".join(f"row {i} {col}" for i, col in diffs[:6])
    return f"{len(diffs)} cells differ ({cells}{', ...' if len(diffs) > 6 else ''}); largest |difference| {worst:.3g}"


# -- one run -----------------------------------------------------------------------------------
class Soak:
    def __init__(self, args):
        self.args = args
        self.work = Path(args.work).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        self.raw = self.work / "raw"
        self.rows = Path(args.rows).resolve() if args.rows else self.work / "rows.jsonl"
        self.kinds = set(args.kinds)
        self.tmpfs = not args.no_tmpfs and self._can_mount()
        import focus_tune

        self.code = Path(focus_tune.__file__).resolve().parent.parent
        self.commit = subprocess.run(["git", "-C", str(self.code), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "-C", str(self.code), "status", "--porcelain", "--", "focus_tune"],
                               capture_output=True, text=True).stdout.strip()
        self.commit += "+dirty" if dirty else ""
        self.machine = f"{platform.machine()} {cpu_name()}, {os.cpu_count()} cores"

    def _can_mount(self) -> bool:
        probe = self.work / ".mount-probe"
        probe.mkdir(exist_ok=True)
        made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)], capture_output=True)
        if made.returncode == 0:
            subprocess.run(["umount", str(probe)], capture_output=True)
        probe.rmdir()
        return made.returncode == 0

    def replay(self, seed: int) -> str:
        return (f"PYTHONPATH={self.code} {PY} {Path(__file__).resolve()} --work {self.work} --seeds {seed} "
                f"--rows {self.work / 'replay.jsonl'}")

    # the undisturbed search of a scenario: its results.csv and how long each part took
    def baseline(self, scenario: Scenario, tracked: bool) -> dict:
        key = scenario.name + ("-server" if tracked else "")
        folder = self.work / "baseline" / key
        record = folder / "baseline.json"
        if record.exists():
            saved = json.loads(record.read_text())
            if saved.get("commit") == self.commit:
                return saved
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        print(f"baseline {key}: the undisturbed data command and search", flush=True)
        cmd, _ = scenario.data_command(folder, self.raw)
        t0 = time.monotonic()
        done = subprocess.run(cmd, cwd=folder, env=child_env(), capture_output=True, text=True, timeout=600)
        data_s = time.monotonic() - t0
        if done.returncode != 0:
            raise SystemExit(f"baseline {key}: the data command failed:\n{(done.stdout + done.stderr)[-3000:]}")
        server = Server(folder / "server") if tracked else None
        try:
            if server:
                server.start()
            t0 = time.monotonic()
            done = subprocess.run(scenario.search_command(folder, None, server and server.uri), cwd=folder,
                                  env=child_env(), capture_output=True, text=True, timeout=1800)
            search_s = time.monotonic() - t0
        finally:
            if server:
                server.stop()
        if done.returncode != 0:
            raise SystemExit(f"baseline {key}: the search failed:\n{(done.stdout + done.stderr)[-3000:]}")
        run = folder / "runs" / scenario.run
        state = json.loads((run / "search_state.json").read_text())
        shutil.copy(run / "report" / "results.csv", folder / "results.csv")
        saved = {"key": key, "commit": self.commit, "data_s": round(data_s, 2), "search_s": round(search_s, 2),
                 "trials": len(state["results"]), "results_csv": str(folder / "results.csv")}
        record.write_text(json.dumps(saved, indent=1))
        print(f"baseline {key}: data {data_s:.1f} s, search {search_s:.1f} s, {saved['trials']} trials", flush=True)
        return saved

    def run(self, seed: int) -> dict:
        plan = draw_plan(seed, self.tmpfs, self.kinds)
        scenario = SCENARIOS[plan.scenario]
        base = self.baseline(scenario, plan.tracked)
        earlier = load_rows(self.rows)
        timing = {"search_s": recent_median(search_seconds(earlier, timing_key(plan.scenario, plan.tracked),
                                                           self.commit), base["search_s"]),
                  "data_s": recent_median(data_seconds(earlier, plan.scenario, self.commit), base["data_s"]),
                  "trials": base["trials"]}
        checks = Checks(seed, self.replay(seed))
        work = self.work / "runs" / f"seed-{seed}"
        if work.exists():
            self._unmount(work / "store")
            shutil.rmtree(work)
        (work / "logs").mkdir(parents=True)
        server = Server(work / "server") if plan.tracked else None
        storage = work / "store"
        mounted = False
        t_run = time.monotonic()
        attempts: list[dict] = []
        self.earlier_parents = None
        global LINGER
        LINGER = Linger()
        try:
            if plan.tmpfs:
                storage.mkdir()
                mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={STORE_MB}m", "tmpfs", str(storage)],
                                         capture_output=True).returncode == 0
            data_path, data_s = self._data_phase(plan, scenario, timing, work, checks)
            if server:
                server.start()
            if data_path is not None:
                self._search_phase(plan, scenario, base, timing, work, storage if mounted else None, server,
                                   checks, attempts, data_path)
            LINGER.finish()
            checks.check("no_process_left", not LINGER.late, "; ".join(LINGER.late))
        finally:
            if server:
                server.stop()
            kill_all(set())
            if mounted:
                self._unmount(storage)
        faults = [{k: v for k, v in asdict(f).items() if k not in ("killed_at", "log_at")}
                  for f in plan.data_faults + plan.search_faults]
        row = {"seed": seed, "scenario": plan.scenario, "tracked": plan.tracked, "tmpfs": mounted,
               "commit": self.commit, "machine": self.machine, "baseline_search_s": base["search_s"],
               "expected_search_s": round(timing["search_s"], 2), "expected_data_s": round(timing["data_s"], 3),
               "data_s": data_s,
               "wall_s": round(time.monotonic() - t_run, 1), "attempts": attempts, "faults": faults,
               "checks_passed": checks.passed, "violations": checks.failed,
               "linger_s": sorted(LINGER.seconds), "earlier_parents": self.earlier_parents,
               "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
        if not checks.failed and not self.args.keep:
            shutil.rmtree(work, ignore_errors=True)
        return row

    def _unmount(self, path: Path) -> None:
        if path.is_mount():
            subprocess.run(["umount", "-l", str(path)], capture_output=True)

    def _data_phase(self, plan: Plan, scenario: Scenario, timing: dict, work: Path,
                    checks: Checks) -> tuple[Path | None, float | None]:
        """The data command under the plan's data faults, then once undisturbed: the dataset
        (None when that failed) and the undisturbed command's seconds (None when it failed)."""
        cmd, out = scenario.data_command(work, self.raw)
        for i, fault in enumerate(plan.data_faults):
            proc = Proc(cmd, work, work / "logs" / f"data-{i + 1}.log")
            fault.attempt, fault.moment_s = 0, round(fault.u * timing["data_s"], 3)
            if sleep_or_exit(proc, fault.moment_s) and proc.signal(signal.SIGKILL):
                fault.injected = True
            code = proc.wait(60)
            fault.detail = f"exit {code}"
            left = wait_gone(set(), PROCESS_GRACE_S)
            checks.check("no_process_left", not left, f"after a killed data command: {left}", phase="data")
            state, why = dataset_state(out)
            fault.detail += f", dataset {state}"
            checks.check("data_complete_or_absent", state != "broken", f"{out}: {why}", phase="data", kill=i + 1)
        proc = Proc(cmd, work, work / "logs" / "data-final.log")
        code = proc.wait(600)
        seconds = round(proc.elapsed(), 3) if code == 0 else None
        if code is None:
            proc.signal(signal.SIGKILL)
            proc.wait(30)
        ok = checks.check("data_rerun_exit_0", code == 0, f"exit {code}: {proc.output()[-1500:]}", phase="data")
        state, why = dataset_state(out)
        ok &= checks.check("dataset_verifies", state == "complete", f"{out}: {state} {why}", phase="data")
        stray = stray_temp(out.parent)
        checks.check("no_stray_tmp", not stray, f"after the data command: {stray}", phase="data")
        return (out if ok else None), seconds

    @staticmethod
    def _expected_s(timing: dict, state_file: Path) -> float:
        return timing["search_s"] * expected_share(trials_done(state_file), timing["trials"])

    def _search_phase(self, plan, scenario, base, timing, work, storage, server, checks, attempts,
                      data_path) -> None:
        run_dir = (storage or work / "runs") / scenario.run
        state_file = run_dir / "search_state.json"
        server_pg = {server.pgid} if server else set()
        pending = list(plan.search_faults)
        limit = max(ATTEMPT_FLOOR_S, 20 * base["search_s"])
        code = None
        for attempt in range(1, len(plan.search_faults) + 4):
            cmd = scenario.search_command(work, storage, server and server.uri) + (["--resume"] if attempt > 1 else [])
            done_before = trials_done(state_file)
            proc = Proc(cmd, work, work / "logs" / f"search-{attempt}.log")
            ended_by: Fault | None = None
            while pending and proc.alive():
                fault = pending[0]
                delay = fault.u * self._expected_s(timing, state_file)
                if not sleep_or_exit(proc, delay):
                    break  # the driver ended before the moment: this fault goes to the next attempt
                pending.pop(0)
                fault.attempt, fault.moment_s = attempt, round(proc.elapsed(), 2)
                fault.killed_at, fault.log_at = time.monotonic(), len(proc.output())
                self._inject(fault, proc, server, storage, checks, state_file)
                server_pg = {server.pgid} if server else set()
                if fault.kind in ("driver_kill", "driver_sigint", "disk_full"):
                    ended_by = fault
                    break
            code = proc.wait(max(1.0, limit - proc.elapsed()))
            if code is None:
                checks.check("attempt_ends", False, f"attempt {attempt} still running after {limit:.0f} s; killed",
                             attempt=attempt)
                proc.signal(signal.SIGKILL)
                code = proc.wait(30)
            out = proc.output()
            if ended_by is not None and ended_by.kind == "disk_full":
                filler = (storage or run_dir) / "filler"
                filler.unlink(missing_ok=True)
            record = {"attempt": attempt, "exit": code, "seconds": round(proc.elapsed(), 1),
                      "done_before": done_before,
                      "ended_by": ended_by.kind if ended_by else None,
                      "done_after": trials_done(state_file)}
            attempts.append(record)
            self._after_attempt(checks, attempt, code, ended_by, out, run_dir, server_pg, proc.pid)
            if code == 0:
                break
        else:
            code = None
        for fault in pending:
            fault.detail = "not reached: the search had ended"
        checks.check("final_exit_0", code == 0, f"the last attempt exited {code}")
        if code != 0:
            return
        self._final_checks(checks, scenario, base, work, run_dir, server, data_path)

    def _inject(self, fault: Fault, proc: Proc, server, storage, checks: Checks, state_file: Path) -> None:
        kind = fault.kind
        if kind == "driver_kill":
            fault.injected = proc.signal(signal.SIGKILL)
        elif kind == "driver_sigint":
            fault.injected = proc.signal(signal.SIGINT)
            code = proc.wait(SIGINT_LIMIT_S)
            if fault.injected:
                checks.check("sigint_ends_driver", code is not None, f"no exit {SIGINT_LIMIT_S} s after SIGINT",
                             attempt=fault.attempt)
        elif kind == "worker_kill":
            deadline = time.monotonic() + WORKER_WAIT_S
            while proc.alive() and time.monotonic() < deadline:
                workers = sorted(p for p in descendants() if cmdline(p).startswith(TRIAL_TITLE))
                if workers:
                    victim = workers[int(fault.pick * len(workers))]
                    try:
                        os.kill(victim, signal.SIGKILL)
                        fault.injected = True
                        fault.detail = f"pid {victim} of {len(workers)} trial workers"
                    except ProcessLookupError:
                        continue
                    break
                time.sleep(0.1)
            if not fault.injected:
                fault.detail = "no trial worker ran" + ("" if proc.alive() else " (the search ended)")
        elif kind == "tracking_restart":
            server.stop()
            fault.injected = True
            time.sleep(fault.down_s)
            try:
                took = server.start()
                fault.detail = f"down {fault.down_s:.1f} s + start {took:.1f} s"
            except RuntimeError as err:
                checks.check("server_restarts", False, str(err), attempt=fault.attempt)
        elif kind == "disk_full":
            target = storage or state_file.parent
            filler = target / "filler"
            try:
                with open(filler, "wb", buffering=0) as handle:
                    while True:
                        handle.write(b"\0" * (1 << 20))
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
            try:
                with open(filler, "ab", buffering=0) as handle:
                    while True:
                        handle.write(b"\0" * 4096)
            except OSError:
                pass
            fault.injected = True
            code = proc.wait(DISK_FULL_LIMIT_S)
            if code is None:
                checks.check("disk_full_ends_driver", False,
                             f"still running {DISK_FULL_LIMIT_S} s after the disk filled; space freed",
                             attempt=fault.attempt)
                filler.unlink(missing_ok=True)
        else:
            raise ValueError(kind)

    def _after_attempt(self, checks, attempt, code, ended_by, out, run_dir, server_pg, pid) -> None:
        kind = ended_by.kind if ended_by and ended_by.injected else None
        expected = {None: {0}, "driver_kill": {-9, 0}, "driver_sigint": {130, 0}, "disk_full": {2, 0}}[kind]
        # one line; no traceback after the disk filled (a trial's crash before may have one)
        if kind == "disk_full" and code == 2:
            last = out.strip().splitlines()[-1] if out.strip() else ""
            after = out[ended_by.log_at:]
            ok = last.startswith("error: ") and "no space left on device" in last and "Traceback" not in after
            checks.check("disk_full_one_line", ok, f"last line {last[:300]!r}; traceback after the fill: "
                         f"{'Traceback' in after}", attempt=attempt)
        checks.check("exit_as_expected", code in expected, f"attempt {attempt} ({kind or 'no fault'}) exited {code}: "
                     f"{out[-1500:]}", attempt=attempt)
        if kind == "driver_sigint" and code == 130:
            after = out[ended_by.log_at:]
            checks.check("sigint_no_traceback", "Traceback" not in after, after[-1500:], attempt=attempt)
        if code == -9:  # Ray's processes outlive a SIGKILLed driver a while: watched, the resume goes on
            since = ended_by.killed_at if ended_by else time.monotonic()
            LINGER.add([p for p in descendants(server_pg) if p not in LINGER.alive()], since, attempt)
        else:
            left = wait_gone(server_pg, PROCESS_GRACE_S)
            checks.check("no_process_left", not left, f"{PROCESS_GRACE_S} s after attempt {attempt} ended "
                         f"({kind}, exit {code}): {left}", attempt=attempt)
            if left:
                kill_all(server_pg)
        if code != -9:
            holder = lock_holder(run_dir / "search.lock")
            checks.check("lock_released", holder != pid, f"{run_dir / 'search.lock'} of this attempt's driver "
                         f"(pid {pid}) left after exit {code}", attempt=attempt)
        _, why = read_state(run_dir / "search_state.json")
        checks.check("state_parses", why in ("", "absent"), why, attempt=attempt)

    def _final_checks(self, checks, scenario, base, work, run_dir, server, data_path) -> None:
        got = (run_dir / "report" / "results.csv")
        want = Path(base["results_csv"]).read_bytes()
        have = got.read_bytes() if got.exists() else b""
        checks.check("results_csv_identical", have == want,
                     csv_difference(have, want) if have else f"{got} missing")
        state, _ = read_state(run_dir / "search_state.json")
        self.earlier_parents = mlflow_checks(checks, server.db if server else work / "mlflow.db", scenario, state or {})
        checks.check("lock_released", not (run_dir / "search.lock").exists(), "search.lock left at the end")
        stray = stray_temp(run_dir, data_path.parent)
        checks.check("no_stray_tmp", not stray, f"{stray}")
        status, why = dataset_state(data_path)
        checks.check("dataset_verifies", status == "complete", why)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                flags = Path("/proc/cpuinfo").read_text()
                return name + (" with AVX-512" if "avx512f" in flags else "")
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


# -- the summary -------------------------------------------------------------------------------
def summarize(rows: list[dict]) -> str:
    """The figures of the soak's rows: runs, faults injected by kind, checks by name, violations."""
    injected = {k: 0 for k in KINDS}
    missed = {k: 0 for k in KINDS}
    by_check: dict[str, list[int]] = {}
    violations = []
    for r in rows:
        for f in r["faults"]:
            (injected if f["injected"] else missed)[f["kind"]] += 1
        for name, n in r["checks_passed"].items():
            by_check.setdefault(name, [0, 0])[0] += n
        for v in r["violations"]:
            by_check.setdefault(v["check"], [0, 0])[1] += 1
            violations.append((r["seed"], r["commit"], v["check"], v["detail"][:200].replace("\n", " ")))
    passed = sum(p for p, _ in by_check.values())
    failed = sum(f for _, f in by_check.values())
    linger = [x for r in rows for x in r.get("linger_s", [])]
    clean = sum(not r["violations"] for r in rows)
    lines = [f"runs: {len(rows)} ({sum(r['scenario'] == 'facemed' for r in rows)} FaceMed, "
             f"{sum(r['scenario'] == 'alarms' for r in rows)} an imported dataset with censored items; "
             f"{sum(r['tracked'] for r in rows)} with an MLflow server; {sum(r['tmpfs'] for r in rows)} on a tmpfs); "
             f"{clean} without a violation",
             f"faults injected: {sum(injected.values())} (" + ", ".join(f"{k} {v}" for k, v in injected.items())
             + f"); drawn but not reached (the search had ended first): {sum(missed.values())}",
             f"attempts (driver starts): {sum(len(r['attempts']) for r in rows)}; soak wall time "
             f"{sum(r['wall_s'] for r in rows) / 60:.0f} min",
             f"invariant checks: {passed} of {passed + failed} passed; violations: {failed}",
             "  by check: " + ", ".join(f"{k} {p}/{p + f}" for k, (p, f) in sorted(by_check.items())),
             f"processes that outlived a SIGKILLed driver: {len(linger)}, gone after "
             + (f"{min(linger):.0f}-{max(linger):.0f} s (median {sorted(linger)[len(linger) // 2]:.0f} s)"
                if linger else "-"),
             f"searches that restarted afresh (an earlier parent run ended, no trial had finished): "
             f"{sum(bool(r.get('earlier_parents')) for r in rows)} runs",
             f"commits: {', '.join(sorted({r['commit'] for r in rows}))}; machine: "
             f"{'; '.join(sorted({r['machine'] for r in rows}))}"]
    lines += [f"  VIOLATION seed {s} at {c}: {k}: {d}" for s, c, k, d in violations]
    return "\n".join(lines)


def load_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", required=True, help="scratch folder: baselines, the runs, the rows")
    p.add_argument("--rows", help="JSON Lines of finished runs (default WORK/rows.jsonl); seeds there are skipped")
    p.add_argument("--runs", type=int, default=0, help="seeds FIRST .. FIRST+RUNS-1")
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--seeds", type=int, nargs="*", default=[], help="these seeds (run again even if done)")
    p.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    p.add_argument("--no-tmpfs", action="store_true", help="storage on the disk (no disk_full faults)")
    p.add_argument("--keep", action="store_true", help="keep the run folders of passing runs")
    p.add_argument("--summary", action="store_true", help="print the figures of --rows and exit")
    p.add_argument("--hours", type=float, default=0, help="start no run after this many hours")
    args = p.parse_args(argv)
    rows_path = Path(args.rows).resolve() if args.rows else Path(args.work).resolve() / "rows.jsonl"
    if args.summary:
        print(summarize(load_rows(rows_path)))
        return 0
    if not become_subreaper():
        print("note: cannot become a child subreaper; processes that outlive a driver are seen only "
              "while their parent lives", file=sys.stderr)
    soak = Soak(args)
    if not soak.tmpfs:
        print("note: no tmpfs can be mounted here (needs root or CAP_SYS_ADMIN): storage on the disk, "
              "no disk_full faults", flush=True)
    write_table(soak.raw)
    done = {r["seed"] for r in load_rows(rows_path)}
    seeds = args.seeds or [s for s in range(args.first, args.first + args.runs) if s not in done]
    t_start = time.monotonic()
    print(f"fault soak: {len(seeds)} run(s), code {soak.code} at {soak.commit}, {soak.machine}; rows {rows_path}",
          flush=True)
    for seed in seeds:
        if args.hours and time.monotonic() - t_start > args.hours * 3600:
            print("time is up: stopping before seed", seed, flush=True)
            break
        row = soak.run(seed)
        with open(rows_path, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        faults = ", ".join(f"{f['kind']}@{f['moment_s']}s{'' if f['injected'] else '(not reached)'}"
                           for f in row["faults"])
        print(f"seed {seed} {row['scenario']}{' +server' if row['tracked'] else ''}: {faults} -> "
              f"{len(row['attempts'])} attempts, {sum(row['checks_passed'].values())} checks passed, "
              f"{len(row['violations'])} violations, {row['wall_s']:.0f} s", flush=True)
    print(summarize(load_rows(rows_path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
