"""Racing in Ray Tune: a trial scheduler that stops the trials the search's racing rule
(``focus_tune.procedure.racing``) says have lost.

Why a ``TrialScheduler`` and not the searcher: Tune asks the scheduler first about every
result, and only its decision can stop a running trial (a ``Searcher`` hands out trials and
hears results, but cannot end one). The rule itself stays with the searcher, which knows the
stages, records the race epoch's scores in the search state and, when Tune reports the
stopped trial complete, records it as stopped: no score, the stage decides without it, and
``--resume`` does not run it again.
"""

from __future__ import annotations

from ray.tune.schedulers import FIFOScheduler, TrialScheduler


class RaceScheduler(FIFOScheduler):
    """FIFO order (the searcher already hands out the most urgent trial first) plus racing:
    ``searcher.race_result(tune_id, result)`` returns the trials that lost at this result;
    the reporting trial stops at once, another at its next result (one epoch later)."""

    def __init__(self, searcher):
        super().__init__()
        self.searcher = searcher
        self.to_stop: set[str] = set()

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        self.to_stop |= self.searcher.race_result(trial.trial_id, result)
        if trial.trial_id in self.to_stop:
            self.to_stop.discard(trial.trial_id)
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE
