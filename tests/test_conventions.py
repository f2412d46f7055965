"""The paper's conventions, pinned against values computed by hand in the comments.

Brier summed over classes; RMSE to the exact marginals per entry, then averaged over entries;
time to event T = min{i : Y_i = event} counted from 1 (T = L when the event does not occur),
identical in the Monte Carlo estimator and in the stored datasets, whose format version
makes caches of the old convention rebuild.
"""

import json

import numpy as np
import pytest

from focus_tune import data
from focus_tune.data import dataset_format, ensure_dataset, is_current, load_dataset, sequences
from focus_tune.errors import DataError
from focus_tune.scoring.metrics import rmse_per_entry, rmse_to_truth, sequence_metrics
from focus_tune.scoring.montecarlo import time_to_event as sampled_time_to_event


def test_brier_is_summed_over_classes():
    # 2 items, 1 entry, 3 classes.
    # item 0: p = (0.5, 0.3, 0.2), y = 0: (0.5-1)^2 + 0.3^2 + 0.2^2 = 0.25 + 0.09 + 0.04 = 0.38
    # item 1: p = (0.1, 0.1, 0.8), y = 1: 0.1^2 + (0.1-1)^2 + 0.8^2 = 0.01 + 0.81 + 0.64 = 1.46
    # Brier = (0.38 + 1.46) / 2 = 0.92 (a mean over classes would give 0.92 / 3).
    p = np.array([[[0.5, 0.3, 0.2]], [[0.1, 0.1, 0.8]]])
    y = np.array([[0], [1]])
    out = sequence_metrics(p, y)
    assert out["brier"] == pytest.approx(0.92, abs=1e-12)
    assert out["per_entry"]["brier"][0] == pytest.approx(0.92, abs=1e-12)


def test_brier_of_a_sure_wrong_prediction_is_two():
    # p = one-hot on class 0, y = 1: 1^2 + 1^2 = 2 (the maximum of the summed score).
    out = sequence_metrics(np.array([[[1.0, 0.0, 0.0, 0.0]]]), np.array([[1]]))
    assert out["brier"] == pytest.approx(2.0)


def test_rmse_is_per_entry_then_averaged():
    # 2 items, 2 entries, 2 classes. Errors p - exact:
    #   entry 1: item 0 (+0.1, -0.1), item 1 (+0.1, -0.1) -> mean square 0.01 -> RMSE 0.1
    #   entry 2: item 0 (+0.3, -0.3), item 1 (-0.3, +0.3) -> mean square 0.09 -> RMSE 0.3
    # per entry then averaged: (0.1 + 0.3) / 2 = 0.2; pooled it would be sqrt(0.05) = 0.2236.
    exact = np.array([[[0.5, 0.5], [0.5, 0.5]], [[0.2, 0.8], [0.6, 0.4]]])
    probs = np.array([[[0.6, 0.4], [0.8, 0.2]], [[0.3, 0.7], [0.3, 0.7]]])
    np.testing.assert_allclose(rmse_per_entry(probs, exact), [0.1, 0.3], atol=1e-12)
    assert rmse_to_truth(probs, exact) == pytest.approx(0.2, abs=1e-12)
    assert rmse_to_truth(probs, exact) != pytest.approx(np.sqrt(0.05), abs=1e-3)


def test_time_to_event_counts_from_one_in_samples_and_in_the_store():
    # event class 2, L = 5:
    #   [2, 0, 0, 0, 0] -> event at the first entry: T = 1
    #   [0, 1, 2, 2, 2] -> T = 3
    #   [0, 0, 0, 0, 2] -> event at the last entry: T = 5 = L
    #   [0, 1, 0, 1, 0] -> no event within L: censored, T = L = 5
    seqs = np.array([[2, 0, 0, 0, 0], [0, 1, 2, 2, 2], [0, 0, 0, 0, 2], [0, 1, 0, 1, 0]])
    expected = [1, 3, 5, 5]
    assert sequences.time_to_event(seqs, 2).tolist() == expected
    assert data.time_to_event(seqs, 2).tolist() == expected
    # The Monte Carlo estimator: the same rows as M = 4 samples of one item.
    assert sampled_time_to_event(seqs[None], 2).tolist() == [expected]


def _facemed_smoke(root):
    return ensure_dataset("facemed", "smoke", root)


def test_stored_time_to_event_uses_the_convention_and_is_verified(tmp_path):
    ds = load_dataset(_facemed_smoke(tmp_path))
    s = ds.train
    # Hand rule, item by item: 1 + index of the first dead entry, L if none.
    for seq, t in zip(s.sequences, s.time_to_event):
        dead = [i for i, y in enumerate(seq.tolist()) if y == ds.manifest.event_class]
        assert t == (dead[0] + 1 if dead else len(seq))
    assert ds.manifest.format_version == dataset_format.FORMAT_VERSION == 2


def test_a_cache_of_the_old_format_is_rebuilt(tmp_path):
    folder = _facemed_smoke(tmp_path)
    manifest = folder / dataset_format.MANIFEST
    raw = json.loads(manifest.read_text())
    raw["format_version"] = 1  # a dataset written before time_to_event counted from 1
    manifest.write_text(json.dumps(raw))
    assert not is_current(folder, "facemed", "smoke")
    with pytest.raises(DataError, match="format_version 1 is not 2; rebuild or re-import"):
        load_dataset(folder)
    assert ensure_dataset("facemed", "smoke", tmp_path) == folder
    rebuilt = load_dataset(folder)
    assert rebuilt.manifest.format_version == 2
    t = rebuilt.test.time_to_event
    assert t.min() >= 1 and t.max() <= rebuilt.manifest.length
