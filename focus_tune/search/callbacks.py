"""Driver-side Ray Tune callbacks: every trial in MLflow, its checkpoints in the search
state, its progress on the terminal. Workers never need the tracking URI."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ray.tune import Callback

from ..durable import disk_full
from ..errors import DiskFull
from ..procedure.job import PackJob, job_of, jobs_of, member_results
from ..procedure.racing import Lost
from ..procedure.state import disk_full_of
from .progress import Progress
from .storage import SearchState, checkpoint_uri


class MLflowCallback(Callback):
    """Each trial is a child run of the search's parent run (``tracking.Tracker``).

    While the tracking server is away the Tracker's calls wait (Tune's loop with them; the
    trials wait at their next report, in their actors). When its patience runs out, or
    Ctrl-C comes while it waits, the exception is kept in ``error`` and raised at the end of
    Tune's step, which ends ``fit()``: raised from a trial's event instead, Tune would log a
    traceback and count it as that trial's failure. The events of that step still go to the
    Tracker, which keeps what it cannot send for a resumed search."""

    def __init__(self, tracker, state: SearchState):
        self.tracker, self.state = tracker, state
        self.error: BaseException | None = None
        self.ended: set[str] = set()  # pack members whose runs ended while their pack went on

    def _send(self, method, *args, **kwargs) -> None:
        try:
            method(*args, **kwargs)
        except Exception as err:
            if not self.tracker.unavailable:
                raise
            self.error = self.error or err

    def on_step_begin(self, iteration, trials, **info):
        if self.error is not None:
            raise self.error

    def on_step_end(self, iteration, trials, **info):
        if self.error is not None:
            raise self.error

    def on_trial_start(self, iteration, trials, trial, **info):
        for job in jobs_of(job_of(trial)):  # a pack's members: a child run each
            self._send(self.tracker.start_trial, job)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        job = job_of(trial)
        for tid, member in member_results(job, result).items():
            self._send(self.tracker.log_result, tid, member)
            if isinstance(job, PackJob) and member.get("failed"):  # it stopped; the pack goes on
                self._send(self.tracker.end_trial, tid, failed=True, reason=member.get("error"))
                self.ended.add(tid)

    def on_trial_complete(self, iteration, trials, trial, **info):
        job = job_of(trial)
        last = member_results(job, trial.last_result or {})
        for member in jobs_of(job):
            tid = member.trial_id
            # else stopped by Ctrl-C: the driver marks it KILLED
            if tid in self.state.results and tid not in self.ended:
                stopped = self.state.stopped.get(tid)
                self._send(self.tracker.end_trial, tid, failed=self.state.results[tid] is None,
                           reason=last.get(tid, {}).get("error"), stopped=Lost(**stopped).text() if stopped else None)

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        for tid, uri in checkpoints_of(trial, checkpoint).items():
            self._send(self.tracker.note_checkpoint, tid, uri)

    def on_trial_recover(self, iteration, trials, trial, **info):
        # Tune restarts the trial from its last checkpoint; it stays this one child run. Its
        # worker may die while its actor starts, before on_trial_start made the run: made here.
        for job in jobs_of(job_of(trial)):
            self._send(self.tracker.start_trial, job)
            self._send(self.tracker.note_retry, job.trial_id, trial.run_metadata.num_failures, last_failure(trial))

    def on_trial_error(self, iteration, trials, trial, **info):
        for job in jobs_of(job_of(trial)):
            tid = job.trial_id
            if tid in self.ended:
                continue
            if tid not in self.state.results:  # the searcher hands it out again: the same run goes on
                self._send(self.tracker.note_crash, tid, self.state.crashed.get(tid, 1), last_failure(trial))
            else:
                self._send(self.tracker.end_trial, tid, failed=True, reason=str(trial.error_file))


class StateCallback(Callback):
    """Checkpoint paths into the search state (what --resume restarts a trial from) and the
    progress display; the scores themselves are recorded by the searcher. ``on_full`` is told
    of a full disk met while saving a checkpoint's path (the searcher's ``stop_for``)."""

    def __init__(self, state: SearchState, progress: Progress, on_full: Callable[[DiskFull], None] = lambda err: None):
        self.state, self.progress, self.on_full = state, progress, on_full
        self.running: set[str] = set()  # trials whose actor is training or evaluating now

    def on_step_end(self, iteration, trials, **info):
        self.progress.tick()  # the live bar's clock and ETA, between results

    def on_trial_start(self, iteration, trials, trial, **info):
        # The largest number of trainings seen running at once (the efficiency's slots): counted
        # here, where they run, not where they are handed out (with an autoscaler the searcher
        # queues every runnable trial while nodes are still starting).
        for job in jobs_of(job_of(trial)):
            self.running.add(job.trial_id)
            self.progress.started(job.trial_id)
        self.state.slots = max(self.state.slots, len(self.running))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        job = job_of(trial)
        epochs = job.train.epochs
        for tid, r in member_results(job, result).items():
            if r.get("failed") and isinstance(job, PackJob):  # a member stopped; its pack goes on
                self.running.discard(tid)
                self.progress.failed(tid, r.get("error", "no score reported"))
                self.progress.trial_done(tid, None)
                continue
            if "epoch" in r:
                self.progress.epoch(tid, r["epoch"], epochs, r.get("time_total_s"))
            if "score" in r:
                self.progress.evaluated(tid, r["epoch"], epochs, r["score"])

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        uris = checkpoints_of(trial, checkpoint)
        before = {tid: self.state.checkpoints.get(tid) for tid in uris}
        self.state.checkpoints.update(uris)
        try:
            self.state.save()
        except OSError as err:
            if disk_full(err) is None:
                raise
            # The saved state still names the trial's previous checkpoint: so does the state in
            # memory, and raising makes Tune keep that checkpoint too (it registers the new one,
            # and deletes the old, only after its callbacks return).
            for tid, uri in before.items():
                if uri is None:
                    del self.state.checkpoints[tid]
                else:
                    self.state.checkpoints[tid] = uri
            full = disk_full_of(err, self.state.path.parent)
            self.on_full(full)
            raise full from None

    def on_trial_complete(self, iteration, trials, trial, **info):
        job = job_of(trial)
        last = member_results(job, trial.last_result or {})
        for member in jobs_of(job):
            tid = member.trial_id
            if tid not in self.running:
                continue  # a pack's member that failed and was shown already
            self.running.discard(tid)
            if tid in self.state.results:
                score = self.state.results[tid]
                stopped = self.state.stopped.get(tid)
                if score is None and not stopped:
                    self.progress.failed(tid, last.get(tid, {}).get("error", "no score reported"))
                self.progress.trial_done(tid, score, self.state.trial_seconds.get(tid),
                                         stopped=Lost(**stopped).text() if stopped else None)

    def on_trial_recover(self, iteration, trials, trial, **info):
        tid = job_of(trial).trial_id
        self.progress.line(f"  {tid} crashed ({last_failure(trial)}); failure {trial.run_metadata.num_failures}, "
                           "retrying from its last checkpoint")

    def on_trial_error(self, iteration, trials, trial, **info):
        for job in jobs_of(job_of(trial)):
            tid = job.trial_id
            if tid not in self.running:
                continue
            self.running.discard(tid)
            if tid not in self.state.results:  # handed out again by the searcher (CRASH_HANDOUTS)
                self.progress.line(f"  {tid} crashed {trial.num_failures} times ({last_failure(trial)}); "
                                   "handed out again from its last checkpoint")
                continue
            self.progress.failed(tid, f"crashed {trial.num_failures} times; see {trial.error_file}")
            self.progress.trial_done(tid, None)


def checkpoints_of(trial, checkpoint) -> dict[str, str]:
    """Trial id -> the URI of its checkpoint in a trial's newly saved checkpoint: the trial's
    own, or for a pack the folder of each member that saved one (the members in the result
    reported with it; one that failed keeps its earlier checkpoint)."""
    job, uri = job_of(trial), checkpoint_uri(checkpoint)
    if not isinstance(job, PackJob):
        return {job.trial_id: uri}
    members = member_results(job, trial.last_result or {})
    return {tid: f"{uri.rstrip('/')}/{tid}" for tid, r in members.items() if not r.get("failed")}


def last_failure(trial) -> str:
    """The last failure in a trial's error file, in one line: where Ray says why an actor died,
    that line, else the message's last line (an exception's type and text; for an actor lost
    with its node, "The actor ... is unavailable: ...")."""
    try:
        text = Path(trial.error_file).read_text(errors="replace")
    except (TypeError, OSError):
        return "unknown error"
    lines = [ln.strip() for ln in text.rsplit("Failure # ", 1)[-1].splitlines()[1:] if ln.strip()]
    if not lines:
        return "unknown error"
    return next((ln for ln in lines if "because" in ln), lines[-1])[:300]
