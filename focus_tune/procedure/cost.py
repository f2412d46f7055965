"""What a search costs: the ``--dry-run`` estimate, and the efficiency of a finished search.

:func:`plan_cost` prints every round of a :class:`~focus_tune.procedure.plan.SearchPlan` (a batch: the
trials whose dependencies the previous rounds meet) with its trials and their resources,
what overlap and deduplication save, and, given a per-trial time, the estimated wall time
and GPU-hours on a cluster of N GPUs.

The time model is the search's own (:func:`simulate`): ``slots = floor(cluster GPUs / GPUs
per trial)`` (also capped by CPUs and ``--max-concurrent``) trials run at once, and whenever
a slot frees up it takes the most urgent trial the plan allows at that moment
(``plan.priority``), exactly as the search's searcher hands them out. :func:`efficiency`
compares a finished search's wall time with its work bound, max(total trial time / slots,
critical path). Two GPU-hour figures are given:

* *busy*: what the trials use, sum of trial time x GPU fraction;
* *billed*: what the cluster costs while the search runs, N GPUs x wall time (idle slots while
  the procedure waits for a stage are paid too; an autoscaler that releases idle
  workers pays less).

``trial_minutes`` is the time of one training *at the chosen GPU fraction*: trials that share
a GPU each run slower than alone, so measure it that way (or take it from a finished search:
:func:`measured_trial_minutes`). A final that reuses its search trial's checkpoint only runs a
test evaluation; it takes ``eval_minutes`` (default: one epoch's share of a training).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import Counter
from dataclasses import dataclass

from .plan import SearchPlan
from .trials import Batch, TrialSpec, priority

_EPS = 1e-9


@dataclass(frozen=True)
class Resources:
    """What one trial asks Ray for, and what the cluster offers."""

    cpus_per_trial: float
    gpus_per_trial: float
    cluster_gpus: int
    cluster_cpus: float | None = None  # None: CPUs do not limit concurrency
    max_concurrent: int = 0  # 0: no limit

    @property
    def slots(self) -> int:
        """Trials that can run at once."""
        limits = []
        if self.gpus_per_trial > 0:
            limits.append(math.floor(self.cluster_gpus / self.gpus_per_trial + _EPS))
        if self.cluster_cpus is not None and self.cpus_per_trial > 0:
            limits.append(math.floor(self.cluster_cpus / self.cpus_per_trial + _EPS))
        if self.max_concurrent > 0:
            limits.append(self.max_concurrent)
        if not limits:
            raise ValueError("nothing limits concurrency: give GPUs per trial, cluster CPUs or max_concurrent")
        return max(0, min(limits))


@dataclass(frozen=True)
class BatchCost:
    index: int
    trials: int
    trainings: int
    evaluations: int
    waves: int  # ceil(trials / slots)
    busy_minutes: float  # sum of trial times


@dataclass(frozen=True)
class Cost:
    resources: Resources
    trial_minutes: float
    eval_minutes: float
    batches: list[BatchCost]
    wall_minutes: float  # :func:`simulate` on the slots
    naive_wall_minutes: float  # no overlap, no dedup, no checkpoint reuse: one round per stage

    @property
    def gpu_hours_busy(self) -> float:
        return sum(b.busy_minutes for b in self.batches) * self.resources.gpus_per_trial / 60

    @property
    def gpu_hours_billed(self) -> float:
        return self.resources.cluster_gpus * self.wall_minutes / 60

    @property
    def utilization(self) -> float:
        return self.gpu_hours_busy / self.gpu_hours_billed if self.gpu_hours_billed else float("nan")


def _trial_time(t: TrialSpec, trial_minutes: float, eval_minutes: float) -> float:
    return eval_minutes if t.source_trial is not None else trial_minutes


@dataclass(frozen=True)
class PlanStats:
    """What a whole search costs and what overlap and deduplication saved."""

    batches: int  # sequential rounds
    trainings: int  # models trained
    evaluations: int  # finals that only evaluate a search checkpoint on the test set
    naive_trainings: int  # every candidate and every final seed trained separately
    dedup_saved: int  # trainings skipped because an identical schedule was trained already
    reuse_saved: int  # final retrains replaced by the search trial's checkpoint
    rounds_without_overlap: int  # stage1..stageK, joint, constant, none, final one after another

    @property
    def overlap_saved(self) -> int:
        """Sequential rounds saved by running independent stages side by side."""
        return self.rounds_without_overlap - self.batches


def stats(plan: SearchPlan, batches: list[Batch]) -> PlanStats:
    """Counts for a dry run (``batches`` from :meth:`~SearchPlan.dry_run`)."""
    g = plan.grid
    trials = [t for b in batches for t in b.trials]
    naive = sum(naive_rounds(plan))
    trainings = sum(t.source_trial is None for t in trials)
    evaluations = len(trials) - trainings
    return PlanStats(batches=len(batches), trainings=trainings, evaluations=evaluations, naive_trainings=naive,
                     dedup_saved=naive - trainings - evaluations, reuse_saved=evaluations,
                     rounds_without_overlap=g.k1 + 4)


def simulate(plan: SearchPlan, slots: int | None, duration, results=None) -> float:
    """Wall time of ``plan`` when each free slot takes the most urgent runnable trial
    (``slots`` None: no limit, which gives the critical path); ``duration(spec)`` is a
    trial's time, known ``results`` decide the stages (0.0 for the rest: ties pick the
    first grid values), the joint stage is a grid."""
    plan = dataclasses.replace(plan, joint_search="grid")
    known, done = dict(results or {}), {}
    running: list[tuple[float, int, TrialSpec]] = []
    now, count = 0.0, 0
    while True:
        busy = {t.trial_id for _, _, t in running}
        free = sorted((t for t in plan.next_batch(done).trials if t.trial_id not in busy), key=priority)
        for t in free[: None if slots is None else max(0, slots - len(running))]:
            count += 1
            heapq.heappush(running, (now + duration(t), count, t))
        if not running:
            return now
        now, _, t = heapq.heappop(running)
        done[t.trial_id] = known.get(t.trial_id, 0.0)


def efficiency(plan: SearchPlan, results, seconds: dict[str, float], wall_s: float, slots: int) -> dict:
    """A finished search's wall time against its work bound, max(total trial time / slots,
    critical path), from the measured seconds of its trials (Tune's time_total_s). The
    critical path is :func:`simulate` with unlimited slots and the measured times."""
    total = sum(seconds.get(t.trial_id, 0.0) for t in plan.all_trials(results))
    critical = simulate(plan, None, lambda t: seconds.get(t.trial_id, 0.0), results)
    bound = max(total / max(1, slots), critical)
    return {"wall_s": wall_s, "total_trial_s": total, "slots": slots, "critical_path_s": critical,
            "work_bound_s": bound, "ratio": wall_s / bound if bound else float("nan")}


def estimate(plan: SearchPlan, resources: Resources, trial_minutes: float,
             eval_minutes: float | None = None, epochs: int | None = None,
             batches: list[Batch] | None = None) -> Cost:
    """The cost of ``plan`` on ``resources`` (its rounds: :meth:`~SearchPlan.dry_run` unless given)."""
    if not trial_minutes > 0:
        raise ValueError(f"trial_minutes must be > 0, got {trial_minutes}")
    slots = resources.slots
    if slots < 1:
        raise ValueError(f"no trial fits: {resources.gpus_per_trial} GPUs per trial on {resources.cluster_gpus} GPUs")
    if eval_minutes is None:
        eval_minutes = trial_minutes / max(1, epochs or 1)
    batches = plan.dry_run() if batches is None else batches
    costs = []
    for i, b in enumerate(batches, start=1):
        durations = [_trial_time(t, trial_minutes, eval_minutes) for t in b.trials]
        costs.append(BatchCost(index=i, trials=len(b.trials), trainings=b.trainings,
                               evaluations=len(b.trials) - b.trainings, waves=math.ceil(len(b.trials) / slots),
                               busy_minutes=sum(durations)))
    wall = simulate(plan, slots, lambda t: _trial_time(t, trial_minutes, eval_minutes))
    return Cost(resources, trial_minutes, eval_minutes, costs, wall_minutes=wall,
                naive_wall_minutes=sum(math.ceil(n / slots) * trial_minutes for n in naive_rounds(plan)))


def naive_rounds(plan: SearchPlan) -> list[int]:
    """Trainings per sequential round when every stage waits for the previous one and nothing
    is deduplicated or reused: stage 1..k1, joint, constant, none, the finals."""
    g = plan.grid
    return ([len(g.lambdas)] * g.k1 + [len(g.lambdas) * len(g.k2), len(g.constants), 1,
                                       3 * plan.final_seeds])


def _fmt_minutes(m: float) -> str:
    if m < 1:
        return f"{m * 60:.0f}s"
    h, rest = divmod(round(m), 60)
    return f"{h}h{rest:02d}m" if h else f"{rest}m"


def _fmt_num(x: float) -> str:
    return f"{x:g}"


def describe_batches(batches: list[Batch], cpus_per_trial: float, gpus_per_trial: float) -> list[str]:
    """Every batch, its trials and what each asks for."""
    res = f"{_fmt_num(cpus_per_trial)} CPU" + (f" + {_fmt_num(gpus_per_trial)} GPU" if gpus_per_trial else "")
    lines = []
    for n, b in enumerate(batches, start=1):
        counts = Counter(t.label for t in b.trials)
        what = ", ".join(f"{name} x{c}" for name, c in counts.items())
        evals = len(b.trials) - b.trainings
        lines.append(f"round {n}: {what} | {len(b.trials)} trials, {b.trainings} trainings"
                     + (f" + {evals} test evaluation{'s' if evals > 1 else ''}" if evals else "")
                     + f" | each {res}")
        for t in b.trials:
            note = f"  (evaluates {t.source_trial}'s checkpoint)" if t.source_trial else ""
            lines.append(f"    {t.trial_id:<28} {t.schedule}{note}")
    return lines


def plan_cost(plan: SearchPlan, cfg, cluster_gpus: int | None = None, gpus_per_trial: float = 1.0,
              trial_minutes: float | None = None, *, cpus_per_trial: float = 1.0,
              cluster_cpus: float | None = None, max_concurrent: int = 0, epoch_minutes: float | None = None,
              eval_minutes: float | None = None, results=None, rates: dict | None = None) -> str:
    """The dry-run text: the plan, its savings and, with ``cluster_gpus``, its cost.

    cfg: the :class:`~focus_tune.config.SearchConfig` (epochs, profile); trial_minutes: one
    training at this GPU fraction (or ``epoch_minutes`` x epochs); results: known results of
    a resumed search (done batches then come out as they ran); cpus_per_trial: each trial's
    CPUs (the search's default is 1); rates: the GPU rates the dry run reads
    (``rates.load_gpu_rates``), named where no per-trial time is given.
    """
    epochs = cfg.train.epochs
    batches = plan.dry_run(results)
    s = stats(plan, batches)
    lines = describe_batches(batches, cpus_per_trial, gpus_per_trial if cluster_gpus else 0.0)
    lines.append(
        f"{s.trainings} trainings + {s.evaluations} test evaluations in {s.batches} rounds, instead of "
        f"{s.naive_trainings} trainings in {s.rounds_without_overlap} rounds: deduplication saves "
        f"{s.dedup_saved} trainings, reusing search checkpoints as the first final seed {s.reuse_saved}, "
        f"overlap {s.overlap_saved} rounds"
    )
    if not cluster_gpus:
        return "\n".join(lines)

    if gpus_per_trial <= 0:
        lines.append("(--gpus-per-trial is 0: costing with 1 GPU per trial)")
        gpus_per_trial = 1.0
    if trial_minutes is None and epoch_minutes is not None:
        trial_minutes = epoch_minutes * epochs
    resources = Resources(cpus_per_trial, gpus_per_trial, cluster_gpus, cluster_cpus, max_concurrent)
    slots = resources.slots
    gpus_s = f"{cluster_gpus} GPU{'s' if cluster_gpus != 1 else ''}"
    head = (f"on {gpus_s} at {_fmt_num(gpus_per_trial)} GPU per trial: {slots} trials at once"
            + (" (capped by CPUs or --max-concurrent)"
               if slots < math.floor(cluster_gpus / gpus_per_trial + _EPS) else ""))
    if trial_minutes is None:
        lines.append(f"{head}; waves per round: "
                     + ", ".join(str(math.ceil(len(b.trials) / slots)) if slots else "-" for b in batches))
        lines.append("no per-trial time: pass --trial-minutes (one training of "
                     f"{epochs} epochs at this GPU fraction) to estimate wall time and GPU-hours")
        if rates:
            lines.append(f"(the GPU rates measured on {rates['device']} cover --gpus-per-trial "
                         + ", ".join(rates["sharing_slowdown"]) + " on the built-in datasets)")
        return "\n".join(lines)

    cost = estimate(plan, resources, trial_minutes, eval_minutes=eval_minutes, epochs=epochs, batches=batches)
    lines.append(f"{head}; {_fmt_minutes(cost.trial_minutes)} per training, "
                 f"{_fmt_minutes(cost.eval_minutes)} per test evaluation")
    lines.append(
        f"estimated wall time {_fmt_minutes(cost.wall_minutes)} "
        f"(without overlap and deduplication: {_fmt_minutes(cost.naive_wall_minutes)}); "
        f"GPU-hours: {cost.gpu_hours_busy:.1f} busy, {cost.gpu_hours_billed:.1f} billed "
        f"({gpus_s} x wall; {cost.utilization:.0%} used)"
    )
    return "\n".join(lines)
