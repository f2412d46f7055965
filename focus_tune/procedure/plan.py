"""The paper's staged lambda search (Sec. 5, App. C.4) as a pure state machine.

Given the results so far (trial id -> validation ECE, lower is better; None = failed), the
plan says which trainings can run now. It holds no state of its own: every call replays the
procedure from the results, so the same results always give the same batches, and a driver
that persists ``results`` resumes after a crash by calling :meth:`SearchPlan.next_batch`
again.

The procedure, for a sequence of ``length`` entries and a grid (lambdas, k1, k2, constants):

* stage i = 1..k1: lambda_1..lambda_{i-1} = the winners so far, lambda_i = each grid value,
  0 after; the winner is the lowest score (ties: first in grid order; failed trials
  excluded; a stage in which every trial failed raises :class:`StageFailed`), unless the
  tie rule below applies;
* joint: ``LambdaSchedule.staged(winners, lambda_all, k2, length)`` over lambdas x k2; its
  winner is the time-dependent winner;
* constant: ``constant(c)`` for c in constants; none: one unregularized trial;
* final: each family's winner is retrained with seeds seed..seed+final_seeds-1 and
  evaluated on the test set; the final with the search seed reuses the search trial's
  checkpoint (``source_trial``) instead of training again.

Two things keep it cheap. *Overlap*: batch 1 is stage 1 + every constant candidate + none,
and a family's finals run beside the next stage as soon as its winner is known.
*Deduplication*: a candidate whose schedule and seed equal another's is trained once and
takes that trial's score (joint candidates with k2 <= k1 are the stage-k1 winner; all
k2 >= length are the same schedule).

The tie rule (beyond the paper; ``tie_se`` > 0 and a ``difference_se`` that knows the
noise): one training per candidate decides a stage, and a difference smaller than its noise
says nothing. So the lowest score wins only if no candidate with less penalty (the sum of
its lambda_i) scores within ``tie_se`` standard errors of it; otherwise the least penalized
such candidate wins (an entry stays unpenalized, or lightly penalized, unless a heavier
penalty is clearly better). ``difference_se(a, b)`` gives the standard error of the paired
difference of two trials' scores (the driver computes it from their per-item influences on
the validation items, :func:`focus_tune.scoring.metrics.difference_se`), or None where unknown;
without it the rule is the paper's. Every decision records its closest rival, the score
difference and its standard error (:class:`StageWinner`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Literal

from ..config.space import GridConfig
from ..errors import StageFailed
from ..names import FAMILIES, FAMILY_STAGE, JOINT_SEARCHES
from ..sim.regularization import LambdaSchedule
from .trials import Batch, Candidate, JointSpace, Results, StageWinner, Trainings, TrialSpec, priority

__all__ = ["FAMILIES", "FAMILY_STAGE", "Batch", "Candidate", "JointSpace", "SearchPlan",
           "StageWinner", "TrialSpec", "priority"]




@dataclass
class _Stage:
    name: str
    candidates: list[tuple[TrialSpec, tuple]]  # (candidate, key of the training it needs)
    winner: StageWinner | None = None


@dataclass
class _State:
    trainings: Trainings
    stages: dict[str, _Stage]
    prefix: tuple[float, ...]  # lambda_1..lambda_i of the decided stages
    finals: dict[str, list[tuple]]  # family -> keys of its finals, seed order
    optuna_keys: set[tuple]  # joint trainings left to the Optuna search


@dataclass(frozen=True)
class SearchPlan:
    """The staged search for one scenario; see the module docstring.

    grid: the search grids; length: entries per sequence (L); seed: the seed of every search
    trial (finals use seed..seed+final_seeds-1); joint_search: "grid" lists the joint
    trials, "optuna" hands the joint stage to the runner as a :class:`JointSpace`.
    """

    grid: GridConfig
    length: int
    seed: int
    final_seeds: int = 3
    joint_search: Literal["grid", "optuna"] = "grid"
    joint_budget: int | None = None  # optuna: joint trainings it may spend (None: as many as the grid)
    tie_se: float = 0.0  # the tie rule's width in standard errors (0: lowest score wins)
    # (trial id, trial id) -> standard error of their score difference, or None if unknown
    difference_se: Callable[[str, str], float | None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        # The grid's own rules (non-empty, distinct, lambdas >= 0, k1 < max k2) are the
        # config loader's (focus_tune.config), checked once where the file and field are
        # known; here only what needs the data or the driver's choices.
        if self.length < self.grid.k1:
            raise ValueError(f"length {self.length} is shorter than k1 = {self.grid.k1}")
        if self.seed < 0 or self.final_seeds < 1:
            raise ValueError(f"seed ({self.seed}) must be >= 0 and final_seeds ({self.final_seeds}) >= 1")
        if self.joint_search not in JOINT_SEARCHES:
            raise ValueError(f"joint_search {self.joint_search!r} is not one of {', '.join(JOINT_SEARCHES)}")
        if self.joint_budget is not None and self.joint_budget < 1:
            raise ValueError(f"joint_budget {self.joint_budget} must be >= 1")
        if not self.tie_se >= 0:
            raise ValueError(f"tie_se {self.tie_se} must be >= 0")

    # -- public API ---------------------------------------------------------------------
    @property
    def joint_trainings(self) -> int:
        """Trainings the joint grid adds to the stages: lambda_all x the k2 > k1 (a candidate
        with k2 <= k1 is the stage-k1 winner; k2 values past L that repeat a schedule are
        not told apart here)."""
        return len(self.grid.lambdas) * sum(k > self.grid.k1 for k in self.grid.k2)

    def next_batch(self, results: Results) -> Batch:
        """The trainings to run now, given results (trial id -> val ECE, None = failed)."""
        state = self._replay(results)
        t = state.trainings
        pending = [
            t.trained(key)
            for key in t.groups
            if not t.has_result(key) and key not in state.optuna_keys
        ]
        return Batch(trials=pending, joint_space=self._joint_space(state))

    def winners(self, results: Results) -> dict[str, StageWinner]:
        """The decided stages' winners, in procedure order (stage1.., joint, constant, none)."""
        stages = self._replay(results).stages
        order = [*(f"stage{i}" for i in range(1, self.grid.k1 + 1)), "joint", "constant", "none"]
        return {name: stages[name].winner for name in order if name in stages and stages[name].winner is not None}

    def candidates(self, results: Results) -> dict[str, tuple[list[Candidate], str | None]]:
        """stage -> (its candidates, the chosen candidate's trial id or None), for the stages
        opened so far, in procedure order (stage1.., joint, constant, none)."""
        state = self._replay(results)
        t = state.trainings
        order = [*(f"stage{i}" for i in range(1, self.grid.k1 + 1)), "joint", "constant", "none"]
        out = {}
        for name in (n for n in order if n in state.stages):
            stage = state.stages[name]
            rows = []
            for spec, key in stage.candidates:
                score = t.score(key) if t.has_result(key) else None
                status = "not run" if not t.has_result(key) else ("ok" if score is not None else "failed")
                rows.append(Candidate(spec, t.trained(key).trial_id, status, score))
            out[name] = (rows, stage.winner.candidate.trial_id if stage.winner else None)
        return out

    def done(self, results: Results) -> bool:
        """True when every family is decided and every final has a result (failed or not)."""
        state = self._replay(results)
        return len(state.finals) == len(FAMILIES) and all(
            state.trainings.has_result(key) for keys in state.finals.values() for key in keys
        )

    def finals(self, results: Results) -> dict[str, dict[int, str]]:
        """family -> {seed: id of the trial that holds that final's test evaluation}.

        Usually ``final-<family>-s<seed>``; a family whose winner is the same schedule as
        another family's (say the time-dependent winner is constant(0.01)) shares that
        family's finals, which were not run twice. Only decided families are listed.
        """
        state = self._replay(results)
        t = state.trainings
        return {
            family: {t.first(key).seed: t.trained(key).trial_id for key in keys}
            for family, keys in state.finals.items()
        }

    def all_trials(self, results: Results) -> list[TrialSpec]:
        """Every distinct trial known given results, run or runnable now, in procedure order
        (stage1, constant, none, stage2.., joint, then the finals)."""
        t = self._replay(results).trainings
        return [t.trained(key) for key in t.groups]

    def dry_run(
        self, results: Results | None = None, score: Callable[[TrialSpec], float | None] | None = None
    ) -> list[Batch]:
        """Every batch of the search, assuming the joint stage is a grid.

        Known results are used where they exist (so past batches come out as they ran) and
        ``score(spec)`` stands in for the rest (default: 0.0 for all, so ties pick the first
        grid values).
        """
        plan = dataclasses.replace(self, joint_search="grid")
        known = dict(results or {})
        score = score or (lambda spec: 0.0)
        simulated: dict[str, float | None] = {}
        batches = []
        while batch := plan.next_batch(simulated):
            batches.append(batch)
            for trial in batch.trials:
                simulated[trial.trial_id] = known[trial.trial_id] if trial.trial_id in known else score(trial)
        return batches

    # -- candidates ---------------------------------------------------------------------
    def _stage_candidates(self, i: int, prefix: tuple[float, ...]) -> list[TrialSpec]:
        """Stage i: lambda_1..lambda_{i-1} = prefix, lambda_i = each grid value, 0 after."""
        out = []
        for lam in self.grid.lambdas:
            lambdas = (*prefix, lam)
            params = {f"lambda_{j}": float(v) for j, v in enumerate(lambdas, start=1)}
            # staged() with k2 = 1 <= i regularizes exactly the prefix entries.
            schedule = LambdaSchedule.staged(lambdas, 0.0, 1, self.length)
            out.append(self._spec(f"stage{i}-l{_num(lam)}", f"stage{i}", "time-dependent", schedule, params))
        return out

    def _joint_candidates(self, prefix: tuple[float, ...]) -> list[TrialSpec]:
        out = []
        for lambda_all in self.grid.lambdas:  # lambda_all outer, k2 inner: the tie order
            for k2 in self.grid.k2:
                params = {f"lambda_{j}": float(v) for j, v in enumerate(prefix, start=1)}
                params |= {"lambda_all": float(lambda_all), "k2": int(k2)}
                schedule = LambdaSchedule.staged(prefix, lambda_all, k2, self.length)
                trial_id = f"joint-la{_num(lambda_all)}-k{int(k2)}"
                out.append(self._spec(trial_id, "joint", "time-dependent", schedule, params))
        return out

    def _constant_candidates(self) -> list[TrialSpec]:
        return [
            self._spec(
                f"constant-{_num(c)}", "constant", "constant", LambdaSchedule.constant(c, self.length),
                {"lambda_const": float(c)},
            )
            for c in self.grid.constants
        ]

    def _none_candidates(self) -> list[TrialSpec]:
        return [self._spec("none", "none", "none", LambdaSchedule.none(self.length), {})]

    def _spec(self, name: str, stage: str, family: str, schedule: LambdaSchedule, params: dict) -> TrialSpec:
        params = {"schedule": str(schedule), **params, "seed": self.seed}
        return TrialSpec(f"{name}-s{self.seed}", stage, family, schedule, self.seed, params)

    def _finals(self, family: str, winner: StageWinner) -> list[TrialSpec]:
        out = []
        for seed in range(self.seed, self.seed + self.final_seeds):
            out.append(
                TrialSpec(
                    trial_id=f"final-{family}-s{seed}",
                    stage="final",
                    family=family,
                    schedule=winner.schedule,
                    seed=seed,
                    params={**winner.candidate.params, "seed": seed},
                    source_trial=winner.trained_as if seed == self.seed else None,
                )
            )
        return out

    # -- the replay ---------------------------------------------------------------------
    def _replay(self, results: Results) -> _State:
        """Rebuild the whole procedure from results: stages, their winners, the finals.

        Registration order is fixed (stage1, constant, none, stage2.., joint, finals of none,
        constant, time-dependent), which makes the batches deterministic.
        """
        trainings = Trainings(results)
        stages: dict[str, _Stage] = {}

        def open_stage(name: str, candidates: list[TrialSpec]) -> _Stage:
            stages[name] = _Stage(name, [(c, trainings.add(c)) for c in candidates])
            return stages[name]

        def decide(stage: _Stage) -> StageWinner | None:
            stage.winner = self._decide(stage, trainings)
            return stage.winner

        open_stage("stage1", self._stage_candidates(1, ()))
        open_stage("constant", self._constant_candidates())
        open_stage("none", self._none_candidates())

        optuna_keys: set[tuple] = set()
        prefix: tuple[float, ...] = ()
        for i in range(1, self.grid.k1 + 1):
            winner = decide(stages[f"stage{i}"])
            if winner is None:
                break
            prefix = (*prefix, winner.schedule.values[i - 1])
            if i < self.grid.k1:
                open_stage(f"stage{i + 1}", self._stage_candidates(i + 1, prefix))

        if len(prefix) == self.grid.k1:
            joint = open_stage("joint", self._joint_candidates(prefix))
            if self.joint_search == "grid":
                decide(joint)
            else:
                # Trainings first asked for by the joint stage are the Optuna search's to pick;
                # the others (k2 <= k1, ...) were trained by an earlier stage.
                optuna_keys = {k for _, k in joint.candidates if trainings.first(k).stage == "joint"}
                if sum(trainings.has_result(k) for k in optuna_keys) >= self._budget(optuna_keys):
                    # Optuna tried part of the grid: choose among the candidates with a result.
                    tried = [(c, k) for c, k in joint.candidates if trainings.has_result(k)]
                    joint.winner = self._decide(_Stage("joint", tried), trainings)

        decide(stages["constant"])
        decide(stages["none"])

        finals = {}
        for family in FAMILIES:
            name = FAMILY_STAGE[family]
            if name in stages and stages[name].winner is not None:
                finals[family] = [trainings.add(spec) for spec in self._finals(family, stages[name].winner)]
        return _State(trainings, stages, prefix, finals, optuna_keys)

    def _decide(self, stage: _Stage, trainings: Trainings) -> StageWinner | None:
        """Lowest score wins (ties by candidate order) unless the tie rule of the module
        docstring applies; None while a result is missing."""
        if not all(trainings.has_result(key) for _, key in stage.candidates):
            return None
        scored = []  # (score, candidate, trial id), candidate order, distinct trainings once
        for candidate, key in stage.candidates:
            score, tid = trainings.score(key), trainings.trained(key).trial_id
            if score is not None and tid not in (t for _, _, t in scored):
                scored.append((score, candidate, tid))
        if not scored:
            ids = dict.fromkeys(trainings.trained(key).trial_id for _, key in stage.candidates)
            raise StageFailed(stage.name, ids)
        win, rival, rule, noise = tie_rule([(score, sum(c.schedule.values), tid) for score, c, tid in scored],
                                           self.tie_se, self.difference_se)
        score, candidate, tid = scored[win]
        if rival is None:
            return StageWinner(stage.name, candidate, tid, score, rule=rule)
        return StageWinner(stage.name, candidate, tid, score, rival=scored[rival][2],
                           difference=scored[rival][0] - score, difference_se=noise, rule=rule)

    def _budget(self, optuna_keys: set[tuple]) -> int:
        """Joint trainings the Optuna search may spend: the budget, at most the grid's."""
        return min(self.joint_budget or len(optuna_keys), len(optuna_keys))

    def _joint_space(self, state: _State) -> JointSpace | None:
        """The open joint stage, for the runner's Optuna search (optuna mode only)."""
        if self.joint_search != "optuna" or "joint" not in state.stages:
            return None
        joint, t = state.stages["joint"], state.trainings
        if joint.winner is not None:
            return None
        evaluated = []
        for c, k in joint.candidates:
            if t.has_result(k) and t.score(k) is not None:
                evaluated.append((c.params["lambda_all"], c.params["k2"], t.score(k)))
        return JointSpace(
            prefix=state.prefix,
            lambdas=tuple(self.grid.lambdas),
            k2=tuple(int(k) for k in self.grid.k2),
            budget=self._budget(state.optuna_keys),
            trained=sum(t.has_result(k) for k in state.optuna_keys),
            evaluated=tuple(evaluated),
            trials={(c.params["lambda_all"], c.params["k2"]): t.trained(k) for c, k in joint.candidates},
        )


def tie_rule(scored: list[tuple[float, float, str]], tie_se: float,
             difference_se: Callable[[str, str], float | None] | None) -> tuple[int, int | None, str, float | None]:
    """A stage's decision (see the module docstring). ``scored``: (score, penalty, trial id) of
    its distinct trainings with a score, in candidate order. Returns (the winner's index, its
    closest rival's index or None, the rule that chose, the SE of their difference or None):
    the rival is the lowest scorer when the tie rule chose another candidate, else the
    runner-up. ``focus_tune.replicate`` replays recorded stages through it."""
    lowest = min(range(len(scored)), key=lambda i: scored[i][0])  # min keeps the first of equal scores
    if len(scored) == 1:
        return lowest, None, "only candidate", None

    def se(i: int, j: int) -> float | None:
        return None if difference_se is None else difference_se(scored[i][2], scored[j][2])

    if tie_se > 0:
        # The least penalized candidate within tie_se SE of the lowest (the lowest itself
        # qualifies, so one is always found); equal penalties keep candidate order.
        for i in sorted(range(len(scored)), key=lambda i: scored[i][1]):
            if i == lowest:
                break
            noise = se(i, lowest)
            if noise is not None and scored[i][0] - scored[lowest][0] <= tie_se * noise:
                return i, lowest, "tie: less penalty", noise
    runner_up = min((i for i in range(len(scored)) if i != lowest), key=lambda i: scored[i][0])
    return lowest, runner_up, "lowest", se(lowest, runner_up)


def _num(value: float) -> str:
    """Shortest exact text of a grid value for trial ids: 0.005, 1e-05, 0.0."""
    return repr(float(value) + 0.0)
