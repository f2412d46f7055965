"""The paper's evaluation metrics (App. A), vectorized over items, entries and classes.

Entry-level metrics are computed per entry i over the evaluation items, then averaged over
entries to give the sequence-level numbers. Choices the paper leaves open:

* ECE bins: B = 10 by default. Bin edges are the B-quantiles Q_1..Q_{B-1} of the
  confidences at that entry (numpy's linear interpolation); bin b holds the confidences in
  (Q_{b-1}, Q_b] (the first bin also holds Q_0 = its minimum). Equal confidences therefore
  always share a bin, which makes the ECE independent of item order. Monte Carlo
  frequencies tie a lot, so some edges coincide and some bins are empty: the ECE is the
  mean over the non-empty bins.
* AUC: one-vs-rest per class, over the classes that are both present and absent at that
  entry (others have no AUC), averaged over those classes. An entry where no class
  qualifies has AUC NaN and is left out of the sequence average. Ties count 1/2
  (identical to scikit-learn's ``roc_auc_score``).
* Brier: per item, the squared error between p and the one-hot label *summed* over the c
  classes (the paper's tables are on this scale, in [0, 2]), averaged over items.
* RMSE to the truth (where the data has exact marginals): per entry, the root mean squared
  error over items and classes, then averaged over entries (like every sequence-level value).
* CE: -log max(p(true class), ce_eps), with ``ce_eps = 1e-3`` by default: a Monte Carlo
  frequency can be exactly 0, and -log 0 is infinite.
"""

from __future__ import annotations

import numpy as np

CE_EPS = 1e-3


def _check_probs_labels(probs: np.ndarray, labels: np.ndarray, ndim: int) -> tuple[np.ndarray, np.ndarray]:
    probs = np.asarray(probs, dtype=np.float64)
    labels = np.asarray(labels).astype(np.int64)
    if probs.ndim != ndim or labels.shape != probs.shape[:-1]:
        raise ValueError(f"probs {probs.shape} and labels {labels.shape} do not match")
    if np.isnan(probs).any():
        raise ValueError("probs contain NaN (drop items whose estimate is undefined first)")
    c = probs.shape[-1]
    if labels.size and (labels.min() < 0 or labels.max() >= c):
        raise ValueError(f"labels must be class ids in [0, {c})")
    return probs, labels


def _binned(conf: np.ndarray, correct: np.ndarray, n_bins: int):
    """Quantile-bin confidences per column. conf, correct: [N, L].

    Returns (count, sum_conf, sum_correct), each [L, n_bins].
    """
    N, L = conf.shape
    edges = np.quantile(conf, np.arange(1, n_bins) / n_bins, axis=0)  # (B-1, L)
    # Bin of a confidence = how many edges lie strictly below it: (Q_{b-1}, Q_b] -> b.
    bins = (conf[:, :, None] > edges.T[None, :, :]).sum(axis=2)  # (N, L)
    flat = (np.arange(L)[None, :] * n_bins + bins).ravel()
    size = L * n_bins
    count = np.bincount(flat, minlength=size).reshape(L, n_bins)
    sum_conf = np.bincount(flat, weights=conf.ravel(), minlength=size).reshape(L, n_bins)
    sum_corr = np.bincount(flat, weights=correct.ravel(), minlength=size).reshape(L, n_bins)
    return count, sum_conf, sum_corr


def _ece_columns(conf: np.ndarray, correct: np.ndarray, n_bins: int) -> np.ndarray:
    count, sum_conf, sum_corr = _binned(conf, correct, n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = np.abs(sum_corr - sum_conf) / count  # |accuracy - mean confidence| per bin
    filled = count > 0
    return np.where(filled, gap, 0.0).sum(axis=1) / filled.sum(axis=1)


def ece(probs, labels, n_bins: int = 10) -> float:
    """Confidence ECE with equal-mass (quantile) bins.  probs [N, c], labels [N]."""
    probs, labels = _check_probs_labels(probs, labels, 2)
    conf = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    return float(_ece_columns(conf[:, None], correct[:, None], n_bins)[0])


def reliability_curve(probs, labels, n_bins: int = 10) -> dict[str, np.ndarray]:
    """Per non-empty bin: mean confidence, accuracy and count (for reliability diagrams).

    probs [N, c], labels [N]; the same bins as :func:`ece`.
    """
    probs, labels = _check_probs_labels(probs, labels, 2)
    conf = probs.max(axis=1)[:, None]
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)[:, None]
    count, sum_conf, sum_corr = (a[0] for a in _binned(conf, correct, n_bins))
    keep = count > 0
    return {
        "confidence": sum_conf[keep] / count[keep],
        "accuracy": sum_corr[keep] / count[keep],
        "count": count[keep],
    }


def _auc_per_class(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """One-vs-rest Mann-Whitney AUC of every (entry, class): [L, c], NaN where undefined.

    probs [N, L, c], labels [N, L]. AUC = (rank sum of positives - n+(n+ + 1)/2) / (n+ n-),
    with average ranks for ties (ties count 1/2, as in scikit-learn). Every item is a
    positive of exactly one class per entry, so only N * L ranks are needed: each is found
    by binary search (np.searchsorted, one call per column) in the sorted scores.
    """
    N, L, c = probs.shape
    columns = np.sort(probs.transpose(1, 2, 0).reshape(L * c, N), axis=1)  # (L*c, N)
    col = (np.arange(L)[None, :] * c + labels).ravel()  # column of each positive
    q = np.take_along_axis(probs, labels[..., None], axis=2).ravel()
    order = np.argsort(col, kind="stable")
    col, q = col[order], q[order]
    bounds = np.searchsorted(col, np.arange(L * c + 1))  # positives of column j: bounds[j]:bounds[j+1]
    rank = np.empty(len(q))
    for j in np.flatnonzero(np.diff(bounds)):
        a, b = bounds[j], bounds[j + 1]
        less = np.searchsorted(columns[j], q[a:b], side="left")
        not_more = np.searchsorted(columns[j], q[a:b], side="right")
        rank[a:b] = less + (not_more - less + 1) / 2  # average 1-based rank among ties
    n_pos = np.bincount(col, minlength=L * c).astype(np.float64)
    rank_sum = np.bincount(col, weights=rank, minlength=L * c)
    n_neg = N - n_pos
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    return np.where((n_pos > 0) & (n_neg > 0), auc, np.nan).reshape(L, c)


def sequence_metrics(probs, labels, n_bins: int = 10, ce_eps: float = CE_EPS) -> dict:
    """Entry-level and sequence-level ECE, macro AUC, Brier and CE.

    probs [N, L, c] (rows sum to 1), labels [N, L]. Returns
    ``{"ece", "auc", "brier", "ce", "per_entry": {"ece", "auc", "brier", "ce": [L]}}`` where
    each sequence-level value is the mean of the entry-level values (AUC: over the entries
    where it is defined).
    """
    probs, labels = _check_probs_labels(probs, labels, 3)
    N, L, c = probs.shape
    conf = probs.max(axis=2)  # (N, L)
    correct = (probs.argmax(axis=2) == labels).astype(np.float64)
    ece_i = _ece_columns(conf, correct, n_bins)

    auc_cols = _auc_per_class(probs, labels)
    defined = ~np.isnan(auc_cols)
    with np.errstate(invalid="ignore"):
        auc_i = np.where(defined, auc_cols, 0.0).sum(axis=1) / defined.sum(axis=1)

    p_true = np.take_along_axis(probs, labels[..., None], axis=2)[..., 0]  # (N, L)
    # sum_a (p_a - 1[y = a])^2 = sum_a p_a^2 - 2 p_y + 1, without a [N, L, c] one-hot.
    brier_i = (np.einsum("nlc,nlc->nl", probs, probs) - 2 * p_true + 1).mean(axis=0)  # summed over classes
    ce_i = -np.log(np.maximum(p_true, ce_eps)).mean(axis=0)

    per_entry = {"ece": ece_i, "auc": auc_i, "brier": brier_i, "ce": ce_i}
    out = {k: float(v.mean()) for k, v in per_entry.items() if k != "auc"}
    out["auc"] = float(np.nanmean(auc_i)) if np.isfinite(auc_i).any() else float("nan")
    out["per_entry"] = per_entry
    return out


def interval_metrics(lo, hi, point, true_times) -> dict[str, float]:
    """Time-to-event interval metrics (App. A.2).

    coverage = fraction of items with lo <= T <= hi; relative width = mean(hi - lo) /
    mean(T); relative MAE = sum |T - point| / sum T. All inputs [N].
    """
    lo, hi, point, t = (np.asarray(a, dtype=np.float64) for a in (lo, hi, point, true_times))
    if not lo.shape == hi.shape == point.shape == t.shape:
        raise ValueError("lo, hi, point and true_times must have the same shape [N]")
    total = t.sum()
    return {
        "coverage": float(((t >= lo) & (t <= hi)).mean()),
        "relative_width": float((hi - lo).mean() / t.mean()) if total > 0 else float("nan"),
        "relative_mae": float(np.abs(t - point).sum() / total) if total > 0 else float("nan"),
    }


def rmse_per_entry(probs, exact) -> np.ndarray:
    """Entry-level RMSE to the exact probabilities: [N, L, c] x [N, L, c] -> [L].

    rmse_i = sqrt(mean over items n and classes a of (p[n, i, a] - exact[n, i, a])^2).
    """
    probs, exact = np.asarray(probs, dtype=np.float64), np.asarray(exact, dtype=np.float64)
    if probs.shape != exact.shape:
        raise ValueError(f"probs {probs.shape} and exact {exact.shape} differ in shape")
    if probs.ndim != 3:
        raise ValueError(f"probs must be [N, L, c], got shape {probs.shape}")
    return np.sqrt(np.mean((probs - exact) ** 2, axis=(0, 2)))


def rmse_to_truth(probs, exact) -> float:
    """Sequence-level RMSE to the exact probabilities (App. D.1): the mean over entries of
    :func:`rmse_per_entry` (the RMSE is taken per entry, then averaged, not pooled)."""
    return float(rmse_per_entry(probs, exact).mean())
