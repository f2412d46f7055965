"""Test-only: the search CLI with injected faults, through the driver's ``trainable`` seam.

``FOCUS_TUNE_TEST_FAULTS='{"<trial_id>": "nan" | "raise@<epoch>" | "gate" | "gate@<epoch>"}'``:
"nan" makes that trial's loss non-finite (its head's bias turns NaN), "raise@N" makes it
raise once at epoch N (not after a resume), to exercise retries from checkpoints, and
"gate@N" holds it at a gate before epoch N, after the checkpoint of epoch N - 1, until the
test releases it ("gate" is "gate@1": before any training). A test holds trials there to do
something while they are certainly inside that window: run two trials side by side, one per
node, or kill a node or the driver mid-stage.

The gates are files in the folder ``FOCUS_TUNE_TEST_GATE`` names, which the test and every
node of the cluster see (the fake nodes of scripts/local_cluster.py share this machine's disk):

- a trial that reaches its gate writes ``<trial_id>.waiting`` (atomically: a temporary file
  renamed) and then looks for ``<trial_id>.go`` every 0.1 s;
- the test waits for the ``.waiting`` files (``Gate.wait``), does its deed, and creates the
  ``.go`` files (``Gate.release``); the trial goes on.

A released gate stays open: a trial retried from scratch passes it at once (one retried from
its checkpoint of epoch N - 1 or later does not reach it: "gate@N" is skipped after a
resume). A gate never released fails its trial after ``FOCUS_TUNE_TEST_GATE_LIMIT_S``
(600 s) with an error naming it, rather than hanging CI. Run it like the CLI:
``python tests/fault_search.py --game facemed --profile smoke ...``.
"""

import json
import os
import sys
import time
from pathlib import Path

FAULTS = json.loads(os.environ.get("FOCUS_TUNE_TEST_FAULTS", "{}"))
# Read here, in the driver: Ray pickles ``inject`` (a function of __main__) by value with these
# globals, so a trial on another node sees the driver's values, not its node's environment.
GATE = os.environ.get("FOCUS_TUNE_TEST_GATE", "")
GATE_LIMIT_S = float(os.environ.get("FOCUS_TUNE_TEST_GATE_LIMIT_S", "600"))
POLL_S = 0.1


def gate_epoch(fault) -> int | None:
    """The epoch before which ``fault`` holds its trial at the gate; None for other faults."""
    if fault == "gate":
        return 1
    if isinstance(fault, str) and fault.startswith("gate@"):
        return int(fault.removeprefix("gate@"))
    return None


def wait_at_gate(trial_id: str, epoch: int) -> None:
    """The trial's side: say it is here (``.waiting``), then wait for the test's ``.go``."""
    folder = Path(GATE)
    go = folder / f"{trial_id}.go"
    if go.exists():  # released before: a trial retried from scratch
        return
    tmp = folder / f".{trial_id}.waiting.{os.getpid()}"
    tmp.write_text(f"pid {os.getpid()} epoch {epoch}\n")
    os.replace(tmp, folder / f"{trial_id}.waiting")
    deadline = time.monotonic() + GATE_LIMIT_S
    while not go.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"test gate: {trial_id} waited {GATE_LIMIT_S:.0f} s before epoch {epoch} "
                               f"for {go}, which the test never created")
        time.sleep(POLL_S)


def inject(job, epoch, model, resumed):
    fault = FAULTS.get(job.trial_id)
    if fault == "nan":
        import torch

        with torch.no_grad():
            model.head.bias.fill_(float("nan"))
    elif fault == f"raise@{epoch}" and not resumed:
        raise RuntimeError(f"injected fault in {job.trial_id} at epoch {epoch}")
    elif gate_epoch(fault) == epoch and not resumed:
        wait_at_gate(job.trial_id, epoch)


def faulty_trial(config, data):
    # Imported here, in the trial's process: the driver must not import Ray before it has
    # set the local Ray's token.
    from focus_tune.search.trainable import run_trial

    run_trial(config, data, on_epoch=inject)


class Gate:
    """The test's side of the gates: a folder for one search (made here), its environment
    variable, and waiting for and releasing trials by id."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.env = {"FOCUS_TUNE_TEST_GATE": str(self.folder)}

    def waiting(self, trial_id: str) -> bool:
        return (self.folder / f"{trial_id}.waiting").exists()

    def wait(self, proc, trials: list[str], timeout: float = 240, until=None, what: str = "") -> None:
        """Until every one of ``trials`` waits at its gate (and ``until()``, if given, holds).
        Fails the test, with the search's output, if the search ``proc`` (a Popen with stdout
        piped) ends first; kills it and fails after ``timeout`` seconds."""
        what = what or f"{', '.join(trials)} at their gates"
        deadline = time.monotonic() + timeout
        while not (all(self.waiting(t) for t in trials) and (until is None or until())):
            if proc.poll() is not None:
                out = proc.stdout.read() if proc.stdout else ""
                raise AssertionError(f"the search ended ({proc.returncode}) before {what}:\n{out[-4000:]}")
            if time.monotonic() > deadline:
                proc.kill()
                missing = [t for t in trials if not self.waiting(t)]
                raise AssertionError(f"no {what} after {timeout:.0f} s (not at the gate in {self.folder}: "
                                     f"{', '.join(missing) or 'none; the other condition did not hold'})")
            time.sleep(POLL_S)

    def release(self, *trials: str) -> None:
        for trial_id in trials:
            (self.folder / f"{trial_id}.go").touch()


if __name__ == "__main__":
    gated = sorted(t for t, f in FAULTS.items() if gate_epoch(f) is not None)
    if gated and not GATE:
        sys.exit(f"error: FOCUS_TUNE_TEST_FAULTS holds gates ({', '.join(gated)}) but FOCUS_TUNE_TEST_GATE "
                 "names no folder for them")
    from focus_tune.search.api import main

    sys.exit(main(sys.argv[1:], trainable=faulty_trial))
