"""Racing: stop a stage's candidate that has clearly lost before it finishes training.

Every training of a stage validates once at ``race_at`` (an epoch before the last), the same
evaluation the stage decides by. At that epoch the candidates are compared as the stage will
compare them at the end: the leader is the lowest score, and a candidate behind it by more
than ``race_se`` standard errors of their paired difference (over the validation items, as
the tie rule's) has lost. A candidate with less penalty than the leader could still win by
the tie rule at the end, so it must be behind by ``race_se + tie_se`` standard errors. A
candidate with no known noise (no influences) is never stopped.

This module is the rule, a pure function of the records; the search applies it through a
Ray Tune trial scheduler (``focus_tune.search.scheduler``), and ``benchmarks/bench_racing.py``
replays it on searches run to the end to count the decisions it would have changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from ..names import RACING  # noqa: F401  off: no race epoch; record: validate there and keep it; stop: race


@dataclass(frozen=True)
class Lost:
    """Why a candidate lost its race: behind ``leader`` by ``gap`` (its score minus the
    leader's, at ``epoch``) with ``se`` the standard error of that difference and ``threshold``
    the number of standard errors it had to exceed."""

    leader: str
    epoch: int
    score: float
    gap: float
    se: float
    threshold: float

    def text(self) -> str:
        return (f"stopped at epoch {self.epoch}: {self.gap:.4f} behind {self.leader} "
                f"({self.gap / self.se:.1f} SE > {self.threshold:g})")


def losers(entrants: Sequence[tuple[str, float, float]], epoch: int, race_se: float, tie_se: float,
           difference_se: Callable[[str, str], float | None]) -> dict[str, Lost]:
    """The candidates of one stage that have lost at ``epoch``.

    ``entrants``: (trial id, score at ``epoch``, penalty) of the stage's distinct trainings
    that reached it; ``difference_se(a, b)``: the standard error of the difference of their
    scores at that epoch, or None. The leader (lowest score; the first of equal ones) is never
    stopped.
    """
    if len(entrants) < 2:
        return {}
    lead = min(range(len(entrants)), key=lambda i: entrants[i][1])
    leader, best, penalty = entrants[lead]
    out = {}
    for i, (tid, score, pen) in enumerate(entrants):
        if i == lead:
            continue
        se = difference_se(tid, leader)
        if se is None or not se > 0:
            continue
        threshold = race_se + (tie_se if pen < penalty else 0.0)
        if score - best > threshold * se:
            out[tid] = Lost(leader, epoch, score, score - best, se, threshold)
    return out


def changed_decisions(stages: Mapping[str, Sequence[tuple[str, float, float]]], winners: Mapping[str, str],
                      epoch: int, race_se: float, tie_se: float,
                      difference_se: Callable[[str, str], float | None]) -> dict[str, dict]:
    """On a search run to the end with its race epoch recorded: per stage, the candidates the
    race would have stopped (comparing each with the stage's leader over every recorded
    candidate, which stops at least as many as racing while they run) and whether the
    stage's winner at full training is among them (a changed decision)."""
    out = {}
    for stage, entrants in stages.items():
        lost = losers(entrants, epoch, race_se, tie_se, difference_se)
        out[stage] = {"stopped": sorted(lost), "winner": winners.get(stage),
                      "changed": winners.get(stage) in lost, "candidates": len(entrants)}
    return out
