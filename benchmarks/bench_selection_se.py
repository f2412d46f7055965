"""How well a stage decision's standard error matches the noise it stands for (simulation).

Two fixed predictors (the true probabilities tempered at T_a and T_b, then counted from M = 100
Monte Carlo draws) score fresh validation sets (items, labels and draws new each time). The
true SD of their score difference over the sets is compared with the mean of two estimates
made from one set: the delta-method SE of ``metrics.difference_se`` (what the search uses)
and the naive paired bootstrap over the set's items.

    python benchmarks/bench_selection_se.py [--sets 60] [--items 250] [--length 30]
"""

import argparse

import numpy as np

from focus_tune.scoring import metrics
from focus_tune.scoring.temperature import paired_bootstrap_se


def tempered(q, t):
    z = np.log(q + 1e-12) / t
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", type=int, default=60)
    ap.add_argument("--boot-sets", type=int, default=15, help="sets also bootstrapped (slow)")
    ap.add_argument("--items", type=int, default=250)
    ap.add_argument("--length", type=int, default=30)
    ap.add_argument("--classes", type=int, default=6)
    ap.add_argument("--seed", type=int, default=2)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    N, L, c = args.items, args.length, args.classes
    print(f"{args.sets} fresh sets of {N} items x {L} entries, {c} classes, M = 100; "
          f"bootstrap (100 resamples) on the first {args.boot_sets}")
    print("| T_a vs T_b | score | true SD of the difference | delta-method SE | ratio | paired bootstrap SE | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for ta, tb in ((0.9, 1.1), (1.0, 1.05)):
        diffs = {m: [] for m in metrics.SELECT_KEYS}
        ses = {m: [] for m in metrics.SELECT_KEYS}
        boots = {m: [] for m in metrics.SELECT_KEYS}
        for r in range(args.sets):
            q = rng.dirichlet(np.full(c, 0.5), (N, L))
            labels = (q.cumsum(-1) < rng.random((N, L, 1))).sum(-1).clip(max=c - 1)
            a = rng.multinomial(100, tempered(q, ta).reshape(-1, c)).reshape(N, L, c) / 100
            b = rng.multinomial(100, tempered(q, tb).reshape(-1, c)).reshape(N, L, c) / 100
            for m, key in metrics.SELECT_KEYS.items():
                diffs[m].append(metrics.sequence_metrics(a, labels)[key] - metrics.sequence_metrics(b, labels)[key])
                ses[m].append(metrics.difference_se(metrics.item_influence(a, labels, m),
                                                    metrics.item_influence(b, labels, m)))
                if r < args.boot_sets:
                    def stat(x, idx, key=key):
                        return metrics.sequence_metrics(x[idx], labels[idx])[key]
                    boots[m].append(paired_bootstrap_se(stat, a, b, N, reps=100, seed=r))
        for m in metrics.SELECT_KEYS:
            sd, se, bs = np.std(diffs[m], ddof=1), np.mean(ses[m]), np.mean(boots[m])
            print(f"| {ta} vs {tb} | {m} | {sd:.5f} | {se:.5f} | {se / sd:.2f} | {bs:.5f} | {bs / sd:.2f} |")


if __name__ == "__main__":
    main()
