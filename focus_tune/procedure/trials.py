"""The trials of the staged search as data: what the plan hands out and decides.

:class:`TrialSpec` is one training (or test evaluation) to run; :class:`Batch` the trials
whose dependencies are met; :class:`StageWinner` and :class:`Candidate` what a stage chose
among; :class:`JointSpace` the joint stage handed to a search algorithm; :func:`priority`
the order in which to start runnable trials; :class:`Trainings` the distinct trainings of
one replay of the plan. ``focus_tune.procedure.plan`` makes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from ..sim.regularization import LambdaSchedule

Results = Mapping[str, "float | None"]  # trial id -> selection score (None: failed)


@dataclass(frozen=True)
class TrialSpec:
    """One training (or, for a final with ``source_trial``, one test evaluation) to run.

    ``trial_id`` is deterministic, readable and filesystem safe, e.g. ``stage2-l0.005-s0``,
    ``joint-la0.01-k21-s0``, ``constant-0.01-s0``, ``none-s0``, ``final-time-dependent-s1``.
    ``params`` are flat values for tracking (schedule summary, lambda_1..lambda_i where
    the stage defines them, lambda_all, k2, lambda_const, seed).
    ``source_trial`` is set on the final whose seed is the search seed: the search trial
    ``source_trial`` already trained this schedule with this seed, so the runner only
    evaluates its checkpoint on the test set.
    """

    trial_id: str
    stage: str  # stage1..stageK | joint | constant | none | final
    family: str  # none | constant | time-dependent
    schedule: LambdaSchedule
    seed: int
    params: dict[str, float | int | str] = field(hash=False)
    source_trial: str | None = None

    @property
    def label(self) -> str:
        """What a person reads for its stage: ``stage2``, ``joint``, ``final none``."""
        return f"final {self.family}" if self.stage == "final" else self.stage


@dataclass(frozen=True)
class StageWinner:
    """The chosen candidate of a stage.

    ``candidate`` is the candidate as the procedure sees it (e.g. ``joint-la0.01-k1-s0``);
    ``trained_as`` is the trial whose result it took, which differs when the candidate was
    deduplicated (there, ``stage3-l0.01-s0``).
    """

    stage: str
    candidate: TrialSpec
    trained_as: str
    score: float
    # How sure the decision was: the closest rival (the lowest scorer when the tie rule chose
    # a less penalized candidate, else the runner-up), the rival's score minus the winner's
    # (negative when the tie rule applied) and the standard error of that paired difference
    # (None where no noise is known); rule: "lowest", "tie: less penalty" or "only candidate".
    rival: str | None = None
    difference: float | None = None
    difference_se: float | None = None
    rule: str = "lowest"

    @property
    def schedule(self) -> LambdaSchedule:
        return self.candidate.schedule


@dataclass(frozen=True)
class Candidate:
    """One candidate of a stage as the procedure saw it (:meth:`SearchPlan.candidates`).

    ``trained_as`` is the trial that holds its training (itself, or the earlier trial of the
    same schedule it was deduplicated onto); ``status`` is "ok", "failed" (the training
    failed or scored NaN) or "not run" (no result yet, or a joint candidate an Optuna
    search did not try); ``score`` is the selection score when "ok".
    """

    spec: TrialSpec
    trained_as: str
    status: str
    score: float | None


@dataclass(frozen=True)
class JointSpace:
    """The joint stage (lambda_all x k2) handed to a search algorithm such as Optuna.

    The runner searches ``lambdas`` x ``k2`` with ``budget`` trainings, makes each trial's
    spec with :meth:`joint_trial`, and stores its score under that spec's ``trial_id``. A
    spec whose id already has a result needs no training (it is a schedule trained before,
    e.g. k2 <= k1). Once ``budget`` joint trainings have a result, the stage is decided
    over every joint candidate with a result.
    """

    prefix: tuple[float, ...]  # lambda_1..lambda_k1, the stage winners
    lambdas: tuple[float, ...]  # grid of lambda_all
    k2: tuple[int, ...]
    budget: int  # distinct trainings of the joint grid
    trained: int  # of those, how many already have a result (a resumed search)
    evaluated: tuple[tuple[float, int, float], ...]  # (lambda_all, k2, score) known so far
    trials: dict[tuple[float, int], TrialSpec] = field(hash=False, repr=False)

    @property
    def remaining(self) -> int:
        """Trainings left in the budget."""
        return self.budget - self.trained

    def joint_trial(self, lambda_all: float, k2: int) -> TrialSpec:
        """The spec that trains (or already trained) the joint candidate (lambda_all, k2)."""
        key = (float(lambda_all), int(k2))
        if key not in self.trials:
            raise ValueError(
                f"(lambda_all={lambda_all}, k2={k2}) is not on the joint grid "
                f"lambdas={list(self.lambdas)} x k2={list(self.k2)}"
            )
        return self.trials[key]


@dataclass(frozen=True)
class Batch:
    """Trainings whose dependencies are met and that have no result yet: run them in parallel.

    With ``joint_search="optuna"``, ``joint_space`` is set while the joint stage is open and
    its trials are not in ``trials``. An empty batch (no trials, no joint space) means done.
    """

    trials: list[TrialSpec]
    joint_space: JointSpace | None = None

    @property
    def stages(self) -> tuple[str, ...]:
        """The stages present, in procedure order (joint included when searched by Optuna)."""
        names = [t.stage for t in self.trials] + (["joint"] if self.joint_space else [])
        return tuple(dict.fromkeys(names))

    @property
    def trainings(self) -> int:
        """Trials that train a model (finals with a ``source_trial`` only evaluate one)."""
        return sum(t.source_trial is None for t in self.trials)

    def __bool__(self) -> bool:
        return bool(self.trials) or self.joint_space is not None


def priority(spec: TrialSpec) -> tuple:
    """The order in which to start runnable trials when slots are scarce (lower first; ties
    keep the plan's order): the sequential stages first (stage i unblocks stage i+1, the
    critical path), then the constant and unregularized candidates (each unblocks three
    finals), then finals that train (the unregularized one first: it also fits and
    evaluates its temperature-scaled baseline, the longest trial), then finals that only
    evaluate a checkpoint."""
    if spec.stage.startswith("stage") or spec.stage == "joint":
        return (0,)
    if spec.stage in ("constant", "none"):
        return (1,)
    return (2 if spec.source_trial is None else 3, spec.family != "none")


class Trainings:
    """The distinct trainings of one replay, keyed by what they compute.

    Two specs with the same key train the same model: the first one that has a result
    stands for the key, or, when none has, the first one registered. Preferring the one
    with a result keeps earlier choices valid when a later family's finals become known
    before an earlier family's (a resumed search), so nothing is trained twice.
    """

    def __init__(self, results: Results):
        self.results = results
        self.groups: dict[tuple, list[TrialSpec]] = {}

    def add(self, spec: TrialSpec) -> tuple:
        # A final is a test evaluation (or a retrain) of a family winner; a search trial is
        # a validation run. Same schedule and seed in both roles is handled by source_trial.
        key = (spec.stage == "final", spec.schedule, spec.seed)
        self.groups.setdefault(key, []).append(spec)
        return key

    def first(self, key: tuple) -> TrialSpec:
        """The spec that first asked for this training."""
        return self.groups[key][0]

    def trained(self, key: tuple) -> TrialSpec:
        """The spec that stands for the key: the first with a result, else the first."""
        group = self.groups[key]
        return next((s for s in group if s.trial_id in self.results), group[0])

    def has_result(self, key: tuple) -> bool:
        return self.trained(key).trial_id in self.results

    def score(self, key: tuple) -> float | None:
        """The selection score, or None when the training failed (None or NaN)."""
        spec = self.trained(key)
        value = self.results[spec.trial_id]
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"result of {spec.trial_id} must be a number or None, got {value!r}")
        return None if math.isnan(value) else float(value)
