"""sequence_metrics against a per-entry loop of scikit-learn calls.

N = 2000 items, L = 300 entries, c = 19 classes, Monte Carlo-like probabilities (M = 100
frequencies, so ties and exact zeros occur). Checks the values agree to 1e-9.

    python benchmarks/bench_metrics.py [--items 2000] [--length 300]
"""

import argparse
import time

import numpy as np

from focus_tune.metrics import sequence_metrics
from focus_tune.reference import naive_sequence_metrics


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

    worst = max(np.nanmax(np.abs(fast["per_entry"][k] - slow["per_entry"][k])) for k in ("ece", "auc", "brier", "ce"))
    print(f"case: N={N}, L={L}, c={c}, M={M}")
    print(f"naive (sklearn per entry and class): {t_slow:8.2f} s")
    print(f"fast  (sequence_metrics):            {t_fast:8.2f} s")
    print(f"speed-up: {t_slow / t_fast:.1f}x; largest per-entry difference {worst:.2e}")
    if worst > 1e-9:
        raise SystemExit("values differ by more than 1e-9")


if __name__ == "__main__":
    main()
