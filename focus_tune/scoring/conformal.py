"""Split conformal time-to-event intervals: I_0.9 calibrated on the validation split.

Plain numpy, no torch. A model's Monte Carlo estimate of each item's time to the event is a
pmf on t = 1..L (:class:`focus_tune.scoring.montecarlo.Estimates.time_pmf`: the sampled times'
histogram, or the Rao-Blackwellized pmf). Its central intervals are nested in a level a:

    I_a(x) = {t : F(t) >= (1 - a) / 2 and F(t - 1) <= (1 + a) / 2},

with F the item's CDF (F(0) = 0): the t whose CDF step [F(t - 1), F(t)] meets the central
band [(1 - a) / 2, (1 + a) / 2]. The nominal interval is a = alpha (0.9). The **score** of a
true time T is the smallest level whose interval holds it,

    s(x, T) = max(1 - 2 F(T), 2 F(T - 1) - 1)     (clipped at 0),

so T is in I_a exactly when s <= a: the score is "how central is T", a PIT-based score that
needs no randomization (a discrete T ties only where two items' CDF steps coincide, and a
tie makes the set larger, never smaller).

Split conformal (Vovk et al. 2005; Lei et al. 2018): with the n validation items' scores,
q = the ceil((n + 1) alpha)-th smallest (infinite when that exceeds n), and the conformal
interval of a test item is I_q: the smallest and largest t with s(x, t) <= q. When the
validation and test items are exchangeable and scored by the same predictor (the same
model, estimator and M), P(T in I_q) >= alpha over the draw of both splits, and at most
alpha + 1 / (n + 1) for continuous scores. I_q is the whole range 1..L when q >= 1.

Right-censored validation data: a censored item's score is unknown. The scores of the
uncensored items are weighted by inverse probability of censoring
(:func:`focus_tune.scoring.metrics.ipcw_weights`, the weights of every time-to-event metric) and q
is the weighted quantile with the test point's unknown weight bounded by the largest
validation weight. This is the weighted conformal rule of Tibshirani et al. (2019) with
estimated weights: its coverage holds asymptotically (the censoring survival estimated
consistently, the censoring independent of T and of the image), not in finite samples.
"""

from __future__ import annotations

import math

import numpy as np

from .metrics import ipcw_weights


def _cdf(pmf) -> np.ndarray:
    """F(t) for t = 0..L per row: [N, L + 1] float64, F(0) = 0."""
    pmf = np.asarray(pmf, dtype=np.float64)
    if pmf.ndim != 2:
        raise ValueError(f"time_pmf must be [N, L], got shape {pmf.shape}")
    return np.concatenate([np.zeros((len(pmf), 1)), np.cumsum(pmf, axis=1)], axis=1)


def score_table(pmf) -> np.ndarray:
    """s(x, t) for every item and t = 1..L: [N, L] (the module docstring's score)."""
    F = _cdf(pmf)
    return np.maximum(np.maximum(1.0 - 2.0 * F[:, 1:], 2.0 * F[:, :-1] - 1.0), 0.0)


def scores(pmf, true_times) -> np.ndarray:
    """The score s(x_n, T_n) of each item's true time [N] (T in 1..L)."""
    t = np.asarray(true_times)
    table = score_table(pmf)
    if t.shape != (len(table),) or (len(t) and (t.min() < 1 or t.max() > table.shape[1])):
        raise ValueError(f"true_times must be [N] integers in 1..{table.shape[1]}, got shape {t.shape}")
    return table[np.arange(len(t)), t.astype(np.int64) - 1]


def conformal_level(calibration_scores, alpha: float = 0.9, weights=None) -> float:
    """q: the ceil((n + 1) alpha)-th smallest score (inf when that exceeds n), or with
    ``weights`` [n] (0: no score, e.g. a censored item) the smallest score s with
    sum_{s_i <= s} w_i >= alpha (sum w + max w), inf when none reaches it."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    s = np.asarray(calibration_scores, dtype=np.float64)
    if weights is None:
        k = math.ceil((len(s) + 1) * alpha)
        return float(np.sort(s)[k - 1]) if k <= len(s) else math.inf
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != s.shape or (w < 0).any():
        raise ValueError("weights must be >= 0, one per score")
    keep = w > 0
    if not keep.any():
        return math.inf
    order = np.argsort(s[keep], kind="stable")
    sorted_s, cum = s[keep][order], np.cumsum(w[keep][order])
    need = alpha * (w.sum() + w.max())
    reached = np.flatnonzero(cum >= need * (1 - 1e-12))
    return float(sorted_s[reached[0]]) if len(reached) else math.inf


def intervals(pmf, level: float) -> tuple[np.ndarray, np.ndarray]:
    """I_level of each item: (lo, hi) float64 [N], the smallest and largest t with
    s(x, t) <= level (the whole range 1..L for a level >= 1)."""
    table = score_table(pmf)
    inside = table <= level
    L = table.shape[1]
    lo = np.where(inside.any(axis=1), inside.argmax(axis=1) + 1, 1)
    hi = np.where(inside.any(axis=1), L - inside[:, ::-1].argmax(axis=1), L)
    return lo.astype(np.float64), hi.astype(np.float64)


def calibrate(val_pmf, val_times, alpha: float = 0.9, val_censored=None) -> tuple[float, float]:
    """(q, effective items) from the validation split: the conformal level of the validation
    scores (IPCW-weighted where ``val_censored`` is given) and the number of items behind it
    (n, or Kish's (sum w)^2 / sum w^2 under censoring)."""
    t = np.asarray(val_times)
    if val_censored is None:
        return conformal_level(scores(val_pmf, t), alpha), float(len(t))
    censored = np.asarray(val_censored, dtype=bool)
    w = ipcw_weights(t, censored)
    s = np.where(censored, 0.0, scores(val_pmf, t))  # a censored item's score is unknown; its weight is 0
    n_eff = float(w.sum() ** 2 / (w ** 2).sum()) if (w > 0).any() else 0.0
    return conformal_level(s, alpha, w), n_eff
