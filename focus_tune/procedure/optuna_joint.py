"""The joint lambda_all x k2 stage searched by Optuna with a budget of its own.

The grid (``--joint-search grid``) trains every distinct joint candidate. With
``--joint-search optuna`` the driver asks :class:`JointOptuna` for the next candidate to
train, up to ``--joint-budget N`` distinct trainings (default :func:`default_budget`, half
the grid's), and the stage then picks the best candidate with a result.

Usage (the driver; no Ray here)::

    opt = JointOptuna(space, budget=N, seed=seed,
                      storage="sqlite:///<run folder>/optuna.db", study_name=f"joint-s{seed}")
    while (spec := opt.ask()) is not None:      # several asks may be outstanding at once
        ...                                     # train spec (a plan.TrialSpec)
        opt.tell(spec.trial_id, score)          # validation ECE, or None when the trial failed

What it does, all through Optuna's public API (``create_study``, ``ask``/``tell``,
``add_trial``/``create_trial``, ``enqueue_trial``, ``Study.sampler``):

* **Seeded.** Every candidate whose score is known before the first ask
  (``space.evaluated``: e.g. k2 <= k1, the stage-k1 winner's schedule) is added to the study
  as a completed trial (``user_attrs["source"] = "known"``), so TPE starts from what the
  stages already know. When a training's score arrives, the other grid points with the same
  schedule (the same ``TrialSpec``) are added the same way.
* **Never trains twice.** :meth:`JointOptuna.ask` never returns a candidate trained,
  known or outstanding. When Optuna suggests one, the Optuna trial is answered at once and
  Optuna is asked again: a known score is told as that value, a failed training as FAIL, an
  outstanding one as FAIL (no information yet; TPE's constant liar already counts it as
  running). ``user_attrs["answered_from"]`` names the training it repeated. After
  ``max_repeats`` such answers in a row the first untried candidate in grid order is
  enqueued (``enqueue_trial``) and handed out, so a sampler stuck on known points cannot
  stop the search early.
* **Budget.** ``budget`` counts distinct trainings handed out for this stage, over every
  restart of the driver: the trained trials in the study (``user_attrs["source"] =
  "trained"``, ``user_attrs["trial_id"]``) plus joint-stage trainings the driver already has
  results for. :meth:`ask` returns None once it is spent, or when every grid point is known
  or outstanding.
* **Persisted and resumable.** With an RDB ``storage`` (a SQLite URL) the study is created
  with ``load_if_exists=True``. A new object over the same storage continues the search:
  known points are not added twice, and trials a killed driver left RUNNING are resolved in
  trial order: one whose result the driver has (``space.evaluated``) is told that score;
  the others are handed out again first by :meth:`ask` (the driver resumes their
  checkpoints; not counted twice), or, beyond the budget, told FAIL with
  ``user_attrs["interrupted"] = True``. A RUNNING trial that was never handed out (the
  driver died inside :meth:`ask`) is told FAIL.
* **Deterministic.** The sampler is ``TPESampler(seed=...)`` (multivariate, constant
  liar), re-created before each ask with a seed drawn from ``seed`` and the number of trials
  in the study, so the suggestions depend only on the seed and the study's history: the same
  sequence of tells gives the same asks, also across a restart. With several asks
  outstanding at once (parallel slots), the history, and so the order of the candidates,
  depends on the order in which trainings complete.

Open the study (a run folder's ``optuna.db``) with optuna-dashboard, a separate tool that is
not a dependency of this project (``pip install optuna-dashboard``)::

    optuna-dashboard sqlite:///<run folder>/optuna.db
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

optuna.logging.set_verbosity(optuna.logging.WARNING)  # no line per study and trial

MAX_REPEATS = 100  # Optuna suggestions of known candidates in a row before the grid-order fallback
PARAMS = ("lambda_all", "k2")


def default_budget(space_or_grid_size: Any) -> int:
    """The default ``--joint-budget``: half the grid's distinct joint trainings, rounded up,
    at least 2 (1 when the grid has a single one).

    ``space_or_grid_size`` is a :class:`~focus_tune.procedure.plan.JointSpace` (its ``budget``, the
    distinct trainings of the joint grid) or that number.

    Why half: a budget equal to the grid's saves nothing (with deduplication Optuna then
    trains the grid's candidates in another order), so the default must be well below it;
    half is the saving the option exists for while still trying several candidates beyond
    the points the stages already know. Why at least 2: one training after the seeded
    points is a single draw; the second is the first one TPE picks knowing a joint result.
    On a grid of 2 distinct trainings (the smoke profile) the default is therefore the
    whole grid. docs/BENCHMARKS.md ("Joint stage: grid vs Optuna") measures the choice
    against the grid at equal budgets.
    """
    n = getattr(space_or_grid_size, "budget", space_or_grid_size)
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ValueError(f"grid size must be a non-negative integer, got {n!r}")
    n = int(n)
    if n <= 1:
        return n
    return max(2, math.ceil(n / 2))


class JointOptuna:
    """Ask/tell Optuna search of the joint stage with a budget of distinct trainings.

    space: a :class:`~focus_tune.procedure.plan.JointSpace` (``lambdas``, ``k2``, ``trials``,
    ``evaluated``, ``joint_trial``). budget: distinct trainings this stage may spend
    (None: :func:`default_budget`). seed: the TPE seed. storage: an Optuna storage URL such
    as ``sqlite:///<run folder>/optuna.db`` (None: in memory, nothing persisted).
    study_name: the study in that storage (created, or loaded when it exists).
    max_repeats: suggestions of known candidates in a row before the grid-order fallback.

    See the module docstring for the seeding, budget, resume and determinism rules.
    """

    def __init__(self, space, budget: int | None = None, seed: int = 0, storage: str | None = None,
                 study_name: str = "joint", max_repeats: int = MAX_REPEATS):
        if budget is None:
            budget = default_budget(space)
        if isinstance(budget, bool) or int(budget) != budget or budget < 0:
            raise ValueError(f"budget must be a non-negative integer, got {budget!r}")
        if max_repeats < 0:
            raise ValueError(f"max_repeats must be >= 0, got {max_repeats}")
        self.space = space
        self.budget = int(budget)
        self.seed = int(seed)
        self.max_repeats = int(max_repeats)
        self._lambdas = [float(v) for v in space.lambdas]
        self._k2 = [int(k) for k in space.k2]
        self._dists = {"lambda_all": CategoricalDistribution(self._lambdas),
                       "k2": CategoricalDistribution(self._k2)}
        # Grid points in grid order (lambda_all outer, k2 inner) and the training each maps to.
        self._grid = [(la, k2) for la in self._lambdas for k2 in self._k2]
        self._spec = {key: space.joint_trial(*key) for key in self._grid}
        self._keys_of: dict[str, list[tuple[float, int]]] = {}
        for key in self._grid:
            self._keys_of.setdefault(self._spec[key].trial_id, []).append(key)

        self._score: dict[str, float | None] = {}  # trial id -> score; None = the training failed
        # trial id -> its RUNNING trial's (number, grid point)
        self._pending: dict[str, tuple[int, tuple[float, int]]] = {}
        self._handed: list[str] = []  # distinct trainings handed out, in order
        self._rehand: list[str] = []  # RUNNING trainings of a killed driver, handed out again first

        self._storage = (optuna.storages.InMemoryStorage() if storage is None
                         else optuna.storages.get_storage(storage))
        self.study = optuna.create_study(storage=self._storage, study_name=study_name, direction="minimize",
                                         load_if_exists=True, sampler=self._sampler(0))
        with warnings.catch_warnings():  # experimental since Optuna 3.2; only names the value in the dashboard
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self.study.set_metric_names(["val_ece"])
        self.study.set_user_attr("grid", {"lambda_all": self._lambdas, "k2": self._k2})
        self.study.set_user_attr("budget", self.budget)
        self._resume()

    # -- public API ---------------------------------------------------------------------
    def ask(self):
        """The TrialSpec of the next candidate to train, or None (budget spent, or every grid
        point known or outstanding)."""
        if self._rehand:
            return self._spec[self._pending[self._rehand.pop(0)][1]]
        if len(self._handed) >= self.budget or not self._untried():
            return None
        fallback_at = self.max_repeats
        # A WAITING trial left by a driver killed between enqueue and ask is popped before
        # the fallback's own: each loop either hands out or answers one trial, so the bound holds.
        for attempt in range(self.max_repeats + 2 + len(self._grid)):
            if attempt == fallback_at:
                key = next(k for k in self._grid if self._spec[k].trial_id in self._untried())
                self.study.enqueue_trial(dict(zip(PARAMS, key)), user_attrs={"fallback": True})
            self.study.sampler = self._sampler(len(self.study.get_trials(deepcopy=False)))
            trial = self.study.ask()
            key = (float(trial.suggest_categorical("lambda_all", self._lambdas)),
                   int(trial.suggest_categorical("k2", self._k2)))
            tid = self._spec[key].trial_id
            if tid not in self._score and tid not in self._pending:
                trial.set_user_attr("trial_id", tid)
                trial.set_user_attr("source", "trained")
                self._pending[tid] = (trial.number, key)
                if tid not in self._handed:
                    self._handed.append(tid)
                return self._spec[key]
            trial.set_user_attr("answered_from", tid)
            if tid in self._pending or self._score[tid] is None:
                trial.set_user_attr("outstanding", tid in self._pending)
                self.study.tell(trial, state=TrialState.FAIL)
            else:
                self.study.tell(trial, self._score[tid])
        raise RuntimeError("JointOptuna.ask: no untried candidate came out of the study")  # unreachable

    def tell(self, trial_id: str, score: float | None) -> None:
        """The result of a training handed out by :meth:`ask`: validation ECE (lower is
        better), or None (or NaN) when the trial failed."""
        if trial_id not in self._pending:
            raise ValueError(f"{trial_id!r} is not an outstanding training of this search "
                             f"(outstanding: {sorted(self._pending) or 'none'})")
        if trial_id in self._rehand:
            self._rehand.remove(trial_id)
        number, own = self._pending.pop(trial_id)
        ok = score is not None and math.isfinite(score)
        if ok:
            self.study.tell(number, float(score))
        else:
            self.study.tell(number, state=TrialState.FAIL)
        self._score[trial_id] = float(score) if ok else None
        if ok:
            self._add_known([k for k in self._keys_of[trial_id] if k != own], float(score), trial_id)

    @property
    def spent(self) -> int:
        """Distinct trainings handed out so far (over restarts): what counts against the budget."""
        return len(self._handed)

    @property
    def pending(self) -> tuple[str, ...]:
        """Trial ids handed out and not told yet."""
        return tuple(self._pending)

    @property
    def exhausted(self) -> bool:
        """True when :meth:`ask` has nothing more to hand out (outstanding ones may still run)."""
        return not self._rehand and (len(self._handed) >= self.budget or not self._untried())

    def best(self) -> tuple[float, int, float] | None:
        """(lambda_all, k2, score) of the best scored grid point, ties in grid order; None if none."""
        scored = [(self._score[self._spec[k].trial_id], i, k) for i, k in enumerate(self._grid)
                  if self._score.get(self._spec[k].trial_id) is not None]
        if not scored:
            return None
        score, _, key = min(scored)
        return (*key, score)

    # -- internals ----------------------------------------------------------------------
    def _sampler(self, n_trials: int) -> optuna.samplers.TPESampler:
        """TPE seeded by (seed, trials so far): the suggestion depends on the study's history only.

        n_startup_trials=1: TPE from the first ask as soon as anything is known (the seeded
        points); random only on an empty study.
        """
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=(self.seed * 1_000_003 + n_trials) % 2**32,
                                              n_startup_trials=1, multivariate=True, constant_liar=True)

    def _untried(self) -> set[str]:
        return {tid for tid in self._keys_of if tid not in self._score and tid not in self._pending}

    def _add_known(self, keys: Sequence[tuple[float, int]], score: float, tid: str) -> None:
        for la, k2 in keys:
            self.study.add_trial(create_trial(
                value=score, params={"lambda_all": la, "k2": k2}, distributions=self._dists,
                user_attrs={"source": "known", "trial_id": tid},
            ))

    def _resume(self) -> None:
        """Rebuild the state from the study (a resume) and seed what ``space.evaluated`` adds."""
        evaluated = {(float(la), int(k2)): float(s) for la, k2, s in self.space.evaluated}
        by_tid = {self._spec[k].trial_id: s for k, s in evaluated.items() if k in self._spec}
        present: set[tuple[float, int]] = set()  # grid points with a completed known/trained trial
        for t in self.study.get_trials(deepcopy=False):
            source, tid = t.user_attrs.get("source"), t.user_attrs.get("trial_id")
            key = (float(t.params["lambda_all"]), int(t.params["k2"])) if len(t.params) == 2 else None
            if source == "trained" and tid in self._keys_of:
                if tid not in self._handed:
                    self._handed.append(tid)
                if t.state == TrialState.COMPLETE:
                    self._score[tid] = t.value
                    present.add(key)
                elif t.state == TrialState.FAIL and not t.user_attrs.get("interrupted"):
                    self._score[tid] = None
                elif t.state == TrialState.RUNNING:
                    self._pending[tid] = (t.number, key)
                    if tid in by_tid:  # its result arrived but the driver died before telling
                        self.tell(tid, by_tid[tid])
                        present.update(self._keys_of[tid])
                    elif self._handed.index(tid) < self.budget:
                        self._rehand.append(tid)
                    else:  # beyond the budget: not handed out again
                        del self._pending[tid]
                        self._trial_attr(t.number, "interrupted", True)
                        self.study.tell(t.number, state=TrialState.FAIL)
            elif t.state == TrialState.RUNNING:
                self.study.tell(t.number, state=TrialState.FAIL)  # died inside ask(): never handed out
            elif source == "known" and t.state == TrialState.COMPLETE:
                present.add(key)
        for key in self._grid:  # seed in grid order
            if key not in evaluated:
                continue
            tid = self._spec[key].trial_id
            if tid in self._pending:
                continue
            self._score[tid] = evaluated[key]  # the driver's results are the record
            if self._spec[key].stage == "joint" and tid not in self._handed:
                self._handed.append(tid)  # a joint training the driver has, not in the study
            if key not in present:
                self._add_known([key], evaluated[key], tid)
                present.add(key)

    def _trial_attr(self, number: int, key: str, value: Any) -> None:
        """A user attribute on a trial known by its number (through the storage's public API)."""
        study_id = self._storage.get_study_id_from_name(self.study.study_name)
        self._storage.set_trial_user_attr(
            self._storage.get_trial_id_from_study_id_trial_number(study_id, number), key, value)
