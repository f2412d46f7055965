"""benchmarks/bench_censoring_curve.py: the measurement behind scoring a split with its own
censoring survival G (docs/METRICS.md, 'Positivity'), at a size a test affords."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_censoring_curve", ROOT / "benchmarks" /
                                                  "bench_censoring_curve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_population_values_are_the_full_labels_of_many_items():
    bench = _bench()
    truth = bench.population()
    labels, observed, t, censored = bench.draw(np.random.default_rng(0), 200_000, 0.0)
    assert observed.all() and not censored.any()
    assert abs(((t >= bench.LO) & (t <= bench.HI)).mean() - truth["coverage"]) < 0.004
    assert abs((bench.HI - bench.LO) / t.mean() - truth["relative_width"]) < 0.005
    p = bench.exact_marginals(len(t))
    brier = ((p - np.eye(3)[labels]) ** 2).sum(axis=-1).mean()
    assert abs(brier - truth["brier"]) < 0.003


def test_a_small_split_scores_better_with_its_own_curve_than_the_training_splits(tmp_path):
    bench = _bench()
    out = tmp_path / "curve.json"
    assert bench.main(["--draws", "200", "--sizes", "60", "--cuts", "0.8", "--out", str(out)]) == 0
    (row,) = __import__("json").loads(out.read_text())["rows"]
    assert row["draws"] == 200 and row["flagged"] < 30
    # The width's error with the training split's G is clearly larger (0.104 against 0.142 at 1,000 draws) ...
    assert row["relative_width/own/rmse"] < 0.9 * row["relative_width/train/rmse"]
    # ... and no metric's is smaller by more than the draws' noise.
    for key in ("coverage", "brier"):
        assert row[f"{key}/own/rmse"] < 1.05 * row[f"{key}/train/rmse"], key
