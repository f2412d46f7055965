"""Split conformal intervals (focus_tune.scoring.conformal): against a plain reference, and their
coverage guarantee on simulated exchangeable data, with and without censoring."""

from __future__ import annotations

import math

import numpy as np
import pytest

from focus_tune.scoring import conformal
from focus_tune.scoring.evaluation import conformal_scores, time_to_event_scores
from focus_tune.scoring.montecarlo import estimates_from_distributions

L = 30


def geometric_pmf(hazard: np.ndarray, sharpen: float = 1.0) -> np.ndarray:
    """P(T = t), t = 1..L, of a constant per-item hazard (T = L takes the rest), raised to
    ``sharpen`` and renormalised (> 1: an overconfident model)."""
    t = np.arange(1, L + 1)
    p = (1 - hazard[:, None]) ** (t - 1) * hazard[:, None]
    p[:, -1] = 1 - p[:, :-1].sum(axis=1)
    p = p ** sharpen
    return p / p.sum(axis=1, keepdims=True)


def draw(rng: np.random.Generator, n: int, sharpen: float = 2.0):
    """n exchangeable items: the model's pmf (overconfident) and a true time from the truth."""
    hazard = rng.uniform(0.05, 0.3, size=n)
    truth = np.cumsum(geometric_pmf(hazard), axis=1)
    times = 1 + (rng.random(n)[:, None] > truth).sum(axis=1)
    return geometric_pmf(hazard, sharpen), np.minimum(times, L)


# ----------------------------------------------------------------------------- plain reference


def reference_score(pmf_row, t: int) -> float:
    F_prev, F_t = sum(pmf_row[: t - 1]), sum(pmf_row[:t])
    return max(1 - 2 * F_t, 2 * F_prev - 1, 0.0)


def reference_level(scores, alpha: float) -> float:
    ordered = sorted(scores)
    k = math.ceil((len(ordered) + 1) * alpha)
    return ordered[k - 1] if k <= len(ordered) else math.inf


def reference_interval(pmf_row, level: float) -> tuple[int, int]:
    inside = [t for t in range(1, len(pmf_row) + 1) if reference_score(pmf_row, t) <= level]
    return (inside[0], inside[-1]) if inside else (1, len(pmf_row))


def test_against_the_plain_reference():
    rng = np.random.default_rng(0)
    val_pmf, val_t = draw(rng, 40)
    test_pmf, _ = draw(rng, 25)
    s = conformal.scores(val_pmf, val_t)
    assert np.allclose(s, [reference_score(p, t) for p, t in zip(val_pmf, val_t)], atol=1e-12)
    q = conformal.conformal_level(s, 0.9)
    assert q == reference_level(list(s), 0.9)
    lo, hi = conformal.intervals(test_pmf, q)
    assert [(int(a), int(b)) for a, b in zip(lo, hi)] == [reference_interval(p, q) for p in test_pmf]
    assert conformal.calibrate(val_pmf, val_t, 0.9) == (q, 40.0)


def test_unit_weights_and_small_samples():
    s = np.random.default_rng(1).random(50)
    assert conformal.conformal_level(s, 0.9, np.ones(50)) == conformal.conformal_level(s, 0.9)
    assert conformal.conformal_level(s[:8], 0.9) == math.inf  # ceil(9 * 0.9) = 9 > 8 items
    lo, hi = conformal.intervals(geometric_pmf(np.full(3, 0.2)), math.inf)
    assert lo.tolist() == [1, 1, 1] and hi.tolist() == [L, L, L]
    with pytest.raises(ValueError, match="true_times"):
        conformal.scores(geometric_pmf(np.full(3, 0.2)), np.array([1, 2, L + 1]))


def test_the_nominal_level_is_the_estimators_interval():
    """At level alpha the conformal family's interval is the pmf's own central interval
    (montecarlo.estimates_from_distributions): calibration only moves the level."""
    pmf, _ = draw(np.random.default_rng(2), 500)
    est = estimates_from_distributions(np.zeros((500, L, 2)), pmf, None, 0.9)
    lo, hi = conformal.intervals(pmf, 0.9)
    assert np.array_equal(lo, est.lo) and np.array_equal(hi, est.hi)


def test_coverage_guarantee_on_exchangeable_data():
    """Over 300 draws of a 250-item validation and a 1000-item test split from one
    population, the conformal interval of an overconfident model covers at least 0.9 on
    average (up to the Monte Carlo error of the 300 draws) and at most 0.9 + 1/(n + 1) plus
    the discreteness of T, while its uncalibrated I_0.9 covers far less."""
    rng = np.random.default_rng(3)
    n_val, reps = 250, 300
    raw, calibrated = [], []
    for _ in range(reps):
        val_pmf, val_t = draw(rng, n_val)
        test_pmf, test_t = draw(rng, 1000)
        q, _ = conformal.calibrate(val_pmf, val_t, 0.9)
        lo, hi = conformal.intervals(test_pmf, q)
        calibrated.append(np.mean((test_t >= lo) & (test_t <= hi)))
        lo0, hi0 = conformal.intervals(test_pmf, 0.9)
        raw.append(np.mean((test_t >= lo0) & (test_t <= hi0)))
    mean, se = np.mean(calibrated), np.std(calibrated, ddof=1) / math.sqrt(reps)
    assert mean >= 0.9 - 3 * se
    assert mean <= 0.9 + 1 / (n_val + 1) + 0.02
    assert np.mean(raw) < 0.86  # the uncalibrated interval misses its level


def test_ipcw_calibration_under_independent_censoring():
    """Censored validation items (censoring independent of T and the item): the IPCW-weighted
    level brings the test coverage of the true times to 0.9 (asymptotically: a large split),
    while dropping the censored items (unweighted) undercovers: the late times they hide are
    the ones the interval must reach."""
    rng = np.random.default_rng(4)
    weighted, dropped = [], []
    for _ in range(40):
        val_pmf, val_t = draw(rng, 4000)
        cut = rng.integers(1, 2 * L, size=len(val_t))  # observed entries 1..cut
        censored = cut < val_t
        seen_t = np.where(censored, cut, val_t)
        test_pmf, test_t = draw(rng, 4000)
        for out, q in ((weighted, conformal.calibrate(val_pmf, seen_t, 0.9, censored)[0]),
                       (dropped, conformal.calibrate(val_pmf[~censored], val_t[~censored], 0.9)[0])):
            lo, hi = conformal.intervals(test_pmf, q)
            out.append(np.mean((test_t >= lo) & (test_t <= hi)))
    assert abs(np.mean(weighted) - 0.9) < 0.01
    assert np.mean(dropped) < np.mean(weighted) - 0.01


def test_conformal_row_moves_the_interval_only():
    rng = np.random.default_rng(5)
    pmf, times = draw(rng, 300)
    est = estimates_from_distributions(np.zeros((300, L, 2)), pmf, None, 0.9)
    own = time_to_event_scores(est, times, 0.9)
    row = conformal_scores(est, times, 0.9, 250.0, 0.9)
    assert row["interval/conformal_level"] == 0.9 and row["interval/conformal_items"] == 250.0
    assert {k: row[k] for k in own} == own  # at the nominal level: the row itself
    wider = conformal_scores(est, times, 0.97, 250.0, 0.9)
    assert wider["interval/relative_mae"] == own["interval/relative_mae"]
    assert wider["interval/crps"] == own["interval/crps"]
    assert wider["interval/relative_width"] > own["interval/relative_width"]
    assert wider["interval/coverage"] >= own["interval/coverage"]
