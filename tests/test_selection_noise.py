"""The noise of a stage decision: per-item influences of a validation score and the standard
error of a paired difference, against the naive paired bootstrap and the exact scores; the
encoding that carries them from a trial to the driver."""

from __future__ import annotations

import numpy as np
import pytest

from focus_tune.procedure.job import decode_influence, encode_influence
from focus_tune.scoring import metrics
from focus_tune.scoring.temperature import paired_bootstrap_se


def _tempered(q, t):
    z = np.log(q) / t
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def _pair(seed=0, n=400, length=8, c=5):
    """Two miscalibrated predictors (tempered truth, Monte Carlo frequencies of 100 draws) of the
    same labels."""
    rng = np.random.default_rng(seed)
    q = rng.dirichlet(np.full(c, 0.6), (n, length))
    labels = (q.cumsum(-1) < rng.random((n, length, 1))).sum(-1).clip(max=c - 1)

    def counted(p):
        return rng.multinomial(100, p.reshape(-1, c)).reshape(n, length, c) / 100

    return counted(_tempered(q, 0.6)), counted(_tempered(q, 1.4)), labels


@pytest.mark.parametrize("metric", list(metrics.SELECT_KEYS))
def test_influences_add_up_to_the_score_or_its_leading_term(metric):
    a, _, labels = _pair()
    psi = metrics.item_influence(a, labels, metric)
    assert psi.shape == (len(labels),)
    value = metrics.sequence_metrics(a, labels)[metrics.SELECT_KEYS[metric]]
    if metric == "ece_debiased":
        # the leading term's share: 2 x the plain squared binned error, which exceeds the debiased value
        assert psi.sum() > value > 0
    else:
        assert psi.sum() == pytest.approx(value, rel=1e-10)


@pytest.mark.parametrize("metric", list(metrics.SELECT_KEYS))
def test_difference_se_agrees_with_the_paired_bootstrap(metric):
    """The delta-method SE against the naive paired bootstrap (resample items, rescore both):
    close for the means (Brier, CE), within a factor 0.6-1.7 for the binned ECEs, whose bins
    move with the resample (docs/METRICS.md has the simulation against fresh data)."""
    a, b, labels = _pair(seed=1)
    se = metrics.difference_se(metrics.item_influence(a, labels, metric), metrics.item_influence(b, labels, metric))
    key = metrics.SELECT_KEYS[metric]

    def stat(x, idx):
        return metrics.sequence_metrics(x[idx], labels[idx])[key]

    boot = paired_bootstrap_se(stat, a, b, len(labels), reps=150, seed=2)
    low, high = (0.85, 1.2) if metric in ("brier", "ce") else (0.6, 1.7)
    assert low * boot < se < high * boot, (se, boot)


def test_difference_se_is_paired():
    """What two predictors share cancels: a predictor against itself has no noise, and a
    constant shift of every item's share neither."""
    a, _, labels = _pair(seed=3)
    psi = metrics.item_influence(a, labels, "brier")
    assert metrics.difference_se(psi, psi) == 0.0
    assert metrics.difference_se(psi, psi + 0.01) == pytest.approx(0.0, abs=1e-12)
    unpaired = np.sqrt(len(psi) * (np.var(psi, ddof=1) * 2))
    other = metrics.item_influence(_tempered(np.clip(a, 1e-3, 1), 1.1), labels, "brier")
    assert metrics.difference_se(psi, other) < 0.5 * unpaired


def test_difference_se_rejects_arrays_of_other_items():
    with pytest.raises(ValueError, match="same items"):
        metrics.difference_se(np.zeros(5), np.zeros(6))
    with pytest.raises(ValueError, match="metric must be one of"):
        metrics.item_influence(np.full((2, 1, 2), 0.5), np.zeros((2, 1), int), "auc")


def test_influences_travel_as_float32_base64():
    values = np.random.default_rng(0).normal(size=1000) * 1e-4
    text = encode_influence(values)
    assert isinstance(text, str) and len(text) < 6000
    np.testing.assert_allclose(decode_influence(text), values, rtol=1e-6)
