"""The joint lambda_all x k2 stage searched by Optuna (``--joint-search optuna``).

Ray Tune's OptunaSearch over two categorical parameters, with two changes the staged
procedure needs: a suggestion that repeats a known candidate (a schedule already trained,
such as k2 <= k1, or one suggested before) is answered from the known score instead of
being trained again, so the budget counts distinct trainings as the grid does; and each
suggestion carries its ``trial_config``, so the trainable and the callbacks see a trial
exactly like a grid trial.
"""

from __future__ import annotations

import optuna
from optuna.trial import TrialState
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

optuna.logging.set_verbosity(optuna.logging.WARNING)  # no line per study and trial

MAX_REPEATS = 100  # suggestions of known candidates in a row before the search gives up


class DedupOptunaSearch(OptunaSearch):
    """OptunaSearch that never trains a (lambda_all, k2) candidate twice.

    candidates: (lambda_all, k2) -> trial config; known: (lambda_all, k2) -> score (None =
    failed) of candidates with a result. Results that carry no ``score`` (epochs without
    a validation estimate) are not reported to Optuna.
    """

    def __init__(self, candidates: dict, known: dict, **kwargs):
        points = [{"lambda_all": la, "k2": k2} for (la, k2), v in known.items() if v is not None]
        rewards = [v for v in known.values() if v is not None]
        super().__init__(points_to_evaluate=points or None, evaluated_rewards=rewards or None, **kwargs)
        self.candidates = candidates
        self.known = dict(known)
        self._key_of: dict[str, tuple] = {}

    def suggest(self, trial_id: str):
        for _ in range(MAX_REPEATS):
            params = super().suggest(trial_id)
            if params is None or params == Searcher.FINISHED:
                return params
            key = (float(params["lambda_all"]), int(params["k2"]))
            if key not in self.known:
                self.known[key] = None  # pending
                self._key_of[trial_id] = key
                return {**params, "trial_config": self.candidates[key]}
            # A repeat: tell Optuna the known score and ask again under the same Tune trial.
            ot_trial = self._ot_trials.pop(trial_id)
            score = self.known[key]
            state = TrialState.COMPLETE if score is not None else TrialState.FAIL
            self._ot_study.tell(ot_trial, score, state=state)
        return Searcher.FINISHED

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if self.metric in result:
            super().on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        key = self._key_of.get(trial_id)
        if key is not None and result and not result.get("failed") and self.metric in result:
            self.known[key] = result[self.metric]
        super().on_trial_complete(trial_id, result if result and self.metric in result else None,
                                  error=error or not result or self.metric not in result)
