"""The staged procedure as a Ray Tune ``Searcher``: one Tuner runs the whole search.

``suggest()`` asks the plan (a pure function of the results so far) which trials can run
now and hands out the most urgent one; ``on_trial_complete()`` records its score in the
search state (saved at once), which may unblock the next stage. A trial starts as soon as
its own dependencies are met, not when a batch of unrelated trials ends.

Order when slots are scarce: :func:`~focus_tune.procedure.plan.priority` (the sequential stages
first: they are the critical path). On a fixed cluster the searcher hands out at most as many trials as can run at
once, so that each free slot takes the most urgent trial known at that moment; with an
autoscaler (``slots=None``) it hands out everything runnable, and the Tuner's
pending-trial limit lets the autoscaler see that whole demand.
"""

from __future__ import annotations

import math
from typing import Callable

from ray.tune.search import Searcher

from ..durable import disk_full
from ..errors import DiskFull, StageFailed
from ..interrupt import INTERRUPT
from ..names import CONFORMAL_PREFIX, FINAL_ROW_PREFIXES, POSTHOC_SECONDS
from ..procedure.job import (
    CONFIG_KEY,
    DISK_FULL_KEY,
    INFLUENCE_KEY,
    SUMMARY_KEY,
    PackJob,
    TrialJob,
    job_summary,
    jobs_of,
    member_results,
)
from ..procedure.plan import SearchPlan, TrialSpec, priority
from ..procedure.racing import Lost, losers
from ..procedure.state import disk_full_at, disk_full_of
from .storage import SearchState

# A trial whose Tune trial crashed past its retries (``--max-retries``) is handed out this many
# times more, each a new Tune trial from its last checkpoint, before it counts as failed. Ray
# Tune 2.60 can count one worker death twice: the dead actor's two pending tasks fail one after
# the other, and the second, arriving while the trial waits for its retry, ends it for good
# (found by the fault soak, docs/RELIABILITY.md).
CRASH_HANDOUTS = 1


class PlanSearcher(Searcher):
    """Hands out the plan's trials as :class:`~focus_tune.procedure.job.TrialJob` configs.

    make_job(spec) -> TrialJob; slots: trials at once (None: no limit); optuna: a factory
    ``JointSpace -> JointOptuna`` for ``--joint-search optuna``; on_handout(job) is told of
    every trial handed out (the progress display). The score of a trial is its validation
    score (``select_by``) at the last epoch (the paper's last-epoch model); the per-item
    influences of that evaluation go to the state, for the noise of the stage decisions.

    A full disk (a trial's ``DISK_FULL_KEY`` result, or the state that cannot be saved) is
    not a result: the trial is left without one (``--resume`` runs it again), :attr:`error`
    is set and the running trials are stopped (:meth:`stop_for`).
    """

    def __init__(self, plan: SearchPlan, state: SearchState, make_job: Callable[[TrialSpec], TrialJob],
                 slots: int | None, epochs: int, optuna=None,
                 on_handout: Callable[[TrialJob], None] = lambda job: None, pack: int = 1, race=None):
        super().__init__()  # no metric: results without a score (a NaN trial's) are valid too
        self.plan, self.state, self.make_job = plan, state, make_job
        self.slots, self.epochs, self.pack = slots, epochs, pack
        self.optuna_factory, self.optuna = optuna, None
        self.on_handout = on_handout
        self.live: dict[str, TrialJob | PackJob] = {}  # Tune's trial id -> the job it runs
        self.race = race  # the TrainConfig whose racing, race_at, race_se, tie_se apply; None: no racing
        self.stopping: dict[str, Lost] = {}  # trial id -> why the race stops it (until Tune says it stopped)
        self.error: StageFailed | DiskFull | None = None

    def stop_for(self, err: DiskFull) -> None:
        """End the search on an error that no retry mends: hand out nothing more, stop the
        running trials (the Tune stopper polls ``INTERRUPT.abort``); the first error is kept."""
        if self.error is None:
            self.error = err
        INTERRUPT.abort.set()

    def save_state(self) -> bool:
        """Save the search state; on a full disk, stop the search (False) instead of raising
        into Ray Tune, which would log it and go on."""
        try:
            self.state.save()
        except OSError as err:
            if disk_full(err) is None:
                raise
            self.stop_for(disk_full_of(err, self.state.path.parent))
            return False
        return True

    # -- handing out ----------------------------------------------------------------------
    def suggest(self, trial_id: str):
        # FINISHED only once nothing is out: Tune then ends the experiment.
        end = Searcher.FINISHED if not self.live else None
        if self.error is not None or INTERRUPT.event.is_set():
            return end
        if self.slots is not None and len(self.live) >= self.slots:
            return None
        try:
            batch = self.plan.next_batch(self.state.results)
        except StageFailed as err:
            self.error = err
            return end
        if not batch:  # every trial of the search has a result
            return end
        spec = self._most_urgent(batch)
        if spec is None:
            return None  # everything runnable is out: wait for a result
        job = self.make_job(spec)
        if self.pack > 1 and self._packable(job):
            job = self._pack_with(job, batch)
        self.live[trial_id] = job
        for member in jobs_of(job):
            self.on_handout(member)
        return {CONFIG_KEY: job, SUMMARY_KEY: job_summary(job)}

    def _running(self) -> set[str]:
        return {member.trial_id for job in self.live.values() for member in jobs_of(job)}

    def _most_urgent(self, batch) -> TrialSpec | None:
        """The most urgent runnable trial that is not out yet (an Optuna joint stage first:
        it is the critical path), or None."""
        if batch.joint_space is not None:
            if self.optuna is None:
                self.optuna = self.optuna_factory(batch.joint_space)
            spec = self.optuna.ask()
            if spec is not None:
                return spec
        running = self._running()
        return min((t for t in batch.trials if t.trial_id not in running), key=priority, default=None)

    @staticmethod
    def _packable(job: TrialJob) -> bool:
        """A training from its start: a test evaluation runs alone, and so does a trial that
        resumes from a checkpoint (a pack's members share one Adam step count)."""
        return job.trains and job.resume_from is None

    def _pack_with(self, first: TrialJob, batch) -> TrialJob | PackJob:
        """``first`` and the next most urgent packable trainings runnable now (an Optuna joint
        stage asks one candidate at a time: its candidates go alone). A pack takes its share
        of them: with more trials free than trainings waiting, each goes to a trial of its own
        (packing them would leave free trials idle), else up to ``pack`` per trial."""
        if batch.joint_space is not None and first.spec.stage == "joint":
            return first
        running = self._running() | {first.trial_id}
        waiting = []
        for spec in sorted((t for t in batch.trials if t.trial_id not in running), key=priority):
            if batch.joint_space is not None and spec.stage == "joint":
                continue
            job = self.make_job(spec)
            if self._packable(job):
                waiting.append(job)
        free = None if self.slots is None else max(1, self.slots - len(self.live))
        size = self.pack if free is None else min(self.pack, math.ceil((1 + len(waiting)) / free))
        jobs = [first, *waiting[: size - 1]]
        return first if len(jobs) == 1 else PackJob(tuple(jobs))

    # -- racing (focus_tune.procedure.racing) -----------------------------------------------------------
    def race_result(self, tune_id: str, result: dict) -> set[str]:
        """A trial's result, seen by the race scheduler before anything else: at the race
        epoch its score and influences are recorded (saved at once) and, when racing stops,
        its stage's candidates compared. Returns Tune's ids of the trials that lost (stop them)."""
        job = self.live.get(tune_id)
        race = self.race
        if (race is None or race.racing == "off" or not isinstance(job, TrialJob) or job.spec.stage == "final"
                or result.get("epoch") != race.race_at or "score" not in result):
            return set()
        tid = job.trial_id
        self.state.race[tid] = {"epoch": race.race_at, "score": float(result["score"]),
                                **({"influence": result[INFLUENCE_KEY]} if INFLUENCE_KEY in result else {})}
        if not self.save_state() or race.racing != "stop":
            return set()
        stages, protected = self._race_entrants(tid)
        lost = {}
        for entrants in stages.values():
            lost.update(losers(entrants, race.race_at, race.race_se, race.tie_se,
                               lambda a, b: self.state.difference_se(a, b, race=True)))
        running = {member.trial_id: tune for tune, j in self.live.items() for member in jobs_of(j)}
        out = set()
        for loser, why in lost.items():
            if (loser in running and loser not in protected and loser not in self.state.results
                    and loser not in self.stopping):
                self.stopping[loser] = why
                out.add(running[loser])
        return out

    def _race_entrants(self, tid: str) -> tuple[dict[str, list[tuple[str, float, float]]], set[str]]:
        """stage -> (trial id, race score, penalty) of its distinct trainings that reached the
        race epoch, for the stages in which ``tid`` races; and the trainings never to stop: a
        candidate of two stages (deduplicated) could still win the other. The 'none' stage and
        an Optuna joint stage do not race; nor does the constant stage when a joint schedule
        can equal a constant one (k2 >= L, a stage not open yet)."""
        stages = self.plan.candidates(self.state.results)
        count: dict[str, int] = {}
        for rows, _ in stages.values():
            for trained in {c.trained_as for c in rows}:
                count[trained] = count.get(trained, 0) + 1
        skip = {"none"} | ({"joint"} if self.plan.joint_search == "optuna" else set())
        if max(self.plan.grid.k2) >= self.plan.length:
            skip.add("constant")
        out = {}
        for stage, (rows, _) in stages.items():
            penalty = {c.trained_as: sum(c.spec.schedule.values) for c in rows}
            if stage in skip or tid not in penalty:
                continue
            out[stage] = [(t, self.state.race[t]["score"], p) for t, p in penalty.items() if t in self.state.race]
        return out, {t for t, n in count.items() if n > 1}

    # -- results ----------------------------------------------------------------------------
    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """A pack's member is done when it reports its last epoch's score or its failure: its
        result is recorded then (the pack goes on with the others)."""
        job = self.live.get(trial_id)
        if not isinstance(job, PackJob):
            return
        if DISK_FULL_KEY in result:
            return  # on_trial_complete stops the search
        members = {member.trial_id: member for member in job.jobs}
        for tid, r in member_results(job, result).items():
            if tid in members and tid not in self.state.results and (
                    r.get("failed") or ("score" in r and r.get("epoch") == self.epochs)):
                self._record(members[tid], r, error=False, share=len(job.jobs))

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        job = self.live.pop(trial_id, None)
        if job is None:
            return
        result = result or {}
        if DISK_FULL_KEY in result:  # its checkpoint could not be written: no result, stop the search
            self.stop_for(disk_full_at(self.state.path.parent, f"{job.trial_id}: {result[DISK_FULL_KEY]}"))
            return
        if isinstance(job, PackJob):
            if error:  # crashed past its retries: every member without a result fails with it
                for member in job.jobs:
                    if member.trial_id not in self.state.results:
                        self._record(member, {}, error=True, share=len(job.jobs))
            return  # members recorded as they finished; the rest stopped (Ctrl-C): --resume runs them
        self._record(job, result, error)

    def _record(self, job: TrialJob, result: dict, error: bool, share: int = 1) -> None:
        """One training's result into the search state (``share``: trainings of its trial, which
        split the trial's time). A trial whose Tune trial crashed past its retries is handed out
        once more (:data:`CRASH_HANDOUTS`) before it counts as failed."""
        tid = job.trial_id
        influence = None
        if error:
            self.state.crashed[tid] = self.state.crashed.get(tid, 0) + 1
            if self.state.crashed[tid] <= CRASH_HANDOUTS:
                self.save_state()
                return  # no result: the plan hands it out again, from its last checkpoint
            score = None  # crashed past its retries again
        elif result.get("failed"):
            score = None  # a non-finite loss
        elif "score" in result and result.get("epoch") == self.epochs:
            score, influence = float(result["score"]), result.get(INFLUENCE_KEY)
        elif tid in self.stopping:  # lost its race: no score, and a stage decides without it
            score = None
            self.state.stopped[tid] = dict(vars(self.stopping.pop(tid)))
        else:
            return  # stopped before its end (Ctrl-C): it runs again, from its checkpoint, on --resume
        self.state.results[tid] = score
        if influence is not None:
            self.state.influence[tid] = influence
        if job.spec.stage == "final" and score is not None:
            self.state.finals[tid] = {k: v for k, v in result.items()
                                      if k.startswith(("test", "val/", CONFORMAL_PREFIX, *FINAL_ROW_PREFIXES))
                                      or k == "epoch"}
            self.state.finals[tid]["seed"] = job.spec.seed
            posthoc = {row: result[key] for row, key in POSTHOC_SECONDS.items() if key in result}
            if posthoc:
                self.state.posthoc_seconds[tid] = posthoc
        self.state.trial_seconds[tid] = float(result.get("time_total_s", 0.0)) / share
        if not self.save_state():
            return
        if self.optuna is not None and job.spec.stage == "joint":
            self.optuna.tell(tid, score)

    # Tune's periodic experiment snapshot would call these; the search state file, written
    # after every trial, is what --resume reads (see the module docstring of storage).
    def save(self, checkpoint_path: str) -> None:
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass
