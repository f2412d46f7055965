"""The one weighted path of the entry-level metrics and its fast path (focus_tune/scoring/metrics.py,
``_Weights``): weights of 1 and an all-True mask are the fast path bit for bit; the weighted
implementation, forced on unit weights, agrees with the fast path; a mask is a weight of 0 or 1
that leaves the item out altogether (its prediction too), where IPCW weights of 0 keep the
item's prediction in the ECE's bins. Each checked against the plain loop of
tests/test_censored_metrics.py."""

from __future__ import annotations

import numpy as np
import pytest

from focus_tune.scoring import metrics
from test_censored_metrics import KEYS, _loop_entry

SHARE_METRICS = ("ece", "ece_debiased", "brier", "ce")


def _case(seed: int, N: int = 120, L: int = 6, c: int = 9, M: int = 20):
    """Monte Carlo frequencies (ties, exact zeros), their labels, and a prefix mask that leaves
    the last entry to a single item."""
    rng = np.random.default_rng(seed)
    base = rng.dirichlet(np.full(c, 0.4), size=(N, L))
    probs = rng.multinomial(M, base.reshape(-1, c)).reshape(N, L, c) / M
    labels = (rng.random((N, L, 1)) > base.cumsum(-1)).sum(-1).clip(max=c - 1)
    observed = np.arange(L)[None, :] < rng.integers(1, L + 1, N)[:, None]
    observed[:, -1] = False
    observed[0, -1] = True
    return probs, labels, observed, rng


def _same(a: dict, b: dict) -> bool:
    """Every sequence-level value and per-entry array equal, NaN to NaN: bit for bit."""
    return (a.keys() == b.keys() and a["per_entry"].keys() == b["per_entry"].keys()
            and all(np.array_equal(a["per_entry"][k], b["per_entry"][k], equal_nan=True) for k in a["per_entry"])
            and all(a[k] == b[k] or (np.isnan(a[k]) and np.isnan(b[k])) for k in a if k != "per_entry"))


@pytest.mark.parametrize("threads", [1, 3])
def test_weights_of_one_and_an_all_true_mask_are_the_fast_path_bit_for_bit(threads):
    probs, labels, _, rng = _case(0)
    ones, everything = np.ones(labels.shape), np.ones(labels.shape, bool)
    plain = metrics.sequence_metrics(probs, labels, threads=threads)
    assert _same(metrics.sequence_metrics(probs, labels, threads=threads, weights=ones), plain)
    assert _same(metrics.sequence_metrics(probs, labels, threads=threads, observed=everything), plain)
    assert metrics.sequence_ece(probs, labels, weights=ones) == metrics.sequence_ece(probs, labels) == plain["ece"]
    for metric in SHARE_METRICS:
        fast = metrics.item_influence(probs, labels, metric)
        assert np.array_equal(metrics.item_influence(probs, labels, metric, weights=ones), fast)
        assert np.array_equal(metrics.item_influence(probs, labels, metric, observed=everything), fast)
    draws = [rng.integers(0, labels.max() + 1, labels.shape) for _ in range(3)]
    noise = [metrics.label_noise(probs, iter(draws).__next__, redraws=3, **kw)
             for kw in ({}, {"weights": ones}, {"observed": everything})]
    assert noise[0] == noise[1] == noise[2]


def test_the_weighted_implementation_on_unit_weights_agrees_with_the_fast_path():
    """Forced through the weighted implementation (entry by entry, Hajek sums), weights of 1
    give the fast path's ECEs bit for bit and the rest to rounding (other summation orders)."""
    probs, labels, _, _ = _case(1)
    fast = metrics.sequence_metrics(probs, labels)
    forced = metrics._Weights(weights=np.ones(labels.shape))
    assert not forced.unit

    def values(p, y, w):
        return metrics._weighted_entry(p, y, w, 10, metrics.CE_EPS)

    weighted = metrics._per_entry(values, (probs, labels), metrics.ENTRY_KEYS, forced)
    for key in ("ece", "ece_debiased_sq", "ece_debiased"):
        assert np.array_equal(weighted[key], fast["per_entry"][key]), key
    for key in KEYS:
        np.testing.assert_allclose(weighted[key], fast["per_entry"][key], rtol=0, atol=1e-12, err_msg=key)


def test_a_mask_is_a_weight_of_0_or_1_that_leaves_the_item_out():
    probs, labels, observed, _ = _case(2)
    masked = metrics.sequence_metrics(probs, labels, observed=observed, threads=3)
    weighted = metrics.sequence_metrics(probs, labels, weights=observed.astype(np.float64), threads=3)
    L = labels.shape[1]
    for i in range(L):
        rows = observed[:, i]
        # Under the mask the entry is the fast path over its observed items, bit for bit ...
        alone = metrics.sequence_metrics(probs[rows, i : i + 1], labels[rows, i : i + 1])["per_entry"]
        assert all(np.array_equal(masked["per_entry"][k][i : i + 1], alone[k], equal_nan=True) for k in KEYS), i
        # ... the plain loop over those items alone; weights of 0 keep every prediction in the bins.
        without = _loop_entry(probs[rows, i], labels[rows, i], np.ones(rows.sum()))
        within = _loop_entry(probs[:, i], labels[:, i], observed[:, i].astype(np.float64))
        for key in KEYS:
            assert masked["per_entry"][key][i] == pytest.approx(without[key], abs=1e-12, nan_ok=True), (key, i)
            assert weighted["per_entry"][key][i] == pytest.approx(within[key], abs=1e-12, nan_ok=True), (key, i)
        # Only the ECE's bins tell the two apart.
        for key in ("overconfidence", "auc", "brier", "ce"):
            assert weighted["per_entry"][key][i] == pytest.approx(masked["per_entry"][key][i], abs=1e-12,
                                                                  nan_ok=True), (key, i)
    assert np.isnan(masked["per_entry"]["auc"][-1]) and not np.isnan(masked["per_entry"]["ece"][-1])
    # The sequence-level scores read the same entries the same way.
    assert metrics.sequence_ece(probs, labels, observed=observed) == masked["ece"]
    assert metrics.sequence_ece(probs, labels, weights=observed.astype(np.float64)) == weighted["ece"]
    for metric in ("ece", "brier", "ce"):
        for kw, score in (({"observed": observed}, masked), ({"weights": observed.astype(np.float64)}, weighted)):
            assert metrics.item_influence(probs, labels, metric, **kw).sum() == pytest.approx(score[metric], abs=1e-12)


def test_threads_do_not_change_the_weighted_or_masked_numbers():
    probs, labels, observed, rng = _case(3)
    weights = np.where(observed, rng.exponential(1.0, observed.shape), 0.0)
    for kw in ({"observed": observed}, {"weights": weights}):
        assert _same(metrics.sequence_metrics(probs, labels, threads=1, **kw),
                     metrics.sequence_metrics(probs, labels, threads=4, **kw))
    blocked = weights.copy()
    blocked[:, 2] = np.nan  # the positivity check: that entry and every sequence value NaN
    out = metrics.sequence_metrics(probs, labels, weights=blocked, threads=2)
    assert all(np.isnan(out[k]) for k in KEYS) and all(np.isnan(out["per_entry"][k][2]) for k in KEYS)
    assert not np.isnan(out["per_entry"]["ece"][0])
    assert np.isnan(metrics.item_influence(probs, labels, "ece", weights=blocked)).all()
