"""The calibration and time-to-event metrics that have no finite-sample floor or reward.

Debiased ECE, overconfidence, interval score and CRPS (focus_tune/scoring/metrics.py): known
answers (by enumeration, by simulation, by hand) and the fast code against the slow loops of
tests/_reference.py.
"""

import itertools

import numpy as np
import pytest

from _reference import (
    naive_crps,
    naive_ece_debiased_squared,
    naive_interval_score,
    naive_overconfidence,
    naive_sequence_metrics,
)
from focus_tune.scoring.metrics import (
    LABEL_SD_KEYS,
    crps,
    ece,
    ece_debiased,
    ece_debiased_squared,
    interval_metrics,
    label_noise,
    sequence_metrics,
    signed_root,
)
from focus_tune.scoring.montecarlo import interval, time_pmf


def binary(conf):
    """Two-class predictions whose top class is class 0 with confidence conf [N] (>= 0.5)."""
    return np.stack([conf, 1 - conf], axis=1)


def expected_ece_debiased(conf, q, n_bins):
    """E[ece_debiased_squared] by enumerating all 2^N label vectors; item n is right with probability q[n]."""
    probs = binary(conf)
    total = 0.0
    for right in itertools.product([0, 1], repeat=len(conf)):
        right = np.array(right)
        weight = np.prod(np.where(right == 1, q, 1 - q))
        total += weight * ece_debiased_squared(probs, 1 - right, n_bins)  # label 0 = the top class
    return total


@pytest.mark.parametrize("n_bins", [1, 2, 3, 7])
def test_debiased_ece_of_a_calibrated_predictor_is_zero_in_expectation_exactly(n_bins):
    # 7 items of different confidences (bins of 7, 4+3, 3+2+2, and 7 singletons): the
    # expectation over every label vector is 0, not just small, whatever the bin sizes
    # and the spread of confidences in a bin; the paper's ECE is biased upwards.
    conf = np.array([0.5, 0.55, 0.62, 0.7, 0.81, 0.9, 0.97])
    assert expected_ece_debiased(conf, conf, n_bins) == pytest.approx(0.0, abs=1e-12)
    paper = sum(
        np.prod(np.where(np.array(r) == 1, conf, 1 - conf)) * ece(binary(conf), 1 - np.array(r), n_bins)
        for r in itertools.product([0, 1], repeat=len(conf))
    )
    assert paper > 0.05


def test_debiased_ece_of_a_constant_gap_is_the_squared_gap_exactly():
    # Every item is right with probability conf - 0.1: every bin's gap is -0.1 and the
    # spread of the probabilities equals that of the confidences, so E = 0.1^2 exactly.
    conf = np.array([0.6, 0.65, 0.7, 0.8, 0.85, 0.95])
    assert expected_ece_debiased(conf, conf - 0.1, 2) == pytest.approx(0.01, abs=1e-12)


def draw_columns(rng, N, R, alpha=0.5, c=4):
    """R independent repetitions as R entries: predictions [N, R, c] and labels drawn from them."""
    p = rng.dirichlet(np.full(c, alpha), size=(N, R))
    y = (rng.random((N, R, 1)) > p.cumsum(-1)).sum(-1).clip(max=c - 1)
    return p, y


@pytest.mark.parametrize("N", [250, 1000])
def test_debiased_ece_of_calibrated_predictions_is_zero_within_a_few_standard_errors(N):
    rng = np.random.default_rng(N)
    R = 200
    p, y = draw_columns(rng, N, R)
    out = sequence_metrics(p, y)
    deb, paper = out["per_entry"]["ece_debiased_sq"], out["per_entry"]["ece"]
    assert abs(deb.mean()) < 4 * deb.std(ddof=1) / np.sqrt(R)
    assert paper.mean() > 0.02 and paper.mean() > 20 * paper.std(ddof=1) / np.sqrt(R)  # the paper's floor
    assert (deb < 0).any()  # not clipped: negative values keep the mean unbiased
    assert out["ece_debiased_sq"] == pytest.approx(deb.mean(), abs=1e-15)
    # On the ECE's scale: the signed root of the entries' mean, about 0 where the paper's ECE is > 0.02.
    assert out["ece_debiased"] == pytest.approx(signed_root(deb.mean()), abs=1e-15)
    assert abs(out["ece_debiased"]) < 0.25 * paper.mean()
    np.testing.assert_allclose(out["per_entry"]["ece_debiased"], signed_root(deb))


def test_debiased_ece_of_a_known_miscalibration_by_simulation():
    # Two classes, confidence c ~ U(0.6, 0.95), right with probability c - 0.05: the true
    # squared binned error is 0.05^2 = 0.0025 in every bin.
    rng = np.random.default_rng(7)
    N, R = 250, 200
    conf = rng.uniform(0.6, 0.95, size=(N, R))
    p = np.stack([conf, 1 - conf], axis=-1)
    y = (rng.random((N, R)) >= conf - 0.05).astype(int)  # 0 (the top class) with probability c - 0.05
    out = sequence_metrics(p, y)
    deb = out["per_entry"]["ece_debiased_sq"]
    assert abs(deb.mean() - 0.0025) < 4 * deb.std(ddof=1) / np.sqrt(R)
    assert abs(out["ece_debiased"] - 0.05) < 0.005  # the gap itself, on the ECE's scale


def test_debiased_ece_equals_the_naive_loop():
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(3), size=500)
    y = rng.integers(0, 3, 500)
    assert ece_debiased_squared(p, y) == pytest.approx(naive_ece_debiased_squared(p, y), abs=1e-12)
    assert ece_debiased(p, y) == pytest.approx(signed_root(naive_ece_debiased_squared(p, y)), abs=1e-12)
    q = rng.multinomial(20, [0.6, 0.3, 0.1], size=500) / 20  # Monte Carlo ties: uneven and empty bins
    assert ece_debiased_squared(q, y, 10) == pytest.approx(naive_ece_debiased_squared(q, y, 10), abs=1e-12)
    few = p[:6]  # more bins than items: singleton and empty bins
    assert ece_debiased_squared(few, y[:6], 10) == pytest.approx(naive_ece_debiased_squared(few, y[:6], 10), abs=1e-12)


def test_new_keys_of_sequence_metrics_equal_the_naive_reference():
    rng = np.random.default_rng(4)
    N, L, c, M = 300, 6, 4, 25
    p = rng.multinomial(M, [0.5, 0.3, 0.15, 0.05], size=(N, L)) / M
    y = rng.integers(0, c, (N, L))
    fast, slow = sequence_metrics(p, y), naive_sequence_metrics(p, y)
    for k in ("ece_debiased_sq", "overconfidence"):
        assert fast["per_entry"][k].shape == (L,)
        np.testing.assert_allclose(fast["per_entry"][k], slow["per_entry"][k], atol=1e-12, rtol=0)
        assert fast[k] == pytest.approx(fast["per_entry"][k].mean(), abs=1e-15)
        assert fast[k] == pytest.approx(slow[k], abs=1e-12)


def test_overconfidence_by_hand_and_its_sign():
    # (0.9 - 1) + (0.6 - 0) over 2 items = 0.25: the second item's top class (0) is wrong.
    p = np.array([[[0.9, 0.1]], [[0.6, 0.4]]])
    out = sequence_metrics(p, np.array([[0], [1]]))
    assert out["overconfidence"] == pytest.approx(0.25, abs=1e-15)
    assert naive_overconfidence(p[:, 0], np.array([0, 1])) == pytest.approx(0.25, abs=1e-15)

    rng = np.random.default_rng(5)
    R = 50
    p, y = draw_columns(rng, 1000, R, alpha=1.0)

    def temper(t):
        z = p ** (1 / t)
        return z / z.sum(-1, keepdims=True)

    def mean_and_se(probs):
        v = sequence_metrics(probs, y)["per_entry"]["overconfidence"]
        return v.mean(), v.std(ddof=1) / np.sqrt(R)

    m, se = mean_and_se(p)
    assert abs(m) < 4 * se  # calibrated
    m, se = mean_and_se(temper(0.5))  # sharpened: overconfident
    assert m > 0.05 and m > 10 * se
    m, se = mean_and_se(temper(2.0))  # softened: underconfident
    assert m < -0.05 and m < -10 * se


def test_interval_score_by_hand():
    lo, hi = np.array([0, 5, 10, 5.0]), np.array([4, 9, 20, 9.0])
    point = np.array([2, 7, 15, 7.0])
    t = np.array([3, 10, 20, 2.0])  # inside, above by 1, on the upper edge, below by 3
    # alpha = 0.9: 2 / (1 - alpha) = 20. Scores 4, 4 + 20*1, 10, 4 + 20*3 -> mean 102/4; mean T = 35/4.
    out = interval_metrics(lo, hi, point, t)
    assert out["interval_score"] == pytest.approx(102 / 35)
    assert naive_interval_score(lo, hi, t) == pytest.approx(102 / 35)
    # alpha = 0.5: 2 / (1 - alpha) = 4. Scores 4, 8, 10, 16 -> 38 / 35.
    assert interval_metrics(lo, hi, point, t, alpha=0.5)["interval_score"] == pytest.approx(38 / 35)
    assert out["coverage"] == pytest.approx(0.5)  # the old keys are unchanged
    with pytest.raises(ValueError, match="alpha"):
        interval_metrics(lo, hi, point, t, alpha=1.0)


def test_interval_score_equals_the_naive_loop():
    rng = np.random.default_rng(6)
    times = rng.integers(1, 60, size=(200, 100))
    t = rng.integers(1, 60, size=200)
    lo, hi = interval(times, 0.8)
    fast = interval_metrics(lo, hi, times.mean(1), t, alpha=0.8)["interval_score"]
    assert fast == pytest.approx(naive_interval_score(lo, hi, t, alpha=0.8), abs=1e-12)


def test_crps_of_a_point_mass_is_the_absolute_error():
    L = 10
    k = np.array([1, 4, 10, 7, 3])
    t = np.array([1, 7, 2, 7, 10])
    pmf = np.eye(L)[k - 1]  # all mass at t = k
    assert crps(pmf, t) == pytest.approx(np.abs(k - t).mean() / t.mean(), abs=1e-15)
    assert crps(pmf[[0]], t[[0]]) == 0.0  # right on the truth


def test_crps_by_hand_and_equal_to_the_sample_formula():
    # Mass 1/2 at 1 and at 3, T = 2, L = 3: F = (0.5, 0.5, 1), 1[T <= k] = (0, 1, 1)
    # -> 0.25 + 0.25 + 0 = 0.5; samples: E|X - T| = 1, E|X - X'| = 1 -> 1 - 1/2 = 0.5. / T = 0.25.
    assert crps(np.array([[0.5, 0.0, 0.5]]), [2]) == pytest.approx(0.25)
    assert naive_crps(np.array([[1, 3]]), np.array([2])) == pytest.approx(0.25)

    rng = np.random.default_rng(8)
    L = 30
    times = np.minimum(rng.geometric(0.1, size=(50, 40)), L)  # censored at L, like time_to_event
    t = np.minimum(rng.geometric(0.1, size=50), L)
    assert crps(time_pmf(times, L), t) == pytest.approx(naive_crps(times, t), abs=1e-12)


def test_crps_rejects_what_is_not_a_distribution_on_1_to_L():
    with pytest.raises(ValueError, match="distribution"):
        crps(np.array([[0.5, 0.4]]), [1])
    with pytest.raises(ValueError, match="integers"):
        crps(np.array([[0.5, 0.5]]), [3])
    with pytest.raises(ValueError, match="integers"):
        crps(np.array([[0.5, 0.5]]), [1.5])
    with pytest.raises(ValueError, match=r"\[N, L\]"):
        crps(np.array([0.5, 0.5]), [1])


def test_time_pmf_counts_sampled_times():
    times = np.array([[1, 2, 2, 5], [3, 3, 3, 3]])
    np.testing.assert_array_equal(time_pmf(times, 5), [[0.25, 0.5, 0, 0, 0.25], [0, 0, 1, 0, 0]])
    rng = np.random.default_rng(9)
    big = rng.integers(1, 21, size=(100, 37))
    pmf = time_pmf(big, 20)
    np.testing.assert_allclose(pmf.sum(1), 1.0)
    for n in range(0, 100, 17):
        np.testing.assert_array_equal(pmf[n], np.bincount(big[n] - 1, minlength=20) / 37)
    with pytest.raises(ValueError, match="integers"):
        time_pmf(np.array([[0, 1]]), 5)
    with pytest.raises(ValueError, match="integers"):
        time_pmf(np.array([[6, 1]]), 5)
    with pytest.raises(ValueError, match=r"\[N, M\]"):
        time_pmf(np.array([1, 2]), 5)


def test_label_noise_is_the_spread_of_the_scores_over_the_draws():
    rng = np.random.default_rng(5)
    probs = rng.dirichlet(np.ones(3), size=(60, 4))
    draws = [rng.integers(0, 3, (60, 4)) for _ in range(3)]
    it = iter(draws)
    noise = label_noise(probs, lambda: next(it), redraws=3)
    by_hand = [sequence_metrics(probs, y) for y in draws]
    for key, name in zip(LABEL_SD_KEYS, ("ece", "ece_debiased_sq")):
        assert noise[key] == pytest.approx(np.std([m[name] for m in by_hand], ddof=1))
    with pytest.raises(ValueError, match="2 redraws"):
        label_noise(probs, lambda: draws[0], redraws=1)
    same = label_noise(probs, lambda: draws[0], redraws=4)  # the same labels every time: no spread
    assert all(v == 0 for v in same.values())

