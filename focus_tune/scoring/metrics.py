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

Right-censored data (docs/METRICS.md, "Censored items"): each entry-level metric has one
weighted implementation, entry by entry, and a fast path where every weight is 1, the
vectorized code above (:class:`_Weights`). The scores use inverse probability of censoring
``weights`` [N, L] (weighted Hajek estimates of the value on the full labels); an
``observed`` mask [N, L] is the 0/1 weight whose 0 leaves an item out of that entry
altogether, so each entry is the fast path over its observed items. Without them, with
weights that are all 1 or a mask that is all True, every function runs the vectorized code,
the same numbers bit for bit. The time-to-event metrics of ``censored`` items [N] are means
weighted by the inverse probability of censoring (:func:`ipcw_weights`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..names import SELECT_KEYS
from . import survival

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


def _check_observed(observed, labels: np.ndarray) -> np.ndarray:
    """bool [N, L] mask of the observed (item, entry) pairs, the shape of ``labels``."""
    observed = np.asarray(observed)
    if observed.dtype != bool or observed.shape != labels.shape:
        raise ValueError(f"observed must be a bool mask of the labels' shape {labels.shape}, "
                         f"got {observed.dtype} {observed.shape}")
    return observed


def _check_weights(weights, labels: np.ndarray) -> np.ndarray:
    """float64 [N, L] inverse-probability-of-censoring weights of the (item, entry) pairs, the
    shape of ``labels`` (0: unobserved; NaN: an entry the positivity check blocks)."""
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != labels.shape:
        raise ValueError(f"weights must have the labels' shape {labels.shape}, got {weights.shape}")
    if (weights < 0).any():
        raise ValueError("weights must be >= 0")
    return weights


# ----------------------------------------------------------------------------- weights


@dataclass(frozen=True)
class _Weights:
    """How the items count at each entry: the one reading of ``observed=`` and ``weights=``.

    Every entry-level metric has one weighted implementation and a fast path for weights that
    are all 1 (every entry at once, vectorized). IPCW ``weights`` (float [N, L] >= 0; NaN: the
    positivity check) take the weighted one, entry by entry: every item's prediction stays in
    the ECE's bins (the bins of the full labels) and its label weighs w. A mask (``observed``,
    bool [N, L]) is the 0/1 weight whose 0 leaves the item out of the entry altogether, its
    prediction too: what is left weighs 1, so each entry takes the fast path over its observed
    rows. No mask or weights, weights that are all 1 and a mask that is all True are the fast
    path over every entry: the same numbers bit for bit.
    """

    observed: np.ndarray | None = None  # bool [N, L]
    weights: np.ndarray | None = None  # float64 [N, L]

    @classmethod
    def of(cls, labels: np.ndarray, observed=None, weights=None) -> "_Weights":
        """From a metric's ``observed`` and ``weights`` arguments, checked (``weights`` take precedence)."""
        if weights is not None:
            weights = _check_weights(weights, labels)
            return cls() if (weights == 1).all() else cls(weights=weights)
        if observed is not None:
            observed = _check_observed(observed, labels)
            return cls() if observed.all() else cls(observed=observed)
        return cls()

    @property
    def unit(self) -> bool:
        """Every weight is 1: the fast path."""
        return self.observed is None and self.weights is None

    @property
    def blocked(self) -> bool:
        """NaN weights (the positivity check): the sequence-level values are NaN."""
        return self.weights is not None and bool(np.isnan(self.weights).any())

    def entries(self) -> np.ndarray:
        """The entries that have weight (an observed item, a positive weight), ascending."""
        return np.flatnonzero((self.observed if self.weights is None else self.weights > 0).any(axis=0))

    def at(self, i: int):
        """Entry i's items and their weights: (its observed rows, None) under a mask, (every row,
        its weights [N, 1]) under weights."""
        if self.weights is None:
            return self.observed[:, i], None
        return slice(None), self.weights[:, i : i + 1]


def _in_threads(fn, jobs, threads: int) -> list:
    """``[fn(job) for job in jobs]``, in up to ``threads`` threads (numpy's sorts and bincounts
    release the GIL)."""
    if threads > 1 and len(jobs) > 1:
        with ThreadPoolExecutor(min(threads, len(jobs))) as pool:
            return list(pool.map(fn, jobs))
    return [fn(job) for job in jobs]


def _per_entry(values, arrays: tuple, keys: tuple, weighting: _Weights, threads: int = 1) -> dict[str, np.ndarray]:
    """Every entry's values, {key: [L]}, from ``values(*columns, w)`` -> {key: [L']}, the
    ``columns`` being ``arrays`` (each [N, L, ...]) cut to some of the entries.

    Every weight 1: all entries at once, ``w`` None (in blocks of entries, one per thread: an
    entry's values depend on its column alone, so the blocks give the same numbers). Otherwise
    entry by entry, in ``threads``: under a mask its observed rows and ``w`` None, under weights
    every row and ``w`` [N, 1]; NaN where an entry has no weight."""
    L = arrays[0].shape[1]
    if weighting.unit:
        blocks = np.array_split(np.arange(L), max(1, min(threads, L)))
        if len(blocks) == 1:
            return values(*arrays, None)
        parts = _in_threads(lambda b: values(*(a[:, b] for a in arrays), None), blocks, threads)
        return {k: np.concatenate([p[k] for p in parts]) for k in keys}

    def entry(i: int) -> dict[str, np.ndarray]:
        rows, w = weighting.at(i)
        return values(*(a[rows, i : i + 1] for a in arrays), w)

    entries = weighting.entries()
    out = {k: np.full(L, np.nan) for k in keys}
    for i, part in zip(entries, _in_threads(entry, entries, threads)):
        for k in keys:
            out[k][i] = part[k][0]
    return out


def _mean_over_entries(values: np.ndarray) -> float:
    """The sequence-level value of entry-level ones: the mean over the entries that have a
    value (the others are NaN: no weight); NaN when none has."""
    kept = values[~np.isnan(values)]
    return float(kept.mean()) if len(kept) else float("nan")


# ----------------------------------------------------------------------------- calibration


def _bin_ids(conf: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-mass bin of every confidence, per column: conf [N, L] -> [N, L] ints in [0, n_bins)."""
    edges = np.quantile(conf, np.arange(1, n_bins) / n_bins, axis=0)  # (B-1, L)
    # Bin of a confidence = how many edges lie strictly below it: (Q_{b-1}, Q_b] -> b.
    return (conf[:, :, None] > edges.T[None, :, :]).sum(axis=2)


def _binned(conf: np.ndarray, correct: np.ndarray, n_bins: int, w: np.ndarray | None = None):
    """Per column and bin of the :func:`ece` bins: (weight W, sum of w conf, sum of w correct,
    sum of w conf^2, effective number of items n), each [L, n_bins]. conf, correct: [N, L].

    ``w`` [N, L] >= 0: the bins are those of every item's confidence, the sums weigh each item
    by w, and n is Kish's (sum w)^2 / sum w^2 (the variance of a Hajek mean of independent
    labels is about that of n items). None, every weight 1 (the fast path): W and n are the
    counts, the sums plain.
    """
    N, L = conf.shape
    flat = (np.arange(L)[None, :] * n_bins + _bin_ids(conf, n_bins)).ravel()
    size = L * n_bins

    def total(x=None):
        return np.bincount(flat, weights=None if x is None else x.ravel(), minlength=size).reshape(L, n_bins)

    if w is None:
        count = total()
        return count, total(conf), total(correct), total(conf * conf), count
    cw = w * conf
    W = total(w)
    filled = W > 0
    n = np.where(filled, W * W / np.where(filled, total(w * w), 1.0), 1.0)
    return W, total(cw), total(w * correct), total(cw * conf), n


def _calibration(conf: np.ndarray, correct: np.ndarray, n_bins: int,
                 w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(ECE, debiased squared ECE) per column: conf, correct [N, L] -> [L], [L]; ``w`` [N, L]
    weights as in :func:`_binned` (None: every weight 1).

    Per bin with weight, with a = its (weighted) accuracy, m = its mean confidence, v = the
    (1/n) variance of its confidences and n its effective number of items: the ECE is the mean
    over those bins of |a - m|, the debiased value the mean of (a - m)^2 - (a (1 - a) - v) /
    (n - 1), or (a - m)^2 - m (1 - m) when n = 1 (no clipping at 0: see the module doc). A
    column without weight is NaN.
    """
    W, sum_conf, sum_corr, sum_conf2, n = _binned(conf, correct, n_bins, w)
    filled = W > 0
    Wf = np.where(filled, W, 1)  # empty bins are masked out below; 1 avoids 0/0
    acc, mean_conf = sum_corr / Wf, sum_conf / Wf
    gap = np.abs(sum_corr - sum_conf) / Wf  # |accuracy - mean confidence| per bin
    # Rounding can leave a variance of a constant bin at -1e-17: it is a variance, so >= 0.
    spread = np.maximum(sum_conf2 / Wf - mean_conf**2, 0.0)
    # E[a (1 - a)] = mq (1 - mq) (n - 1) / n + vq / n for independent labels of probabilities
    # q (mean mq, variance vq), so (a (1 - a) - vq) / (n - 1) is unbiased for Var(a); vq is
    # unknown and v stands in for it (vq = v for a calibrated predictor: exact there).
    n = np.where(filled, n, 1)
    var_acc = np.where(n > 1, (acc * (1 - acc) - spread) / np.maximum(n - 1, 1e-300), mean_conf * (1 - mean_conf))
    value = (acc - mean_conf) ** 2 - var_acc
    k = filled.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):  # k = 0: a column without weight
        return np.where(filled, gap, 0.0).sum(axis=1) / k, np.where(filled, value, 0.0).sum(axis=1) / k


CALIBRATION_KEYS = ("ece", "ece_debiased_sq")


def _sequence_calibration(conf: np.ndarray, correct: np.ndarray, n_bins: int,
                          weighting: _Weights) -> tuple[float, float]:
    """The sequence-level (ECE, debiased squared ECE): the means over the entries with weight
    of :func:`_calibration`'s entry-level values; NaN when the weights are blocked."""
    if weighting.blocked:
        return float("nan"), float("nan")

    def values(conf, correct, w):
        return dict(zip(CALIBRATION_KEYS, _calibration(conf, correct, n_bins, w)))

    per_entry = _per_entry(values, (conf, correct), CALIBRATION_KEYS, weighting)
    return _mean_over_entries(per_entry["ece"]), _mean_over_entries(per_entry["ece_debiased_sq"])


def ece(probs, labels, n_bins: int = 10) -> float:
    """Confidence ECE with equal-mass (quantile) bins.  probs [N, c], labels [N]."""
    probs, labels = _check_probs_labels(probs, labels, 2)
    conf = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    return float(_calibration(conf[:, None], correct[:, None], n_bins)[0][0])


def sequence_ece(probs, labels, n_bins: int = 10, observed=None, weights=None) -> float:
    """The sequence-level ECE of :func:`sequence_metrics` alone (the mean over entries of the
    entry-level :func:`ece`): probs [N, L, c], labels [N, L]; ``observed`` bool [N, L] or
    ``weights`` float [N, L] as in :func:`sequence_metrics`."""
    probs, labels = _check_probs_labels(probs, labels, 3)
    conf = probs.max(axis=2)
    correct = (probs.argmax(axis=2) == labels).astype(np.float64)
    return _sequence_calibration(conf, correct, n_bins, _Weights.of(labels, observed, weights))[0]


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
    return float(_calibration(conf[:, None], correct[:, None], n_bins)[1][0])


def signed_root(x):
    """sign(x) sqrt(|x|): a debiased squared error back on the scale of the ECE, keeping its sign."""
    return np.sign(x) * np.sqrt(np.abs(x))


def ece_debiased(probs, labels, n_bins: int = 10) -> float:
    """The debiased calibration error on the ECE's scale: ``signed_root(ece_debiased_squared)``.

    probs [N, c], labels [N]. A uniform gap g between accuracy and confidence reads g; a
    calibrated predictor reads about 0, either side of it (the noise of a zero truth).
    """
    return float(signed_root(ece_debiased_squared(probs, labels, n_bins)))


def reliability_curve(probs, labels, n_bins: int = 10, weights=None) -> dict[str, np.ndarray]:
    """Per non-empty bin: mean confidence, accuracy and count (for reliability diagrams).

    probs [N, c], labels [N]; the same bins as :func:`ece`. ``weights`` [N] (right-censored
    data, one entry's :func:`focus_tune.scoring.survival.entry_weights`): the bins of every item's
    confidence, per bin the weighted means over the weighted items, and the count is the
    sum of their weights (the number of items they stand for); a bin without weight is left
    out, and NaN weights (the positivity check) give no curve (empty arrays).
    """
    probs, labels = _check_probs_labels(probs, labels, 2)
    w = None
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != labels.shape:
            raise ValueError(f"weights must be [N] beside labels {labels.shape}, got {w.shape}")
        if np.isnan(w).any():
            return {"confidence": np.zeros(0), "accuracy": np.zeros(0), "count": np.zeros(0)}
        w = w[:, None]
    conf = probs.max(axis=1)[:, None]
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)[:, None]
    count, sum_conf, sum_corr, _, _ = (a[0] for a in _binned(conf, correct, n_bins, w))
    keep = count > 0
    return {
        "confidence": sum_conf[keep] / count[keep],
        "accuracy": sum_corr[keep] / count[keep],
        "count": count[keep],
    }


# ----------------------------------------------------------------------------- every entry-level metric


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


def _weighted_auc(scores: np.ndarray, positive: np.ndarray, w: np.ndarray) -> float:
    """Weighted one-vs-rest AUC: sum over (positive p, negative q) of w_p w_q (1[s_p > s_q] +
    1[s_p = s_q] / 2) over (sum of positive weights)(sum of negative weights); NaN when
    either side has no weight. Unit weights: the Mann-Whitney AUC (scikit-learn's)."""
    pos, neg = positive & (w > 0), ~positive & (w > 0)
    wp, wn = w[pos], w[neg]
    if not (wp.sum() > 0 and wn.sum() > 0):
        return float("nan")
    order = np.argsort(scores[neg], kind="stable")
    sn = scores[neg][order]
    cum = np.concatenate([[0.0], np.cumsum(wn[order])])
    sp = scores[pos]
    below = cum[np.searchsorted(sn, sp, side="left")]
    tied = cum[np.searchsorted(sn, sp, side="right")] - below
    return float((wp * (below + tied / 2)).sum() / (wp.sum() * wn.sum()))


ENTRY_KEYS = ("ece", "ece_debiased", "ece_debiased_sq", "overconfidence", "auc", "brier", "ce")


def _unit_entries(probs: np.ndarray, labels: np.ndarray, n_bins: int, ce_eps: float) -> dict[str, np.ndarray]:
    """The entry-level values of :func:`sequence_metrics` where every weight is 1 (the fast
    path): probs [N, L, c], labels [N, L] -> {key: [L]}, every entry at once."""
    conf = probs.max(axis=2)  # (N, L)
    correct = (probs.argmax(axis=2) == labels).astype(np.float64)
    ece_i, ece_debiased_sq_i = _calibration(conf, correct, n_bins)
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


def _weighted_entry(probs: np.ndarray, labels: np.ndarray, w: np.ndarray, n_bins: int,
                    ce_eps: float) -> dict[str, np.ndarray]:
    """The entry-level values of one entry under weights (the weighted implementation): probs
    [N, 1, c], labels [N, 1], w [N, 1] -> {key: [1]}. Each is its weighted (Hajek) estimate:
    the ECE's bins are those of every item's confidence (:func:`_calibration`), AUC the
    weighted Mann-Whitney statistic, Brier, CE and overconfidence weighted means over the
    items with weight. NaN throughout where no item has weight (or w is NaN: the positivity
    check)."""
    probs, labels, w = probs[:, 0], labels[:, 0], w[:, 0]
    if np.isnan(w).any() or not (w > 0).any():
        return {k: np.full(1, np.nan) for k in ENTRY_KEYS}
    keep = w > 0
    conf = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    ece_i, ece_sq_i = (v[0] for v in _calibration(conf[:, None], correct[:, None], n_bins, w[:, None]))
    wk, pk, yk = w[keep], probs[keep], labels[keep]
    W = wk.sum()
    p_true = np.take_along_axis(pk, yk[:, None], axis=1)[:, 0]
    aucs = [_weighted_auc(probs[:, a], labels == a, w) for a in range(probs.shape[1])]
    defined = [a for a in aucs if not np.isnan(a)]
    values = {
        "ece": ece_i, "ece_debiased": signed_root(ece_sq_i), "ece_debiased_sq": ece_sq_i,
        "overconfidence": (wk * (conf[keep] - correct[keep])).sum() / W,
        "auc": np.mean(defined) if defined else np.nan,
        "brier": (wk * ((pk * pk).sum(axis=1) - 2 * p_true + 1)).sum() / W,
        "ce": (wk * -np.log(np.maximum(p_true, ce_eps))).sum() / W,
    }
    return {k: np.full(1, float(v)) for k, v in values.items()}


def sequence_metrics(probs, labels, n_bins: int = 10, ce_eps: float = CE_EPS, threads: int = 1,
                     observed=None, weights=None) -> dict:
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
    items x 300 entries). Under a mask or weights the entries are scored one by one, in threads.

    ``observed`` (right-censored data): bool [N, L], which labels are observed. Each entry's
    values are then taken over its observed items alone (its column's metrics, entry by
    entry); an entry without any is NaN and left out of the sequence means, like an entry
    without an AUC. None or all True: every label counts (the vectorized path).

    ``weights`` (right-censored data, what the scores use): float [N, L], the inverse
    probability of censoring weights of :func:`focus_tune.scoring.survival.entry_weights` (0 on an
    unobserved pair). Every entry-level value is then its weighted (Hajek) estimate of the
    value on the full labels: the ECE's bins are those of every item's confidence, with
    weighted sums per bin; AUC the weighted Mann-Whitney statistic; Brier, CE and
    overconfidence weighted means. An entry without weight is NaN and left out of the
    sequence means; NaN weights (the positivity check) make that entry and every sequence
    value NaN. Weights that are all 1 are the vectorized path, the unweighted numbers bit for
    bit. Takes precedence over ``observed``. (:class:`_Weights` has the rule of both.)
    """
    probs, labels = _check_probs_labels(probs, labels, 3)
    weighting = _Weights.of(labels, observed, weights)

    def values(probs, labels, w):
        if w is None:
            return _unit_entries(probs, labels, n_bins, ce_eps)
        return _weighted_entry(probs, labels, w, n_bins, ce_eps)

    per_entry = _per_entry(values, (probs, labels), ENTRY_KEYS, weighting, threads)
    nan, blocked = float("nan"), weighting.blocked
    out = {k: nan if blocked else _mean_over_entries(per_entry[k]) for k in ENTRY_KEYS
           if k not in ("auc", "ece_debiased")}
    # The unbiased quantity is the squared one: average it over entries, then take the root
    # (the mean of per-entry roots would not be centred on 0 for a calibrated predictor).
    out["ece_debiased"] = float(signed_root(out["ece_debiased_sq"]))
    auc_i = per_entry["auc"]
    out["auc"] = nan if blocked or not np.isfinite(auc_i).any() else float(np.nanmean(auc_i))
    out["per_entry"] = per_entry
    return out


# ----------------------------------------------------------------------------- influence


def item_influence(probs, labels, metric: str = "ece", n_bins: int = 10, ce_eps: float = CE_EPS,
                   observed=None, weights=None) -> np.ndarray:
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

    ``weights`` float [N, L] (:func:`sequence_metrics`' weighted score): the same formulas with
    each item's term times its weight and the bins' weights W_b (the entry's sum of weights
    for Brier and CE) for n_b; they sum to the weighted score. NaN weights: NaN shares.
    """
    if metric not in SELECT_KEYS:
        raise ValueError(f"metric must be one of {', '.join(SELECT_KEYS)}, got {metric!r}")
    probs, labels = _check_probs_labels(probs, labels, 3)
    weighting = _Weights.of(labels, observed, weights)
    if weighting.unit:
        return _unit_shares(probs, labels, metric, n_bins, ce_eps)
    if weighting.blocked:
        return np.full(len(probs), np.nan)
    # The score is the mean over the L' entries with weight of each entry's score, so an item's
    # share is the sum over its entries of its share of that one-entry score, / L'.
    share = np.zeros(len(probs))
    entries = weighting.entries()
    for i in entries:
        rows, w = weighting.at(i)
        if w is None:  # a mask: the entry's observed rows, every weight 1
            share[rows] += _unit_shares(probs[rows, i : i + 1], labels[rows, i : i + 1], metric, n_bins, ce_eps)
        else:
            share += _weighted_shares(probs[:, i], labels[:, i], w[:, 0], metric, n_bins, ce_eps)
    return share / max(len(entries), 1)


def _unit_shares(probs: np.ndarray, labels: np.ndarray, metric: str, n_bins: int, ce_eps: float) -> np.ndarray:
    """:func:`item_influence` where every weight is 1 (the fast path): probs [N, L, c],
    labels [N, L] -> [N], every entry at once."""
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


def _weighted_shares(probs: np.ndarray, labels: np.ndarray, w: np.ndarray, metric: str, n_bins: int,
                     ce_eps: float) -> np.ndarray:
    """Each item's share of one entry's weighted score (the weighted implementation): probs
    [N, c], labels [N], w [N] -> [N], 0 where w is 0."""
    if metric in ("brier", "ce"):
        p_true = np.take_along_axis(probs, labels[:, None], axis=1)[:, 0]
        per = (probs * probs).sum(axis=1) - 2 * p_true + 1 if metric == "brier" else -np.log(np.maximum(p_true, ce_eps))
        return np.where(w > 0, w * per, 0.0) / w.sum()
    conf = probs.max(axis=1)
    gap = np.where(w > 0, (probs.argmax(axis=1) == labels) - conf, 0.0)
    bins = _bin_ids(conf[:, None], n_bins)[:, 0]  # the bins of every item's confidence, as the score's
    W = np.bincount(bins, weights=w, minlength=n_bins)
    S = np.bincount(bins, weights=w * gap, minlength=n_bins)
    filled = (W > 0).sum()
    Wf = np.where(W > 0, W, 1.0)
    per_bin = np.sign(S) / Wf if metric == "ece" else 2 * S / Wf**2
    return per_bin[bins] * w * gap / filled


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
    t, censored = survival._check(true_times, censored)
    if not len(t):
        return np.zeros(0)
    G = survival.censoring_survival(t, censored)  # G[t] = G(t), the one estimate (focus_tune.scoring.survival)
    return np.where(censored, 0.0, 1.0 / np.where(censored, 1.0, G[t]))


def interval_metrics(lo, hi, point, true_times, alpha: float = 0.9, censored=None, length: int | None = None,
                     with_se: bool = False) -> dict[str, float]:
    """Time-to-event interval metrics (App. A.2) and the interval score.

    coverage = fraction of items with lo <= T <= hi; relative width = mean(hi - lo) /
    mean(T); relative MAE = sum |T - point| / sum T; interval score = mean over items of
    IS_alpha(lo, hi; T) / mean(T), with (Gneiting & Raftery 2007, eq. 43, for the central
    ``alpha`` interval, i.e. miscoverage 1 - alpha)
    IS = (hi - lo) + 2 / (1 - alpha) * ((lo - T) 1[T < lo] + (T - hi) 1[T > hi]).
    All inputs [N].

    ``censored`` bool [N] (right-censored data; ``true_times`` is then the last observed
    entry of a censored item): every mean over T is an IPCW Hajek mean, sum w x / sum w
    (mean(T), the MAE's numerator, the interval score), with w = 1 / G(tau) on the items whose
    quantity is known (:func:`focus_tune.scoring.survival.time_weights`): tau = min(T, L - 1) with
    ``length`` = L (an item cut at L - 1 without the event has T = L, and T = L is known at
    L - 1), tau = T without it. The coverage is known earlier, at tau = min(T, floor(hi),
    L - 1): a censored item observed through floor(hi) without the event is a known miss and
    counts, weighted by 1 / G(floor(hi)). The width is over all items (it does not depend on
    T). NaN when no quantity is known, or when the positivity check fails (G(e) = 0 at an
    entry e some item may need: then ``data/positivity`` = e with ``with_se``).
    ``with_se`` (censored only): also ``<metric>_se``, the standard error of each over the
    draw of the items (a bootstrap of the items with G re-estimated: :func:`_bootstrap_se`), and
    ``data/effective_items`` / ``data/coverage_effective_items`` (Kish's (sum w)^2 / sum w^2
    of the two weights) and ``data/largest_weight``. None: the plain means.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    lo, hi, point, t = (np.asarray(a, dtype=np.float64) for a in (lo, hi, point, true_times))
    if not lo.shape == hi.shape == point.shape == t.shape:
        raise ValueError("lo, hi, point and true_times must have the same shape [N]")
    if censored is not None:
        return _interval_metrics_ipcw(lo, hi, point, t, alpha, np.asarray(censored), length, with_se)
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


INTERVAL_KEYS = ("coverage", "relative_width", "relative_mae", "interval_score")


BOOTSTRAP_REPS = 200  # item resamples behind the standard errors of the censored time-to-event metrics


def _bootstrap_se(t: np.ndarray, censored: np.ndarray, length: int | None, statistic, reps: int = BOOTSTRAP_REPS,
                  seed: int = 0) -> np.ndarray:
    """Standard deviations over ``reps`` resamples of the N items (with replacement, a fixed
    seed: the same numbers every time) of ``statistic(idx, G)`` -> [k] values, with the
    censoring survival G re-estimated on each resample (the delta method with G held fixed
    overstates the noise: an estimated G makes IPCW means less noisy than the true G would,
    e.g. 0.095 for 0.072 on the relative width in docs/METRICS.md's simulation). Resamples
    where a value is NaN (e.g. the positivity check fails on them) are left out of its SD."""
    rng = np.random.default_rng(seed)
    n = len(t)
    values = []
    for _ in range(reps):
        idx = rng.integers(0, n, n)
        values.append(statistic(idx, survival.censoring_survival(t[idx], censored[idx], length)))
    v = np.array(values, dtype=np.float64)
    out = np.full(v.shape[1], np.nan)
    for k in range(v.shape[1]):
        finite = v[np.isfinite(v[:, k]), k]
        if len(finite) > 1:
            out[k] = finite.std(ddof=1)
    return out


def _censored_interval_values(lo, hi, point, t, alpha: float, censored: np.ndarray, length: int | None,
                              G: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray]:
    """(:func:`interval_metrics`' four values, w, w_cover) of right-censored items with G given."""
    w = survival.time_weights(t, censored, length, G=G)  # known T: tau = min(T, L - 1)
    w_cover = survival.time_weights(t, censored, length, upper=hi, G=G)  # known coverage: min(T, hi, L - 1)
    out = dict.fromkeys(INTERVAL_KEYS, float("nan"))
    if np.isnan(w).any() or np.isnan(w_cover).any():  # the positivity check failed
        return out, w, w_cover
    t, still_censored = survival.known_times(t, censored, length)
    T = np.where(still_censored, 0.0, t)  # a censored item's T is unknown: its weight is 0 (w) or it is a known miss
    inside = (T >= lo) & (T <= hi) & ~still_censored
    if w_cover.sum() > 0:
        out["coverage"] = float((w_cover * inside).sum() / w_cover.sum())
    total = (w * T).sum()  # sum w T: sum w x / sum w over mean_w(T) = sum w x / sum w T
    if total > 0:
        penalty = 2 / (1 - alpha) * (np.maximum(lo - T, 0) + np.maximum(T - hi, 0))
        width = hi - lo
        out["relative_width"] = float(width.mean() / (total / w.sum()))
        out["relative_mae"] = float((w * np.abs(T - point)).sum() / total)
        out["interval_score"] = float((w * (width + penalty)).sum() / total)
    return out, w, w_cover


def _interval_metrics_ipcw(lo, hi, point, t, alpha: float, censored: np.ndarray, length: int | None,
                           with_se: bool) -> dict[str, float]:
    """:func:`interval_metrics` of right-censored items (the docstring's weights)."""
    censored = censored.astype(bool)
    G = survival.censoring_survival(t, censored, length)
    out, w, w_cover = _censored_interval_values(lo, hi, point, t, alpha, censored, length, G)
    if not with_se:
        return out
    nan = float("nan")
    extra = {f"{k}_se": nan for k in INTERVAL_KEYS}
    if np.isnan(w).any() or np.isnan(w_cover).any():
        need = len(G) - 1 if length is None else max(length - 1, 1)
        extra[survival.POSITIVITY_KEY] = float(survival.positivity_entry(G, need))
        extra.update({"data/effective_items": 0.0, "data/coverage_effective_items": 0.0, "data/largest_weight": nan})
        return {**out, **extra}

    def statistic(idx, G_idx):
        values, _, _ = _censored_interval_values(lo[idx], hi[idx], point[idx], t[idx], alpha, censored[idx], length,
                                                 G_idx)
        return [values[k] for k in INTERVAL_KEYS]

    if len(t) > 1:
        extra.update(zip((f"{k}_se" for k in INTERVAL_KEYS), map(float, _bootstrap_se(t, censored, length, statistic))))
    extra["data/effective_items"] = survival.kish(w)
    extra["data/coverage_effective_items"] = survival.kish(w_cover)
    extra["data/largest_weight"] = float(max(w.max(), w_cover.max())) if len(w) else nan
    return {**out, **extra}


def crps(pmf, true_times, censored=None, with_se: bool = False):
    """Relative CRPS of a time-to-event distribution on t = 1..L.

    pmf [N, L]: P(T = t) for t = 1..L per item (rows sum to 1, e.g.
    :func:`focus_tune.scoring.montecarlo.time_pmf`); true_times [N]: integers in 1..L. Returns
    mean over items of sum_{k=1}^{L} (F(k) - 1[T <= k])^2, divided by mean(T), with F the
    cdf of the pmf. For integer-valued outcomes this is the CRPS (the integral of the
    squared cdf difference over the reals, whose integrand is constant on [k, k + 1)), equal
    to E|X - T| - E|X - X'| / 2 with X, X' independent draws of the pmf.

    ``censored`` bool [N]: the mean over items and mean(T) are IPCW Hajek means with the
    weights of :func:`interval_metrics` (:func:`focus_tune.scoring.survival.time_weights`, L the pmf's:
    an item cut at L - 1 without the event has T = L; any other censored item's CRPS is
    unknown and weighs 0); NaN when none is known or the positivity check fails. With
    ``with_se`` (censored only) returns (CRPS, its bootstrap standard error, :func:`_bootstrap_se`).
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
        censored = np.asarray(censored, dtype=bool)
        known, still_censored = survival.known_times(t, censored, L)
        step = np.arange(1, L + 1)[None, :] >= known[:, None]
        per_item = np.where(still_censored, 0.0, ((cdf - step) ** 2).sum(axis=1))
        T = np.where(still_censored, 0.0, known)

        def value(idx, G):
            w = survival.time_weights(t[idx], censored[idx], L, G=G)
            total = (w * T[idx]).sum()
            return [float((w * per_item[idx]).sum() / total) if total > 0 else float("nan")]

        everything = np.arange(len(t))
        crps_value = value(everything, survival.censoring_survival(t, censored, L))[0]
        if not with_se:
            return crps_value
        se = float(_bootstrap_se(t, censored, L, value)[0]) if len(t) > 1 and np.isfinite(crps_value) else float("nan")
        return crps_value, se
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
                observed=None, weights=None) -> dict[str, float]:
    """How far the labels alone move a predictor's sequence-level calibration scores.

    ``probs`` [N, L, c] stay fixed; ``draw_labels()`` returns a fresh [N, L] label draw for the
    same items from their true process (for the exact marginals: the spread of a calibrated
    predictor's scores over test sets of these items). Returns the standard deviations over
    ``redraws`` draws of the sequence-level ``ece`` and ``ece_debiased_sq`` (as in
    :func:`sequence_metrics`; the bins depend on ``probs`` only, so they are found once), keyed by
    :data:`LABEL_SD_KEYS`. The labels are drawn whole (a sequence that has ended stays ended),
    so the spread is that of real test sets, 2-3x that of labels drawn independently per
    entry (benchmarks/bench_label_noise.py). ``observed`` bool [N, L]: the scores of
    :func:`sequence_metrics` with that mask (the test split's censoring, the same for every draw);
    ``weights`` float [N, L]: its weighted scores, with the test split's weights for every draw.
    """
    if redraws < 2:
        raise ValueError(f"label_noise needs at least 2 redraws, got {redraws}")
    probs = np.asarray(probs, dtype=np.float64)
    conf, top = probs.max(axis=2), probs.argmax(axis=2)  # fixed: only the labels change
    scores = []
    for _ in range(redraws):
        _, labels = _check_probs_labels(probs, draw_labels(), 3)
        correct = (top == labels).astype(np.float64)
        scores.append(_sequence_calibration(conf, correct, n_bins, _Weights.of(labels, observed, weights)))
    return dict(zip(LABEL_SD_KEYS, map(float, np.std(np.array(scores), axis=0, ddof=1))))
