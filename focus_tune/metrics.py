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

Metrics beyond the paper's, so that a calibration or interval number can be trusted
(docs/METRICS.md has the simulation behind the first choice):

* Debiased ECE (``ece_debiased``, sequence_metrics' ``"ece_debiased"``). The paper's ECE
  has a floor: a finite bin's |accuracy - confidence| is positive even for a calibrated
  predictor (about sqrt(2/pi) standard errors of the bin's accuracy), 0.013-0.025 on the
  exact probabilities of our quick test splits (1000 items) and 0.016-0.047 on 250, and the
  floor moves with N and with the predictor's confidence. ``ece_debiased`` is the debiased
  *squared* binned error of Kumar, Liang & Ma 2019 ("Verified Uncertainty Calibration",
  NeurIPS) on the same equal-mass bins: per bin (a - m)^2 minus an unbiased estimate of
  the variance of the accuracy a (m: mean confidence), averaged over the non-empty bins
  like ``ece``. Kumar et al. subtract a (1 - a) / (n_b - 1), which assumes one probability
  for the whole bin; we subtract (a (1 - a) - v_b) / (n_b - 1), v_b the variance of the
  confidences in the bin, which makes the expectation exactly 0 for a calibrated predictor
  at any N and any spread in a bin (a singleton bin subtracts m (1 - m), exact there too).
  Under miscalibration the expectation is the true binned squared error minus
  (vq_b - v_b) / (n_b - 1), vq_b the variance of the true probabilities in the bin: about
  zero unless the truth scatters around the confidence within a bin (down to -15 % of the
  truth for Monte Carlo frequencies of 100 samples in the simulation).
  Why squared: no estimator of |gap| is unbiased at gap = 0 (|.| is not smooth there), so
  the l1 scale cannot be debiased; the Gaussian bias correction of Kumar et al. for the l1
  error and the monotone sweep of Roelofs et al. 2022 keep 55-75 % of the floor in the
  simulation. The squared value (``"ece_debiased_sq"``, :func:`ece_debiased_squared`) is
  the unbiased one; the tables show ``"ece_debiased"`` = sign(x) sqrt(|x|) of it (of its
  mean over entries, for the sequence), back on the ECE's scale: a uniform gap g in every
  bin reads g, a calibrated predictor reads about 0 on either side. Values are *not*
  clipped at 0, per bin or per entry: a negative value is the noise around a zero truth,
  and max(x, 0) has a positive mean, which would bring the floor back.
* Overconfidence (``"overconfidence"``): mean over items of (top-class confidence -
  1[top class is right]); positive = overconfident. Signed and unbinned, so its expectation
  is 0 for a calibrated predictor at any N, and it says in which direction the ECE is off;
  over- and underconfidence in different bins cancel in it, so it goes beside the ECE.
* Interval score (``interval_metrics``' ``"interval_score"``): Gneiting & Raftery 2007
  (JASA), eq. 43, for the central ``alpha`` interval (their alpha is our 1 - alpha):
  width + 2 / (1 - alpha) x the distance by which T misses the interval. Coverage rewards
  wide intervals and width narrow ones; the score is proper (its expectation is smallest
  for the true quantiles), so it ranks intervals on one number. Divided by mean(T) like
  the relative width and MAE.
* CRPS (``crps``): the continuous ranked probability score of the time-to-event
  distribution on t = 1..L, sum_k (F(k) - 1[T <= k])^2, per item, averaged, divided by
  mean(T). It scores the whole predicted distribution of T, not one interval. With the
  pmf of M samples (``montecarlo.time_pmf``) it is the CRPS of their empirical
  distribution, which exceeds the model's own CRPS by E|X - X'| / (2M) on average (the
  pairs of a sample with itself): 1/M of the E|X - X'| / 2 term, 1 % at M = 100.
  Censoring at L (``time_to_event``) is mass at t = L on both sides; F(L) = 1, so the
  k = L term is 0.

Right-censored data (an ``observed`` mask [N, L] and ``censored`` items [N]; docs/METRICS.md,
"Censored items"): the entry-level metrics of entry i are over the items observed at i (a
loop over entries), and the time-to-event metrics are means weighted by the inverse
probability of censoring (:func:`ipcw_weights`). Without them (None) every function runs
the vectorized code above, unchanged.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .names import SELECT_KEYS

CE_EPS = 1e-3
LABEL_REDRAWS = 30  # label draws behind :func:`label_noise`
# Result keys of :func:`label_noise` (on the ``exact`` row of a report).
LABEL_SD_KEYS = ("test/marginal/ece_label_sd", "test/marginal/ece_debiased_sq_label_sd")


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


def _bin_ids(conf: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-mass bin of every confidence, per column: conf [N, L] -> [N, L] ints in [0, n_bins)."""
    edges = np.quantile(conf, np.arange(1, n_bins) / n_bins, axis=0)  # (B-1, L)
    # Bin of a confidence = how many edges lie strictly below it: (Q_{b-1}, Q_b] -> b.
    return (conf[:, :, None] > edges.T[None, :, :]).sum(axis=2)


def _binned(conf: np.ndarray, correct: np.ndarray, n_bins: int, squares: bool = False):
    """Quantile-bin confidences per column. conf, correct: [N, L].

    Returns (count, sum_conf, sum_correct), each [L, n_bins], and with ``squares`` also the
    per-bin sum of conf^2 (for the within-bin spread of :func:`_ece_debiased_columns`).
    """
    N, L = conf.shape
    bins = _bin_ids(conf, n_bins)
    flat = (np.arange(L)[None, :] * n_bins + bins).ravel()
    size = L * n_bins

    def total(weights=None):
        w = None if weights is None else weights.ravel()
        return np.bincount(flat, weights=w, minlength=size).reshape(L, n_bins)

    sums = (total(), total(conf), total(correct))
    return (*sums, total(conf * conf)) if squares else sums


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


def sequence_ece(probs, labels, n_bins: int = 10, observed=None) -> float:
    """The sequence-level ECE of :func:`sequence_metrics` alone (the mean over entries of the
    entry-level :func:`ece`): probs [N, L, c], labels [N, L]; ``observed`` bool [N, L] as
    in :func:`sequence_metrics`."""
    probs, labels = _check_probs_labels(probs, labels, 3)
    conf = probs.max(axis=2)
    correct = (probs.argmax(axis=2) == labels).astype(np.float64)
    if observed is not None:
        return _mean_over_entries(_masked_columns(_ece_columns, conf, correct, _check_observed(observed, labels), n_bins))
    return float(_ece_columns(conf, correct, n_bins).mean())


def _check_observed(observed, labels: np.ndarray) -> np.ndarray:
    """bool [N, L] mask of the observed (item, entry) pairs, the shape of ``labels``."""
    observed = np.asarray(observed)
    if observed.dtype != bool or observed.shape != labels.shape:
        raise ValueError(f"observed must be a bool mask of the labels' shape {labels.shape}, "
                         f"got {observed.dtype} {observed.shape}")
    return observed


def _masked_columns(columns, conf: np.ndarray, correct: np.ndarray, observed: np.ndarray, n_bins: int) -> np.ndarray:
    """``columns(conf, correct, n_bins)`` of each entry over its observed items alone: [L],
    NaN where an entry has none (conf, correct, observed: [N, L])."""
    out = np.full(conf.shape[1], np.nan)
    for i in np.flatnonzero(observed.any(axis=0)):
        rows = observed[:, i]
        out[i] = columns(conf[rows, i : i + 1], correct[rows, i : i + 1], n_bins)[0]
    return out


def _mean_over_entries(values: np.ndarray) -> float:
    """The sequence-level value of masked entry-level ones: the mean over the entries that
    have observed items (the others are NaN); NaN when none has."""
    kept = values[~np.isnan(values)]
    return float(kept.mean()) if len(kept) else float("nan")


def _ece_debiased_columns(conf: np.ndarray, correct: np.ndarray, n_bins: int) -> np.ndarray:
    """Debiased squared binned calibration error per column: conf, correct [N, L] -> [L].

    Per non-empty bin b of the :func:`ece` bins, with n = n_b, a = accuracy, m = mean
    confidence and v = the (1/n) variance of the confidences in the bin:
    (a - m)^2 - (a (1 - a) - v) / (n - 1), and (a - m)^2 - m (1 - m) when n = 1; then the
    mean over the non-empty bins, like :func:`ece`. No clipping at 0 (see the module doc).
    """
    count, sum_conf, sum_corr, sum_conf2 = _binned(conf, correct, n_bins, squares=True)
    filled = count > 0
    n = np.where(filled, count, 1)  # empty bins are masked out below; 1 avoids 0/0
    acc, mean_conf = sum_corr / n, sum_conf / n
    # Rounding can leave a variance of a constant bin at -1e-17: it is a variance, so >= 0.
    spread = np.maximum(sum_conf2 / n - mean_conf**2, 0.0)
    # E[a (1 - a)] = mq (1 - mq) (n - 1) / n + vq / n for independent labels of probabilities
    # q (mean mq, variance vq), so (a (1 - a) - vq) / (n - 1) is unbiased for Var(a); vq is
    # unknown and v stands in for it (vq = v for a calibrated predictor: exact there).
    var_acc = np.where(n > 1, (acc * (1 - acc) - spread) / np.maximum(n - 1, 1), mean_conf * (1 - mean_conf))
    value = (acc - mean_conf) ** 2 - var_acc
    return np.where(filled, value, 0.0).sum(axis=1) / filled.sum(axis=1)


def ece_debiased_squared(probs, labels, n_bins: int = 10) -> float:
    """Debiased squared confidence calibration error, same bins as :func:`ece`.

    probs [N, c], labels [N]. Mean over the non-empty equal-mass bins of
    (accuracy - mean confidence)^2 minus an estimate of the accuracy's sampling variance
    (Kumar, Liang & Ma 2019, with a within-bin spread term; the module doc has the details).
    Its expectation is exactly 0 for a calibrated predictor at any N; it can be negative.
    """
    probs, labels = _check_probs_labels(probs, labels, 2)
    conf = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    return float(_ece_debiased_columns(conf[:, None], correct[:, None], n_bins)[0])


def signed_root(x):
    """sign(x) sqrt(|x|): a debiased squared error back on the scale of the ECE, keeping its sign."""
    return np.sign(x) * np.sqrt(np.abs(x))


def ece_debiased(probs, labels, n_bins: int = 10) -> float:
    """The debiased calibration error on the ECE's scale: ``signed_root(ece_debiased_squared)``.

    probs [N, c], labels [N]. A uniform gap g between accuracy and confidence reads g; a
    calibrated predictor reads about 0, either side of it (the noise of a zero truth).
    """
    return float(signed_root(ece_debiased_squared(probs, labels, n_bins)))


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


def sequence_metrics(probs, labels, n_bins: int = 10, ce_eps: float = CE_EPS, threads: int = 1,
                     observed=None) -> dict:
    """Entry-level and sequence-level ECE, debiased ECE, overconfidence, macro AUC, Brier and CE.

    probs [N, L, c] (rows sum to 1), labels [N, L]. Returns ``{"ece", "ece_debiased",
    "ece_debiased_sq", "overconfidence", "auc", "brier", "ce", "per_entry": {same keys: [L]}}`` where each
    sequence-level value is the mean of the entry-level values (AUC: over the entries where
    it is defined), except ``ece_debiased``: per entry :func:`ece_debiased`, and for the
    sequence the signed root of the mean over entries of ``ece_debiased_sq`` (the unbiased
    squared estimate, per entry :func:`ece_debiased_squared`);
    ``overconfidence`` = mean over items of (top-class confidence - 1[top class is right]).

    Every entry-level value depends on its entry's column alone, so ``threads`` > 1 scores
    blocks of entries in threads (numpy's sorts and bincounts release the GIL): the same
    numbers (the ECEs and AUC bit for bit; Brier and CE up to ~1e-14, numpy sums a narrower
    block in another order), faster on large splits (the paper's validation split: 16,769
    items x 300 entries).

    ``observed`` (right-censored data): bool [N, L], which labels are observed. Each entry's
    values are then taken over its observed items alone (its column's metrics, entry by
    entry); an entry without any is NaN and left out of the sequence means, like an entry
    without an AUC. None: every label counts (the vectorized path).
    """
    probs, labels = _check_probs_labels(probs, labels, 3)
    if observed is not None:
        return _masked_sequence_metrics(probs, labels, _check_observed(observed, labels), n_bins, ce_eps, threads)
    L = probs.shape[1]
    blocks = np.array_split(np.arange(L), max(1, min(threads, L)))
    if len(blocks) > 1:
        with ThreadPoolExecutor(len(blocks)) as pool:
            parts = list(pool.map(lambda b: _entry_metrics(probs[:, b], labels[:, b], n_bins, ce_eps), blocks))
        per_entry = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    else:
        per_entry = _entry_metrics(probs, labels, n_bins, ce_eps)
    out = {k: float(v.mean()) for k, v in per_entry.items() if k not in ("auc", "ece_debiased")}
    # The unbiased quantity is the squared one: average it over entries, then take the root
    # (the mean of per-entry roots would not be centred on 0 for a calibrated predictor).
    out["ece_debiased"] = float(signed_root(out["ece_debiased_sq"]))
    auc_i = per_entry["auc"]
    out["auc"] = float(np.nanmean(auc_i)) if np.isfinite(auc_i).any() else float("nan")
    out["per_entry"] = per_entry
    return out


def _masked_sequence_metrics(probs: np.ndarray, labels: np.ndarray, observed: np.ndarray, n_bins: int,
                             ce_eps: float, threads: int) -> dict:
    """:func:`sequence_metrics` with a mask: every entry over its observed items (a loop over
    entries, in ``threads``), the sequence values over the entries that have any."""
    L = probs.shape[1]
    entries = np.flatnonzero(observed.any(axis=0))

    def column(i: int) -> dict[str, np.ndarray]:
        rows = observed[:, i]
        return _entry_metrics(probs[rows, i : i + 1], labels[rows, i : i + 1], n_bins, ce_eps)

    if threads > 1 and len(entries) > 1:
        with ThreadPoolExecutor(min(threads, len(entries))) as pool:
            parts = list(pool.map(column, entries))
    else:
        parts = [column(i) for i in entries]
    keys = ("ece", "ece_debiased", "ece_debiased_sq", "overconfidence", "auc", "brier", "ce")
    per_entry = {k: np.full(L, np.nan) for k in keys}
    for i, part in zip(entries, parts):
        for k in keys:
            per_entry[k][i] = part[k][0]
    out = {k: _mean_over_entries(per_entry[k][entries]) for k in keys if k not in ("auc", "ece_debiased")}
    out["ece_debiased"] = float(signed_root(out["ece_debiased_sq"]))
    auc_i = per_entry["auc"]
    out["auc"] = float(np.nanmean(auc_i)) if np.isfinite(auc_i).any() else float("nan")
    out["per_entry"] = per_entry
    return out


def _entry_metrics(probs: np.ndarray, labels: np.ndarray, n_bins: int, ce_eps: float) -> dict[str, np.ndarray]:
    """The entry-level values of :func:`sequence_metrics`: probs [N, L, c], labels [N, L] -> {key: [L]}."""
    conf = probs.max(axis=2)  # (N, L)
    correct = (probs.argmax(axis=2) == labels).astype(np.float64)
    ece_i = _ece_columns(conf, correct, n_bins)
    ece_debiased_sq_i = _ece_debiased_columns(conf, correct, n_bins)
    # Signed, so over- and underconfidence do not both read as "miscalibrated"; unbinned, so
    # it has no finite-sample floor: its expectation is 0 for a calibrated predictor.
    overconfidence_i = (conf - correct).mean(axis=0)

    auc_cols = _auc_per_class(probs, labels)
    defined = ~np.isnan(auc_cols)
    with np.errstate(invalid="ignore"):
        auc_i = np.where(defined, auc_cols, 0.0).sum(axis=1) / defined.sum(axis=1)

    p_true = np.take_along_axis(probs, labels[..., None], axis=2)[..., 0]  # (N, L)
    # sum_a (p_a - 1[y = a])^2 = sum_a p_a^2 - 2 p_y + 1, without a [N, L, c] one-hot.
    brier_i = (np.einsum("nlc,nlc->nl", probs, probs) - 2 * p_true + 1).mean(axis=0)  # summed over classes
    ce_i = -np.log(np.maximum(p_true, ce_eps)).mean(axis=0)
    return {"ece": ece_i, "ece_debiased": signed_root(ece_debiased_sq_i), "ece_debiased_sq": ece_debiased_sq_i,
            "overconfidence": overconfidence_i, "auc": auc_i, "brier": brier_i, "ce": ce_i}


def item_influence(probs, labels, metric: str = "ece", n_bins: int = 10, ce_eps: float = CE_EPS,
                   observed=None) -> np.ndarray:
    """Each item's first-order share of a sequence-level score: [N], for the standard error
    of a difference between two predictors scored on the same items (:func:`difference_se`).

    probs [N, L, c], labels [N, L]; ``metric`` one of :data:`SELECT_KEYS`. Brier and CE are
    means over items, so item n's share is its own mean over entries / N (they sum to the
    score). The ECE of an entry is (1 / B') sum_b |S_b| / n_b over its B' non-empty bins,
    S_b = sum over the bin's items of (1[top class right] - confidence): with the bins and
    the signs of S_b held fixed it is linear in the items, and item n's share is
    sum_i sign(S_b) (correct - conf) / (n_b B' L) over its entries i (the shares sum to the
    ECE exactly). The debiased squared ECE (bin value (S_b / n_b)^2 minus the accuracy's
    variance) has the share 2 (S_b / n_b) (correct - conf) / (n_b B' L) of its leading term.
    Resampling the items moves the score by about the sum of their shares (the delta
    method); it ignores the bins' own movement and the kink of |S_b| at 0, which is why
    tests check it against the paired bootstrap.

    ``observed`` bool [N, L]: the shares of the masked score of :func:`sequence_metrics`
    (entry i over its n_i observed items, the mean over the L' entries that have any): the
    same formulas with n_i for N, the bins of the observed items and L' for L; an item gets
    nothing from its unobserved entries, and the shares still sum to the score.
    """
    if metric not in SELECT_KEYS:
        raise ValueError(f"metric must be one of {', '.join(SELECT_KEYS)}, got {metric!r}")
    probs, labels = _check_probs_labels(probs, labels, 3)
    if observed is not None:
        return _masked_influence(probs, labels, _check_observed(observed, labels), metric, n_bins, ce_eps)
    N, L, _ = probs.shape
    if metric in ("brier", "ce"):
        p_true = np.take_along_axis(probs, labels[..., None], axis=2)[..., 0]
        if metric == "brier":
            per = np.einsum("nlc,nlc->nl", probs, probs) - 2 * p_true + 1
        else:
            per = -np.log(np.maximum(p_true, ce_eps))
        return per.mean(axis=1) / N
    conf = probs.max(axis=2)
    gap = (probs.argmax(axis=2) == labels) - conf  # [N, L]
    flat = np.arange(L)[None, :] * n_bins + _bin_ids(conf, n_bins)
    count = np.bincount(flat.ravel(), minlength=L * n_bins).astype(np.float64)
    total = np.bincount(flat.ravel(), weights=gap.ravel(), minlength=L * n_bins)
    filled = (count > 0).reshape(L, n_bins).sum(axis=1)  # B' per entry
    n = np.maximum(count, 1.0)
    weight = np.sign(total) / n if metric == "ece" else 2 * total / n**2
    return (weight[flat] * gap / (filled[None, :] * L)).sum(axis=1)


def _masked_influence(probs: np.ndarray, labels: np.ndarray, observed: np.ndarray, metric: str, n_bins: int,
                      ce_eps: float) -> np.ndarray:
    """:func:`item_influence` of the masked score: [N]. The masked score is the mean over the L'
    entries that have observed items of each entry's score over them, so an item's share is
    the sum over its observed entries of its share of that one-entry score, / L'."""
    share = np.zeros(len(probs))
    entries = np.flatnonzero(observed.any(axis=0))
    for i in entries:
        rows = np.flatnonzero(observed[:, i])
        share[rows] += item_influence(probs[rows, i : i + 1], labels[rows, i : i + 1], metric, n_bins, ce_eps)
    return share / max(len(entries), 1)


def difference_se(a: np.ndarray, b: np.ndarray) -> float:
    """Standard error of score_a - score_b over resamples of the shared items, from the two
    predictors' :func:`item_influence` on the same items (paired: what the items have in
    common cancels)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) < 2:
        raise ValueError(f"influences of the same items expected, got shapes {a.shape} and {b.shape}")
    return float(np.sqrt(len(a) * np.var(a - b, ddof=1)))


def ipcw_weights(true_times, censored) -> np.ndarray:
    """Inverse-probability-of-censoring weights of right-censored times: [N] float64.

    true_times [N]: integers >= 1, the time to event, or on a censored item its last
    observed entry (T exceeds it); censored bool [N]. An item's outcome is observed
    (delta = 1) when it is not censored; its weight is w = delta / G(T), with G(t) = P(C >= t)
    (the event at t is seen when entry t is) from the reverse Kaplan-Meier estimate of the
    censoring times in discrete time: at s, the items at risk of a censoring seen at s are
    those observed beyond s or censored at s (an event at s hides a censoring at s), the
    censoring hazard is h(s) = #censored at s / #at risk at s, and G(t) = prod_{s < t}
    (1 - h(s)). G(T) > 0 for every uncensored item (it is itself at risk, uncensored, at
    every s < T). Hajek means sum w x / sum w of an item quantity x are then
    consistent for its mean over the uncensored population when the censoring time is
    independent of T and of the item (docs/METRICS.md, "Censored items").
    """
    t = np.asarray(true_times)
    censored = np.asarray(censored)
    if censored.dtype != bool or censored.shape != t.shape or t.ndim != 1:
        raise ValueError(f"censored must be a bool [N] beside true_times [N], got {censored.dtype} {censored.shape} "
                         f"and {t.shape}")
    if len(t) and ((t != np.round(t)).any() or t.min() < 1):
        raise ValueError("true_times must be integers >= 1 to weigh censored items")
    t = t.astype(np.int64)
    if not len(t):
        return np.zeros(0)
    size = int(t.max()) + 1
    observed_from = np.cumsum(np.bincount(t, minlength=size)[::-1])[::-1]  # [s]: #{observed time >= s}
    # An event at s is seen when entry s is (C >= s), so it hides a censoring at s: those items
    # are not at risk of a censoring seen at s (kept in, they would bias h(s) low by P(T > s | T >= s)).
    at_risk = observed_from - np.bincount(t[~censored], minlength=size)
    hazard = np.bincount(t[censored], minlength=size) / np.maximum(at_risk, 1)
    G = np.cumprod(1.0 - hazard)  # G[k] = prod_{s <= k} (1 - h(s)), h(0) = 0: G(t) = G[t - 1]
    return np.where(censored, 0.0, 1.0 / np.where(censored, 1.0, G[t - 1]))


def interval_metrics(lo, hi, point, true_times, alpha: float = 0.9, censored=None) -> dict[str, float]:
    """Time-to-event interval metrics (App. A.2) and the interval score.

    coverage = fraction of items with lo <= T <= hi; relative width = mean(hi - lo) /
    mean(T); relative MAE = sum |T - point| / sum T; interval score = mean over items of
    IS_alpha(lo, hi; T) / mean(T), with (Gneiting & Raftery 2007, eq. 43, for the central
    ``alpha`` interval, i.e. miscoverage 1 - alpha)
    IS = (hi - lo) + 2 / (1 - alpha) * ((lo - T) 1[T < lo] + (T - hi) 1[T > hi]).
    All inputs [N].

    ``censored`` bool [N] (right-censored data; ``true_times`` is then the last observed
    entry of a censored item): every mean over T is the :func:`ipcw_weights` Hajek mean,
    sum w x / sum w (coverage, mean(T), the MAE's numerator, the interval score); the width
    is over all items (it does not depend on T). NaN when no item is uncensored. None: the
    plain means.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    lo, hi, point, t = (np.asarray(a, dtype=np.float64) for a in (lo, hi, point, true_times))
    if not lo.shape == hi.shape == point.shape == t.shape:
        raise ValueError("lo, hi, point and true_times must have the same shape [N]")
    if censored is not None:
        return _interval_metrics_ipcw(lo, hi, point, t, alpha, ipcw_weights(t, censored))
    total = t.sum()
    # The width alone rewards narrow intervals and the coverage alone wide ones; the score
    # charges each miss by its distance, weighted so that the proper choice is the central
    # alpha interval of the predictive distribution.
    penalty = 2 / (1 - alpha) * (np.maximum(lo - t, 0) + np.maximum(t - hi, 0))
    score = (hi - lo) + penalty
    return {
        "coverage": float(((t >= lo) & (t <= hi)).mean()),
        "relative_width": float((hi - lo).mean() / t.mean()) if total > 0 else float("nan"),
        "relative_mae": float(np.abs(t - point).sum() / total) if total > 0 else float("nan"),
        "interval_score": float(score.mean() / t.mean()) if total > 0 else float("nan"),
    }


def _interval_metrics_ipcw(lo, hi, point, t, alpha: float, w: np.ndarray) -> dict[str, float]:
    """:func:`interval_metrics` with IPCW weights w [N] (0 on censored items)."""
    total = (w * t).sum()  # sum w T: sum w x / sum w over mean_w(T) = sum w x / sum w T
    if not total > 0:
        return dict.fromkeys(("coverage", "relative_width", "relative_mae", "interval_score"), float("nan"))
    penalty = 2 / (1 - alpha) * (np.maximum(lo - t, 0) + np.maximum(t - hi, 0))
    inside = (t >= lo) & (t <= hi)
    return {
        "coverage": float((w * inside).sum() / w.sum()),
        "relative_width": float((hi - lo).mean() / (total / w.sum())),
        "relative_mae": float((w * np.abs(t - point)).sum() / total),
        "interval_score": float((w * ((hi - lo) + penalty)).sum() / total),
    }


def crps(pmf, true_times, censored=None) -> float:
    """Relative CRPS of a time-to-event distribution on t = 1..L.

    pmf [N, L]: P(T = t) for t = 1..L per item (rows sum to 1, e.g.
    :func:`focus_tune.montecarlo.time_pmf`); true_times [N]: integers in 1..L. Returns
    mean over items of sum_{k=1}^{L} (F(k) - 1[T <= k])^2, divided by mean(T), with F the
    cdf of the pmf. For integer-valued outcomes this is the CRPS (the integral of the
    squared cdf difference over the reals, whose integrand is constant on [k, k + 1)), equal
    to E|X - T| - E|X - X'| / 2 with X, X' independent draws of the pmf.

    ``censored`` bool [N]: the mean over items and mean(T) are :func:`ipcw_weights` Hajek
    means (a censored item's CRPS is unknown: it weighs 0); NaN when every item is censored.
    """
    pmf = np.asarray(pmf, dtype=np.float64)
    t = np.asarray(true_times, dtype=np.float64)
    if pmf.ndim != 2 or t.shape != pmf.shape[:1]:
        raise ValueError(f"pmf must be [N, L] and true_times [N], got {pmf.shape} and {t.shape}")
    N, L = pmf.shape
    if np.isnan(pmf).any() or (pmf < 0).any() or not np.allclose(pmf.sum(axis=1), 1.0, atol=1e-6):
        raise ValueError("every row of pmf must be a distribution over t = 1..L")
    if (t != np.round(t)).any() or (t < 1).any() or (t > L).any():
        raise ValueError(f"true_times must be integers in [1, {L}]")
    cdf = np.cumsum(pmf, axis=1)  # F(k), k = 1..L
    step = np.arange(1, L + 1)[None, :] >= t[:, None]  # 1[T <= k]
    per_item = ((cdf - step) ** 2).sum(axis=1)
    if censored is not None:
        w = ipcw_weights(t, censored)
        total = (w * t).sum()
        return float((w * per_item).sum() / total) if total > 0 else float("nan")
    return float(per_item.mean() / t.mean())


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


def label_noise(probs, draw_labels, redraws: int = LABEL_REDRAWS, n_bins: int = 10,
                observed=None) -> dict[str, float]:
    """How far the labels alone move a predictor's sequence-level calibration scores.

    ``probs`` [N, L, c] stay fixed; ``draw_labels()`` returns a fresh [N, L] label draw for the
    same items from their true process (for the exact marginals: the spread of a calibrated
    predictor's scores over test sets of these items). Returns the standard deviations over
    ``redraws`` draws of the sequence-level ``ece`` and ``ece_debiased_sq`` (as in
    :func:`sequence_metrics`; the bins depend on ``probs`` only, so they are found once), keyed by
    :data:`LABEL_SD_KEYS`. The labels are drawn whole (a sequence that has ended stays ended),
    so the spread is that of real test sets, 2-3x that of labels drawn independently per
    entry (benchmarks/bench_label_noise.py). ``observed`` bool [N, L]: the scores of
    :func:`sequence_metrics` with that mask (the test split's censoring, the same for every draw).
    """
    if redraws < 2:
        raise ValueError(f"label_noise needs at least 2 redraws, got {redraws}")
    probs = np.asarray(probs, dtype=np.float64)
    conf, top = probs.max(axis=2), probs.argmax(axis=2)  # fixed: only the labels change
    scores = []
    for _ in range(redraws):
        _, labels = _check_probs_labels(probs, draw_labels(), 3)
        correct = (top == labels).astype(np.float64)
        if observed is not None:
            mask = _check_observed(observed, labels)
            scores.append(tuple(_mean_over_entries(_masked_columns(f, conf, correct, mask, n_bins))
                                for f in (_ece_columns, _ece_debiased_columns)))
        else:
            scores.append((_ece_columns(conf, correct, n_bins).mean(),
                           _ece_debiased_columns(conf, correct, n_bins).mean()))
    return dict(zip(LABEL_SD_KEYS, map(float, np.std(np.array(scores), axis=0, ddof=1))))
