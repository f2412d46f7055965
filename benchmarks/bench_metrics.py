"""sequence_metrics against a per-entry loop of scikit-learn calls.

N = 2000 items, L = 300 entries, c = 19 classes, Monte Carlo-like probabilities (M = 100
frequencies, so ties and exact zeros occur). Checks the values agree to 1e-9.

Then each newer metric alone against its loop in tests/_reference.py: the debiased ECE
and the overconfidence (the vectorized columns that sequence_metrics computes, against a
loop over entries, bins or items), the interval score and the CRPS of N items' M sampled
times to event on t = 1..L (interval_metrics; crps of time_pmf, against pairs of samples).

    python benchmarks/bench_metrics.py [--items 2000] [--length 300]
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from focus_tune.scoring.metrics import _calibration, crps, interval_metrics, sequence_metrics
from focus_tune.scoring.montecarlo import interval, time_pmf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' naive references
from _reference import (  # noqa: E402
    naive_crps,
    naive_ece_debiased_squared,
    naive_interval_score,
    naive_overconfidence,
    naive_sequence_metrics,
)


def timed(fn):
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0


def new_metrics(probs: np.ndarray, labels: np.ndarray, M: int, rng) -> float:
    """Print naive and fast times of the newer metrics; return the largest difference."""
    N, L, c = probs.shape
    conf = probs.max(axis=2)
    correct = (probs.argmax(axis=2) == labels).astype(np.float64)
    times = np.minimum(rng.geometric(3 / L, size=(N, M)), L)  # censored at L, like time_to_event
    true = np.minimum(rng.geometric(3 / L, size=N), L)
    lo, hi = interval(times, 0.9)
    cases = {
        "ece_debiased_squared (per entry, bin by bin)": (
            lambda: np.array([naive_ece_debiased_squared(probs[:, i], labels[:, i]) for i in range(L)]),
            lambda: _calibration(conf, correct, 10)[1],
        ),
        "overconfidence (item by item)": (
            lambda: np.array([naive_overconfidence(probs[:, i], labels[:, i]) for i in range(L)]),
            lambda: (probs.max(axis=2) - (probs.argmax(axis=2) == labels)).mean(axis=0),
        ),
        "interval_score (item by item)": (
            lambda: naive_interval_score(lo, hi, true, 0.9),
            lambda: interval_metrics(lo, hi, times.mean(1), true, 0.9)["interval_score"],
        ),
        f"crps (M x M sample pairs; time_pmf + cdf, M={M})": (
            lambda: naive_crps(times, true),
            lambda: crps(time_pmf(times, L), true),
        ),
    }
    worst = 0.0
    for name, (slow_fn, fast_fn) in cases.items():
        slow, t_slow = timed(slow_fn)
        fast, t_fast = timed(fast_fn)
        worst = max(worst, float(np.max(np.abs(np.asarray(fast) - np.asarray(slow)))))
        print(f"{name:48s} naive {t_slow:7.3f} s, fast {t_fast:7.3f} s, speed-up {t_slow / t_fast:7.1f}x")
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--length", type=int, default=300)
    ap.add_argument("--classes", type=int, default=19)
    ap.add_argument("--samples", type=int, default=100)
    args = ap.parse_args()
    N, L, c, M = args.items, args.length, args.classes, args.samples

    rng = np.random.default_rng(0)
    base = rng.dirichlet(np.full(c, 0.3), size=(N, L))
    probs = np.stack([rng.multinomial(M, base[n, i]) for n in range(N) for i in range(L)]).reshape(N, L, c) / M
    labels = (rng.random((N, L, 1)) > base.cumsum(-1)).sum(-1).clip(max=c - 1)

    t0 = time.perf_counter()
    fast = sequence_metrics(probs, labels)
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    slow = naive_sequence_metrics(probs, labels)
    t_slow = time.perf_counter() - t0

    keys = ("ece", "ece_debiased_sq", "overconfidence", "auc", "brier", "ce")
    worst = max(np.nanmax(np.abs(fast["per_entry"][k] - slow["per_entry"][k])) for k in keys)
    print(f"case: N={N}, L={L}, c={c}, M={M}")
    print(f"naive (sklearn per entry and class): {t_slow:8.2f} s")
    print(f"fast  (sequence_metrics):            {t_fast:8.2f} s")
    print(f"speed-up: {t_slow / t_fast:.1f}x; largest per-entry difference {worst:.2e}")
    new_worst = new_metrics(probs, labels, M, rng)
    print(f"newer metrics: largest difference {new_worst:.2e}")
    if max(worst, new_worst) > 1e-9:
        raise SystemExit("values differ by more than 1e-9")


if __name__ == "__main__":
    main()
