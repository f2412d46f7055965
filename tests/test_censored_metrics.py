"""Censored metrics that estimate the full-label values: the entry-level IPCW weights, the
positivity check, the known outcomes of the time-to-event metrics and their standard errors
(docs/METRICS.md, "Censored items").

Every weighted entry-level metric is checked against a plain loop (AUC against scikit-learn's
``roc_auc_score`` with ``sample_weight``); on simulated data with known truth and censoring
independent of the outcome, the exact marginals score the same under censoring as on the full
labels, where the unweighted mask (the observed items' plain means) does not.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from focus_tune.scoring import evaluation, metrics, survival
from focus_tune.scoring.evaluation import score
from focus_tune.scoring.montecarlo import Estimates

KEYS = ("ece", "ece_debiased_sq", "overconfidence", "auc", "brier", "ce")


# ----------------------------------------------------------------------------- plain loops


from test_censoring import _loop_G  # noqa: E402  the reverse Kaplan-Meier by counting, written once


def _loop_entry(p, y, w, n_bins=10, ce_eps=metrics.CE_EPS):
    """One entry's weighted metrics item by item: the bins of every item's confidence (numpy's
    quantiles, (Q_{b-1}, Q_b]), Hajek means per bin over the weighted items."""
    N, c = p.shape
    conf = [max(row) for row in p]
    correct = [float(int(np.argmax(row)) == int(y[n])) for n, row in enumerate(p)]
    edges = np.quantile(conf, np.arange(1, n_bins) / n_bins)
    W, Sc, Sa, Sc2, W2 = ([0.0] * n_bins for _ in range(5))
    for n in range(N):
        if w[n] > 0:
            b = sum(1 for e in edges if conf[n] > e)
            W[b] += w[n]
            Sc[b] += w[n] * conf[n]
            Sa[b] += w[n] * correct[n]
            Sc2[b] += w[n] * conf[n] ** 2
            W2[b] += w[n] ** 2
    gaps, debiased = [], []
    for b in range(n_bins):
        if W[b] > 0:
            a, m = Sa[b] / W[b], Sc[b] / W[b]
            v = max(Sc2[b] / W[b] - m * m, 0.0)
            n_eff = W[b] ** 2 / W2[b]
            var = (a * (1 - a) - v) / (n_eff - 1) if n_eff > 1 else m * (1 - m)
            gaps.append(abs(a - m))
            debiased.append((a - m) ** 2 - var)
    total = sum(w[n] for n in range(N) if w[n] > 0)
    keep = [n for n in range(N) if w[n] > 0]
    aucs = []
    for a in range(c):
        pos = [y[n] == a for n in keep]
        if any(pos) and not all(pos):
            aucs.append(roc_auc_score(pos, [p[n, a] for n in keep], sample_weight=[w[n] for n in keep]))
    return {
        "ece": sum(gaps) / len(gaps), "ece_debiased_sq": sum(debiased) / len(debiased),
        "overconfidence": sum(w[n] * (conf[n] - correct[n]) for n in keep) / total,
        "auc": sum(aucs) / len(aucs) if aucs else math.nan,
        "brier": sum(w[n] * sum((p[n, a] - (y[n] == a)) ** 2 for a in range(c)) for n in keep) / total,
        "ce": sum(w[n] * -math.log(max(p[n, int(y[n])], ce_eps)) for n in keep) / total,
    }


def _censored(n, L, rng, cut=0.5):
    """Sequences of 3 classes ending in the event 2 (absorbing) at a geometric time, cut
    uniformly for a fraction ``cut`` of the items: (labels, observed, times, censored)."""
    T = rng.geometric(0.2, n)
    labels = np.where(np.arange(1, L + 1)[None] >= T[:, None], 2, rng.integers(0, 2, (n, L)))
    C = np.where(rng.random(n) < cut, rng.integers(1, L + 1, n), L)
    seen = T <= C
    observed = np.arange(1, L + 1)[None] <= np.where(seen, L, C)[:, None]
    censored = ~seen & (C < L)
    return labels, observed, np.where(censored, C, np.minimum(T, L)), censored


def test_entry_weights_are_one_over_G_at_min_T_i():
    rng = np.random.default_rng(0)
    L = 8
    labels, observed, t, censored = _censored(80, L, rng)
    w = survival.entry_weights(observed, t, censored)
    for n in range(80):
        for i in range(1, L + 1):
            want = 1 / _loop_G(t, censored, min(int(t[n]), i)) if observed[n, i - 1] else 0.0
            assert w[n, i - 1] == pytest.approx(want, rel=1e-12)
    # the same G as the time-to-event weights
    np.testing.assert_allclose(metrics.ipcw_weights(t, censored),
                               [0 if c else 1 / _loop_G(t, censored, int(u)) for u, c in zip(t, censored)], rtol=1e-12)


def test_weighted_entry_metrics_are_the_plain_loops():
    rng = np.random.default_rng(1)
    N, L, c = 70, 5, 3
    probs = rng.dirichlet(np.ones(c), size=(N, L))
    probs[:10] = probs[10:20]  # ties in the confidences and the scores
    labels, observed, t, censored = _censored(N, L, rng)
    w = survival.entry_weights(observed, t, censored)
    got = metrics.sequence_metrics(probs, labels, weights=w)
    for i in range(L):
        want = _loop_entry(probs[:, i], labels[:, i], w[:, i])
        for key in KEYS:
            assert got["per_entry"][key][i] == pytest.approx(want[key], abs=1e-12, nan_ok=True), (key, i)
    for key in ("ece", "overconfidence", "brier", "ce", "ece_debiased_sq"):
        assert got[key] == pytest.approx(np.mean(got["per_entry"][key]), abs=1e-12)
    assert got["ece_debiased"] == pytest.approx(metrics.signed_root(got["ece_debiased_sq"]), abs=1e-15)
    assert metrics.sequence_ece(probs, labels, weights=w) == got["ece"]
    # the filler (labels where the weight is 0) is never read
    other = np.where(w > 0, labels, (labels + 1) % c)
    again = metrics.sequence_metrics(probs, other, weights=w, threads=3)
    assert {k: again[k] for k in KEYS} == pytest.approx({k: got[k] for k in KEYS}, abs=1e-12)
    # influences sum to the weighted score (Brier, CE, ECE)
    for key in ("ece", "brier", "ce"):
        assert metrics.item_influence(probs, labels, key, weights=w).sum() == pytest.approx(got[key], abs=1e-12)
    # the reliability curve of an entry: the loop's bins
    curve = metrics.reliability_curve(probs[:, 3], labels[:, 3], weights=w[:, 3])
    assert curve["count"].sum() == pytest.approx(w[:, 3].sum(), rel=1e-12)
    # label noise with fixed weights reads the weighted ECE of each draw
    draws = [rng.integers(0, c, labels.shape) for _ in range(3)]
    it = iter(draws)
    noise = metrics.label_noise(probs, lambda: next(it), redraws=3, weights=w)
    eces = [metrics.sequence_metrics(probs, d, weights=w)["ece"] for d in draws]
    assert noise[metrics.LABEL_SD_KEYS[0]] == pytest.approx(np.std(eces, ddof=1), abs=1e-12)


def test_unit_weights_are_the_unweighted_metrics():
    rng = np.random.default_rng(2)
    probs = rng.dirichlet(np.ones(4), size=(90, 6))
    labels = rng.integers(0, 4, (90, 6))
    ones = np.ones(labels.shape)
    plain, weighted = metrics.sequence_metrics(probs, labels), metrics.sequence_metrics(probs, labels, weights=ones)
    for key in KEYS:
        assert weighted[key] == pytest.approx(plain[key], abs=1e-12)
        np.testing.assert_allclose(weighted["per_entry"][key], plain["per_entry"][key], rtol=0, atol=1e-12)
    for key in ("ece", "ece_debiased", "brier", "ce"):
        np.testing.assert_allclose(metrics.item_influence(probs, labels, key, weights=ones),
                                   metrics.item_influence(probs, labels, key), rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- known truth


def _simulate(n, L, rng, pattern):
    """Items with their own hazard h_n and class mix r_n: before the event (class 2, absorbing)
    entry i is class 0 with probability r_n, else 1, independently; the exact marginals are
    known. Censoring independent of everything: (exact, labels, observed, times, censored)."""
    h = np.full(n, 0.15) if pattern == "constant" else rng.uniform(0.03, 0.4, n)
    r = rng.uniform(0.1, 0.9, n)
    i = np.arange(1, L + 1)
    surv = (1 - h[:, None]) ** i[None]  # P(T > i)
    exact = np.stack([surv * r[:, None], surv * (1 - r[:, None]), 1 - surv], axis=2)
    T = np.minimum(rng.geometric(h), L + 1)  # L + 1: no event
    labels = np.where(i[None] >= T[:, None], 2, np.where(rng.random((n, L)) < r[:, None], 0, 1))
    if pattern == "constant":  # the example: half the items cut uniformly
        C = np.where(rng.random(n) < 0.5, rng.integers(1, L + 1, n), L)
    elif pattern == "early":  # most items cut in the first half
        C = np.where(rng.random(n) < 0.8, rng.integers(1, L // 2 + 1, n), L)
    else:  # "geometric": every item at a constant censoring hazard
        C = np.minimum(rng.geometric(0.1, n), L)
    seen = T <= C
    observed = i[None] <= np.where(seen, L, C)[:, None]  # an event seen pads the item to L
    censored = ~seen & (C < L)
    return exact, labels, observed, np.where(censored, C, np.minimum(T, L)), censored


# About 4 standard deviations of (weighted - full) at 40,000 items, measured over 8 draws per
# pattern; the ECE's also holds its higher floor (fewer effective items at late entries).
TOLERANCE = {"ece": 0.005, "ece_debiased_sq": 1e-4, "overconfidence": 0.004, "auc": 0.006, "brier": 0.005,
             "ce": 0.008}


@pytest.mark.parametrize("pattern", ["constant", "early", "geometric"])
def test_the_exact_marginals_score_the_same_under_censoring(pattern):
    """Constant hazard 0.15, L = 12, half the items cut uniformly (and two other patterns): the
    exact marginals' metrics under censoring, IPCW-weighted, equal their values on the full
    labels within the tolerance; the observed items' plain means (the unweighted mask) lean
    toward the event class at late entries and miss by more (ECE 0.001 -> 0.029 on the first)."""
    rng = np.random.default_rng(0)
    exact, labels, observed, t, censored = _simulate(40_000, 12, rng, pattern)
    full = metrics.sequence_metrics(exact, labels)
    weighted = metrics.sequence_metrics(exact, labels, weights=survival.entry_weights(observed, t, censored))
    masked = metrics.sequence_metrics(exact, labels, observed=observed)
    for key, tol in TOLERANCE.items():
        assert abs(weighted[key] - full[key]) < tol, (key, weighted[key], full[key])
        if key != "auc" or pattern != "constant":  # one hazard for all: the mask hardly moves the AUC
            assert abs(masked[key] - full[key]) > tol, (key, masked[key], full[key])


# ----------------------------------------------------------------------------- positivity


def _estimates(n, L, rng, labels=None, c=3):
    probs = rng.dirichlet(np.ones(c), size=(n, L))
    lo = rng.integers(1, 4, n).astype(float)
    hi = lo + rng.integers(0, 6, n)
    cond = None if labels is None else rng.dirichlet(np.ones(c), size=(int((labels[:, 0] == 0).sum()), L - 1))
    return Estimates(probs, lo, hi, (lo + hi) / 2, cond, time_pmf=rng.dirichlet(np.ones(L), size=n))


def test_nobody_observed_past_an_entry_flags_every_metric_that_needs_it():
    rng = np.random.default_rng(3)
    n, L = 300, 12
    T = rng.geometric(0.1, n)
    labels = np.where(np.arange(1, L + 1)[None] >= T[:, None], 2, rng.integers(0, 2, (n, L)))
    C = rng.integers(1, 6, n)  # nobody observed past entry 5
    seen = T <= C
    observed = np.arange(1, L + 1)[None] <= np.where(seen, L, C)[:, None]
    censored = ~seen
    t = np.where(censored, C, T)
    assert survival.positivity_entry(survival.censoring_survival(t, censored, L), L) == 6
    est = _estimates(n, L, rng, labels)
    out, extras = score(est, labels, t, condition_class=0, observed=observed, censored=censored)
    assert out[survival.POSITIVITY_KEY] == 6
    for key in KEYS + ("ece_debiased",):
        assert math.isnan(out[f"marginal/{key}"]) and math.isnan(out[f"conditional/{key}"]), key
        per_entry = extras["marginal"][key]
        assert np.isnan(per_entry[5:]).all() and np.isfinite(per_entry[:5]).all(), key
    for key in ("coverage", "relative_width", "relative_mae", "interval_score", "crps", "coverage_se"):
        assert math.isnan(out[f"interval/{key}"]), key
    # no reliability curve where the weights are blocked
    result = evaluation.test_result(out, extras, est.probs, labels, 10, entries=[1, 5, 6, 12],
                         weights=survival.entry_weights(observed, t, censored))
    assert set(result["test_per_entry"]["reliability"]) == {"1", "5"}
    assert "entry 6" in survival.positivity_note(6)
    # ... where the unweighted mask reads numbers from the event items alone
    assert not math.isnan(metrics.sequence_metrics(est.probs, labels, observed=observed)["ece"])
    # Fully observed and well-censored splits have no such key.
    plain, _ = score(est, labels, t)
    assert survival.POSITIVITY_KEY not in plain


def test_g_reaching_0_at_L_blocks_entry_L_only():
    """Every item still without the event at L - 1 is cut there: entry L is unknown, but T is
    (T = L for them), so the time-to-event metrics stand."""
    rng = np.random.default_rng(4)
    n, L = 200, 8
    T = rng.geometric(0.15, n)
    labels = np.where(np.arange(1, L + 1)[None] >= T[:, None], 2, rng.integers(0, 2, (n, L)))
    seen = T <= L - 1
    observed = np.arange(1, L + 1)[None] <= np.where(seen, L, L - 1)[:, None]
    censored = ~seen
    t = np.where(censored, L - 1, T)
    est = _estimates(n, L, rng)
    out, extras = score(est, labels, t, observed=observed, censored=censored)
    assert out[survival.POSITIVITY_KEY] == L and math.isnan(out["marginal/ece"])
    assert np.isfinite(extras["marginal"]["ece"][:-1]).all()
    full, _ = score(est, labels, np.minimum(T, L))
    for key in ("coverage", "relative_width", "relative_mae", "interval_score", "crps"):
        assert out[f"interval/{key}"] == pytest.approx(full[f"interval/{key}"], rel=1e-12), key


# ----------------------------------------------------------------------------- known outcomes, noise


def test_a_censored_item_past_its_intervals_end_is_a_known_miss():
    """Four items, L = 10: an event at 3 (in [2, 4]), one censored at 6 with hi = 4 (T > 6 > 4:
    a miss, known at entry 4), one censored at 2 with hi = 4 (unknown) and one cut at 9 = L - 1
    (T = 10, in [8, 10]). G: h(2) = 1/3 (items at 6, 2 and 9 at risk), h(6) = 1/2, h(9) = 1."""
    t = np.array([3, 6, 2, 9])
    censored = np.array([False, True, True, True])
    lo, hi = np.array([2.0, 1, 1, 8]), np.array([4.0, 4, 4, 10])
    got = metrics.interval_metrics(lo, hi, (lo + hi) / 2, t, 0.9, censored, length=10)
    G4, G9 = 1 - 1 / 3, (1 - 1 / 3) * (1 - 1 / 2)
    w = np.array([1 / G4, 1 / G4, 0, 1 / G9])  # tau = min(T, hi, L - 1): 3 (G(3) = G(4)), 4, -, 9
    assert got["coverage"] == pytest.approx((w[0] + w[3]) / w.sum(), rel=1e-12)
    # Without L the cut at 9 stays censored, nobody is observed past it and G(10) = 0: flagged.
    got = metrics.interval_metrics(lo, hi, (lo + hi) / 2, t, 0.9, censored, with_se=True)
    assert math.isnan(got["coverage"]) and got[survival.POSITIVITY_KEY] == 10


def _draw_intervals(n, L, rng, cut):
    x = rng.random(n)
    p = 0.03 + 0.08 * x  # the item's hazard; its interval is its own law's central 90 %
    T = np.minimum(rng.geometric(p), L)

    def quantile(u):
        return np.minimum(np.ceil(np.log1p(-u) / np.log1p(-p)), L)

    lo, hi, point = np.maximum(quantile(0.05), 1), quantile(0.95), quantile(0.5)
    C = np.where(rng.random(n) < cut, rng.integers(1, L + 1, n), L)
    censored = C < T
    pmf = rng.dirichlet(np.ones(L), size=n)
    return lo, hi, point, np.where(censored, C, T), censored, T, pmf


def test_standard_errors_of_the_censored_time_to_event_metrics_match_their_spread():
    """100 draws of 600 items, 23 % censored: each metric's bootstrap SE (G re-estimated per
    resample) is within 25 % of the spread of the estimates over the draws, and the estimates
    are centred on the uncensored values. The keys appear on censored data only."""
    rng = np.random.default_rng(5)
    L, keys = 40, ("coverage", "relative_width", "relative_mae", "interval_score", "crps")
    got, se, full = [], [], []
    for _ in range(100):
        lo, hi, point, t, censored, T, pmf = _draw_intervals(600, L, rng, 0.7)
        est = Estimates(np.full((600, L, 2), 0.5), lo, hi, point, time_pmf=pmf)
        out, _ = score(est, np.zeros((600, L), int), t, observed=np.ones((600, L), bool), censored=censored)
        got.append([out[f"interval/{k}"] for k in keys])
        se.append([out[f"interval/{k}_se"] for k in keys])
        full.append([score(est, np.zeros((600, L), int), T)[0][f"interval/{k}"] for k in keys])
        assert 0 < out["data/effective_items"] < 600 and out["data/largest_weight"] > 1
    got, se, full = map(np.array, (got, se, full))
    spread = got.std(axis=0, ddof=1)
    for k, key in enumerate(keys):
        assert abs(se[:, k].mean() / spread[k] - 1) < 0.25, (key, se[:, k].mean(), spread[k])
        assert abs(got[:, k].mean() - full[:, k].mean()) < 4 * spread[k] / 10, key
    plain, _ = score(est, np.zeros((600, L), int), T)
    assert not any(k.endswith("_se") or k.startswith("data/") for k in plain)
