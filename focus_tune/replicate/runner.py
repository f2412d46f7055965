"""Running the R searches of a replication: ``--parallel`` at a time, each its own process.

Each search is ``python -m focus_tune.search --game G --profile P --seed r --storage S
--tracking-uri <its own SQLite store>`` (the seed also draws the built-in dataset), with its
output in ``S/logs``. A search whose report is written is not run again; one with a search
state and no report is resumed (``--resume``). Ctrl-C stops every running search cleanly (each
saves its state and marks its MLflow runs KILLED) and the command aggregates the finished ones.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .analysis import finished, run_dir, store_uri


@dataclass(frozen=True)
class Job:
    scenario: str
    profile: str
    seed: int
    storage: Path
    tracking_uri: str | None  # None: the search's own store in the storage folder
    search_args: tuple[str, ...]
    data: Path | None = None  # a dataset folder every search trains on (else the seed's built-in data)

    @property
    def folder(self) -> Path:
        return run_dir(self.storage, self.scenario, self.profile, self.seed)

    @property
    def uri(self) -> str:
        return self.tracking_uri or store_uri(self.storage, self.scenario, self.profile, self.seed)

    @property
    def log(self) -> Path:
        return self.storage / "logs" / f"{self.scenario}-{self.profile}-seed{self.seed}.log"

    def command(self) -> list[str]:
        from ..data import BUILTIN_SCENARIOS

        scenario = ["--game", self.scenario] if self.scenario in BUILTIN_SCENARIOS else []
        data = ["--data", str(self.data.resolve())] if self.data is not None else []
        cmd = [sys.executable, "-m", "focus_tune.search", *scenario, *data, "--profile", self.profile,
               "--seed", str(self.seed), "--storage", str(self.storage), "--tracking-uri", self.uri,
               *self.search_args]
        if (self.folder / "search_state.json").exists():
            cmd.append("--resume")
        return cmd


def chosen(folder: Path) -> str:
    """'time-dependent <schedule>, constant <schedule>' from a finished search's report."""
    try:
        picked = json.loads((folder / "report" / "search.json").read_text()).get("chosen", {})
    except (OSError, ValueError):
        return "report unreadable"
    return ", ".join(f"{f} {picked[f]}" for f in ("time-dependent", "constant") if f in picked)


class Runner:
    """Runs the jobs, ``parallel`` at a time, and prints one progress line per search start
    and end: ``[done/R] scenario seed r: ...``."""

    def __init__(self, jobs: list[Job], parallel: int, out=sys.stdout):
        self.jobs, self.parallel, self.out = jobs, max(1, parallel), out
        self.live: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.done = 0
        self.stopping = threading.Event()  # no search starts once set
        self.interrupted = threading.Event()  # set by SIGINT / SIGTERM

    def say(self, text: str) -> None:
        with self.lock:
            print(text, file=self.out, flush=True)

    def _one(self, job: Job) -> None:
        R = len(self.jobs)
        if finished(job.folder):
            with self.lock:
                self.done += 1
                done = self.done
            self.say(f"[{done}/{R}] {job.scenario} seed {job.seed}: finished before, not run again "
                     f"({chosen(job.folder)})")
            return
        cmd = job.command()
        job.log.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        with job.log.open("a") as fh:
            with self.lock:  # started and registered at once: stop() sees every search it must stop
                if self.stopping.is_set():
                    return
                # Its own session: a Ctrl-C in the terminal reaches the searches only through stop().
                proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
                self.live.add(proc)
                verb = "resuming" if "--resume" in cmd else "searching"
                print(f"[{self.done}/{R}] {job.scenario} seed {job.seed}: {verb} (log {job.log})", file=self.out,
                      flush=True)
            rc = proc.wait()
            with self.lock:
                self.live.discard(proc)
        minutes = (time.time() - t0) / 60
        if rc == 0 and finished(job.folder):
            with self.lock:
                self.done += 1
                done = self.done
            self.say(f"[{done}/{R}] {job.scenario} seed {job.seed}: done in {minutes:.1f} min ({chosen(job.folder)})")
        elif self.stopping.is_set():
            self.say(f"[{self.done}/{R}] {job.scenario} seed {job.seed}: stopped after {minutes:.1f} min; "
                     "the same command resumes it")
        else:
            self.say(f"[{self.done}/{R}] {job.scenario} seed {job.seed}: failed (exit {rc}) after {minutes:.1f} min; "
                     f"see {job.log}")

    def run(self) -> bool:
        """Run every job; False when interrupted (SIGINT or SIGTERM), after the running
        searches stopped. The handlers are this command's own, as the search's are: a program
        started in the background by a shell inherits SIGINT ignored, and Python's
        KeyboardInterrupt would then never come."""
        queue = list(self.jobs)
        threads: list[threading.Thread] = []

        def worker():
            while not self.stopping.is_set():
                with self.lock:
                    if not queue:
                        return
                    job = queue.pop(0)
                self._one(job)

        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            for _ in range(min(self.parallel, len(queue))):
                t = threading.Thread(target=worker, daemon=True)
                t.start()
                threads.append(t)
            while any(t.is_alive() for t in threads):
                if self.interrupted.wait(timeout=0.5):
                    self.stop()
                    for t in threads:
                        t.join()
                    return False
            return True
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum, frame) -> None:
        if self.interrupted.is_set():  # a second Ctrl-C: the searches exit at once (theirs too)
            with self.lock:
                live = list(self.live)
            for proc in live:
                proc.send_signal(signal.SIGINT)
            return
        print(f"\n{signal.Signals(signum).name}: stopping the running searches (each saves its state; "
              "press Ctrl-C again to make them exit at once)", file=sys.stderr, flush=True)
        self.interrupted.set()

    def stop(self, grace: float = 300.0) -> None:
        """Ctrl-C each running search (it saves its state, marks its MLflow runs KILLED and exits
        130: the same command resumes it) and wait for them; kill one that outlasts ``grace``."""
        with self.lock:
            self.stopping.set()
            live = list(self.live)
        for proc in live:
            proc.send_signal(signal.SIGINT)
        deadline = time.time() + grace
        for proc in live:
            try:
                proc.wait(timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()
