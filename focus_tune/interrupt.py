"""Ctrl-C for the search driver: the first stops the trials and saves, the second exits at once.

It lives in its own module, below ``search``, so that the driver and the Tune stopper (which
Ray pickles and imports again by name) reach the same flag through one import path.
"""
from __future__ import annotations

import os
import signal
import sys
import threading

EXIT_INTERRUPTED = 130  # the shell's code for a process ended by SIGINT


class Interrupted(Exception):
    """The user pressed Ctrl-C (or sent SIGTERM): the running trials were stopped."""


class _Interrupt:
    """First SIGINT/SIGTERM: stop the trials at the next step of Ray Tune's loop (a Stopper
    polls ``event``), save the state, mark the MLflow runs KILLED, exit 130. Second: exit at
    once. Ray Tune's own SIGINT handler is switched off: it made ``fit()`` return as if the
    search had ended normally."""

    def __init__(self):
        self.event = threading.Event()
        self.abort = threading.Event()  # set on an error that must stop the running trials (a full disk)
        self.signal_name = ""
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
        self.event.clear()
        self.abort.clear()
        self.signal_name = ""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        if self.event.is_set():
            print("\nsecond interrupt: exiting at once (the search state holds every trial finished so far)",
                  file=sys.stderr, flush=True)
            _kill_descendants()  # the local Ray's processes; a few of its agents outlive the driver otherwise
            os._exit(EXIT_INTERRUPTED)
        self.signal_name = signal.Signals(signum).name
        self.event.set()
        print(f"\n{self.signal_name}: stopping the running trials and saving the search state "
              "(press Ctrl-C again to exit at once)", file=sys.stderr, flush=True)

    def check(self) -> None:
        if self.event.is_set():
            raise Interrupted(self.signal_name)


INTERRUPT = _Interrupt()


def _kill_descendants() -> None:
    """SIGKILL every process started by this one (directly or not), found through /proc."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
            children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry))
        except (OSError, ValueError):
            continue
    todo, found = [os.getpid()], []
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
