"""Across searches and scenarios: the random-effects pooled difference and equivalence.

Plain functions over per-search differences (each a search's mean over its paired final
seeds); the verdicts (``focus_tune.replicate.verdict``) call them. No I/O.

* :func:`random_effects`: scenarios as studies. Each scenario's mean difference and its
  squared standard error over its searches; DerSimonian-Laird's between-scenario variance
  tau^2; the inverse-variance mean with weights 1 / (se^2 + tau^2); the Hartung-Knapp-
  Sidik-Jonkman interval (t with k - 1 degrees of freedom and a variance scaled by the
  weighted residuals), which holds its level with few studies where the normal one does not,
  in its modified form (Roever, Knapp and Friede 2015): the variance is never below the plain
  random-effects one, 1 / sum(w). Unmodified, scenarios whose means happen to agree shrink the
  interval below what their own standard errors allow (two scenarios 0.0007 apart gave
  +-0.004 where each alone is +-0.02-0.03).
* :func:`equivalence`: two one-sided t tests at ``alpha`` over the searches, i.e. the
  (1 - 2 alpha) interval within +-margin.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..report.stats import t_quantile


def random_effects(per_scenario: Sequence[Sequence[float]], level: float = 0.95) -> dict:
    """{"mean", "low", "high", "tau2", "scenarios"} of the pooled difference.

    ``per_scenario``: per scenario, its searches' differences (at least two each, for a
    standard error). With one scenario, its mean and t interval over its searches; fewer
    than two searches anywhere: NaN (no standard error to weigh by).
    """
    groups = [np.asarray(g, dtype=np.float64) for g in per_scenario]
    groups = [g[np.isfinite(g)] for g in groups]
    k = len(groups)
    nan = {"mean": math.nan, "low": math.nan, "high": math.nan, "tau2": math.nan, "scenarios": k}
    if k == 0 or any(g.size < 2 for g in groups):
        return nan
    y = np.array([g.mean() for g in groups])
    v = np.array([g.var(ddof=1) / g.size for g in groups])  # the squared standard errors
    if k == 1:
        half = t_quantile(0.5 + level / 2, groups[0].size - 1) * math.sqrt(v[0])
        return {"mean": float(y[0]), "low": float(y[0] - half), "high": float(y[0] + half), "tau2": 0.0,
                "scenarios": 1}
    if np.any(v <= 0):  # a scenario whose searches do not differ: no weight can be given
        return nan
    w = 1 / v
    fixed = float((w * y).sum() / w.sum())
    q = float((w * (y - fixed) ** 2).sum())
    tau2 = max(0.0, (q - (k - 1)) / (w.sum() - (w ** 2).sum() / w.sum()))
    w_star = 1 / (v + tau2)
    mean = float((w_star * y).sum() / w_star.sum())
    hk_var = max(float((w_star * (y - mean) ** 2).sum() / ((k - 1) * w_star.sum())), float(1 / w_star.sum()))
    half = t_quantile(0.5 + level / 2, k - 1) * math.sqrt(hk_var)
    return {"mean": mean, "low": mean - half, "high": mean + half, "tau2": tau2, "scenarios": k}


def equivalence(per_run: Sequence[float], margin: float, alpha: float = 0.05) -> dict:
    """{"low", "high", "margin", "equivalent"}: the (1 - 2 alpha) t interval of the mean of
    ``per_run`` and whether it lies within (-margin, +margin) (two one-sided tests at
    ``alpha``). Fewer than two runs, or no margin (no headroom): not equivalent, interval NaN."""
    d = np.asarray(per_run, dtype=np.float64)
    d = d[np.isfinite(d)]
    if d.size < 2 or not margin > 0:
        return {"low": math.nan, "high": math.nan, "margin": margin, "equivalent": False}
    half = t_quantile(1 - alpha, d.size - 1) * float(d.std(ddof=1)) / math.sqrt(d.size)
    low, high = float(d.mean() - half), float(d.mean() + half)
    return {"low": low, "high": high, "margin": margin, "equivalent": bool(-margin < low and high < margin)}
