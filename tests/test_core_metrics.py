import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

from _reference import naive_ece, naive_sequence_metrics
from focus_tune.scoring.metrics import ece, interval_metrics, reliability_curve, rmse_to_truth, sequence_metrics


def random_probs(rng, N, L, c, alpha=1.0):
    p = rng.dirichlet(np.full(c, alpha), size=(N, L))
    y = np.array([[rng.choice(c, p=p[n, i]) for i in range(L)] for n in range(N)])
    return p, y


def test_ece_of_a_calibrated_predictor_is_near_zero():
    rng = np.random.default_rng(0)
    N, c = 200_000, 4
    p = rng.dirichlet(np.ones(c), size=N)
    u = rng.random(N)
    y = (u[:, None] > p.cumsum(1)).sum(1)  # labels drawn from the predicted distribution
    assert ece(p, y) < 0.005


def test_ece_of_an_overconfident_predictor_is_the_gap():
    # Always 90 % confident, right half of the time: ECE = 0.4 in every bin.
    N = 10_000
    p = np.tile([0.9, 0.1], (N, 1))
    y = np.arange(N) % 2
    assert ece(p, y) == pytest.approx(0.4, abs=1e-12)
    curve = reliability_curve(p, y)
    np.testing.assert_allclose(curve["confidence"], [0.9])
    np.testing.assert_allclose(curve["accuracy"], [0.5])
    assert curve["count"].sum() == N


def test_ece_bins_are_equal_mass_and_order_free():
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(3), size=1000)
    y = rng.integers(0, 3, 1000)
    assert ece(p, y) == pytest.approx(naive_ece(p, y), abs=1e-12)
    perm = rng.permutation(1000)
    assert ece(p[perm], y[perm]) == pytest.approx(ece(p, y), abs=1e-12)
    # Monte-Carlo-like ties: confidences are multiples of 1/20.
    q = np.round(p * 20) / 20
    q[:, 2] = 1 - q[:, 0] - q[:, 1]
    q = np.clip(q, 0, 1)
    q /= q.sum(1, keepdims=True)
    assert ece(q, y) == pytest.approx(naive_ece(q, y), abs=1e-12)
    counts = reliability_curve(p, y, n_bins=10)["count"]
    assert counts.min() >= 99 and counts.max() <= 101


def test_sequence_metrics_equal_sklearn_per_entry():
    rng = np.random.default_rng(2)
    N, L, c = 300, 6, 5
    p, y = random_probs(rng, N, L, c)
    y[:, 3] = 1  # an entry with a single label: AUC undefined there
    y[:5, 4] = 4
    y[5:, 4] = 0  # an entry where only classes 0 and 4 occur
    out = sequence_metrics(p, y, ce_eps=1e-300)  # no clipping: compare with sklearn's log_loss
    for i in range(L):
        aucs = [roc_auc_score(y[:, i] == a, p[:, i, a]) for a in range(c) if 0 < (y[:, i] == a).sum() < N]
        if aucs:
            assert out["per_entry"]["auc"][i] == pytest.approx(np.mean(aucs), abs=1e-9)
        else:
            assert np.isnan(out["per_entry"]["auc"][i])
        bs = np.sum([brier_score_loss(y[:, i] == a, p[:, i, a]) for a in range(c)])  # summed over classes
        assert out["per_entry"]["brier"][i] == pytest.approx(bs, abs=1e-9)
        ce = log_loss(y[:, i], p[:, i], labels=np.arange(c))
        assert out["per_entry"]["ce"][i] == pytest.approx(ce, abs=1e-9)
    assert np.isnan(out["per_entry"]["auc"][3])
    assert out["auc"] == pytest.approx(np.nanmean(out["per_entry"]["auc"]), abs=1e-12)
    for k in ("ece", "brier", "ce"):
        assert out[k] == pytest.approx(out["per_entry"][k].mean(), abs=1e-12)


def test_sequence_metrics_equal_naive_reference_with_ties_and_zeros():
    rng = np.random.default_rng(3)
    N, L, c, M = 400, 7, 4, 25
    counts = rng.multinomial(M, [0.5, 0.3, 0.15, 0.05], size=(N, L))
    p = counts / M  # Monte Carlo frequencies: ties and exact zeros
    y = rng.integers(0, c, (N, L))
    fast, slow = sequence_metrics(p, y), naive_sequence_metrics(p, y)
    for k in ("ece", "auc", "brier", "ce"):
        np.testing.assert_allclose(fast["per_entry"][k], slow["per_entry"][k], atol=1e-9, rtol=0)
        assert fast[k] == pytest.approx(slow[k], abs=1e-9)


def test_cross_entropy_clips_zero_probabilities():
    p = np.array([[[1.0, 0.0]], [[0.5, 0.5]]])
    y = np.array([[1], [0]])
    out = sequence_metrics(p, y, ce_eps=1e-3)
    assert out["ce"] == pytest.approx((-np.log(1e-3) - np.log(0.5)) / 2)


def test_interval_metrics_by_hand():
    lo, hi = np.array([0, 5, 10.0]), np.array([4, 9, 20.0])
    point = np.array([2, 6, 15.0])
    t = np.array([3, 10, 20.0])  # inside, outside, on the edge
    out = interval_metrics(lo, hi, point, t)
    assert out["coverage"] == pytest.approx(2 / 3)
    assert out["relative_width"] == pytest.approx(np.mean([4, 4, 10]) / np.mean(t))
    assert out["relative_mae"] == pytest.approx((1 + 4 + 5) / 33)


def test_rmse_to_truth_and_shape_errors():
    assert rmse_to_truth(np.array([[[0.5, 0.5]]]), np.array([[[0.2, 0.8]]])) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="shape"):
        rmse_to_truth(np.zeros((1, 1, 3)), np.zeros((1, 1, 4)))
    with pytest.raises(ValueError, match=r"\[N, L, c\]"):
        rmse_to_truth(np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="match"):
        sequence_metrics(np.zeros((2, 3, 4)), np.zeros((2, 4), dtype=int))
    with pytest.raises(ValueError, match="NaN"):
        ece(np.full((2, 2), np.nan), np.zeros(2, dtype=int))
