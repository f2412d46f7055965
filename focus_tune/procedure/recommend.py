"""Which model a finished search recommends, from its validation evidence alone.

The family: the finals' last-epoch validation score of the search's selection metric
(``select_by``, the score each stage decided by), per family the mean over its final seeds; the
lowest wins unless a less penalized family (none, then constant, then time-dependent) is within
``tie_se`` standard errors of it, the search's own tie rule
(:func:`focus_tune.procedure.plan.tie_rule`), the SE that of the per-seed paired differences
(seed s of every family shares its initial weights, batches and Monte Carlo uniforms). The test
set plays no part: it is what the report then shows.

Its intervals: the family's ``+conformal`` row recalibrated I_0.9 on the validation split
(focus_tune.scoring.conformal). Where that level q is a usable interval level (0 < q < 1), the
recommendation is to take the intervals at it (``predict --alpha q`` with the search's
estimator and M, the predictor the level was calibrated for): their coverage is then
guaranteed on data exchangeable with the validation split, at no training cost, where the
uncalibrated I_0.9 guarantees nothing. A level of 1 or more (too few validation items, or a
model whose intervals must span everything) gets no such advice.

Plain Python and numpy: no torch, Ray or MLflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..names import FAMILIES, SELECT_NAMES, conformal_row
from .plan import tie_rule

LEVEL_KEY = "test/interval/conformal_level"  # the +conformal row's calibrated level (from the validation split)


@dataclass(frozen=True)
class Recommendation:
    """The recommended family, the conformal level of its intervals (None: the model's own
    I_alpha) and why, in one sentence and as a few report lines."""

    family: str
    level: float | None
    reason: str
    lines: tuple[str, ...]

    def predict_flags(self, estimator: str, num_samples: int) -> str:
        """The predict flags that reproduce the recommended intervals ("" for the model's own)."""
        if self.level is None:
            return ""
        return f"--estimator {estimator} --num-samples {num_samples} --alpha {self.level:.4g} "


def recommend(scores: Mapping[str, Mapping[int, float | None]], finals: Mapping[str, Sequence[Mapping]],
              select_by: str, tie_se: float, alpha: float, model_seed: int | None = None) -> Recommendation | None:
    """The recommendation from a search's validation ``scores`` (family -> final seed -> the
    last epoch's validation score of ``select_by``: the search state's results of the finals,
    the seed-0 final's its stage winner's) and its report rows ``finals`` (the ``+conformal``
    rows); ``model_seed`` is the seed of the logged models (their conformal level is the one to
    use; default the lowest). None when no family has a validation score."""
    name = SELECT_NAMES[select_by]
    by_family = {f: {seed: float(v) for seed, v in scores.get(f, {}).items() if v is not None and math.isfinite(v)}
                 for f in FAMILIES}
    by_family = {f: s for f, s in by_family.items() if s}
    if not by_family:
        return None
    families = list(by_family)
    means = {f: float(np.mean(list(s.values()))) for f, s in by_family.items()}

    def paired_se(a: str, b: str) -> float | None:
        shared = sorted(set(by_family[a]) & set(by_family[b]))
        if len(shared) < 2:
            return None
        d = np.array([by_family[a][s] - by_family[b][s] for s in shared])
        return float(d.std(ddof=1) / math.sqrt(len(d)))

    scored = [(means[f], float(FAMILIES.index(f)), f) for f in families]
    win, rival, rule, se = tie_rule(scored, tie_se, paired_se)
    family = families[win]
    seeds = len(by_family[family])
    shown = "; ".join(f"{f} {means[f]:.4f}" for f in families)
    if rival is None:
        why = f"{family}: the only family with a validation {name}"
    elif rule.startswith("tie"):
        why = (f"{family}: validation {name} within {tie_se:g} SE ({se:.4f}) of the lowest, {families[rival]}'s, "
               "and less penalized")
    else:
        margin = means[families[rival]] - means[family]
        noise = f"{margin / se:.1f} SE" if se else "SE n/a"
        why = f"{family}: the lowest validation {name}, {margin:.4f} ({noise}) below {families[rival]}'s"
    lines = [f"By the validation {name} of the finals' last epoch (mean over {seeds} seeds, the retrained ones "
             f"where a family has two or more; {shown}) and the search's tie rule at {tie_se:g} SE of the paired "
             f"seed differences: **{why}**. The test tables above played no part in this choice."]

    level = None
    rows = {r.get("seed"): r for r in finals.get(conformal_row(family), ())}
    if rows:
        row = rows.get(model_seed if model_seed is not None else min(rows, key=lambda s: (s is None, s)))
        q = float(row.get(LEVEL_KEY, math.nan)) if row else math.nan
        if 0 < q < 1:
            level = q
            side = "too narrow" if q > alpha else "too wide" if q < alpha else "right"
            why += f"; its intervals at the validation's conformal level {q:.3f} (its I_{alpha:g} was {side})"
            lines.append(f"Intervals: the split conformal level of this model on the validation split is {q:.3f} "
                         f"(its own I_{alpha:g} was {side} there); intervals at that level have coverage of at least "
                         f"{alpha:g} on data exchangeable with the validation split, the model's own I_{alpha:g} has "
                         "no such guarantee (`+conformal` table). `predict --alpha` takes the level, with the "
                         "search's estimator and M, the predictor it was calibrated for.")
        else:
            lines.append(f"Intervals: the model's own I_{alpha:g}; its split conformal level is "
                         f"{'not finite (too few validation items)' if not math.isfinite(q) else f'{q:.3f}'}, "
                         "not a usable interval level.")
    return Recommendation(family, level, why, tuple(lines))
