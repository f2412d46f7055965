"""Which split's censoring survival G should weigh a small split's censored metrics?

Issue 51 asked for G to be estimated on the split being scored only when that split is large
enough, else on the training split. This measures the choice: many small test splits drawn
beside one large training split from the same process (a constant event hazard, a share of the
items cut at a uniform entry: censoring independent of T), each scored twice through the
project's own weights, once with G estimated on the test split itself and once with the
training split's, against the population value (what the full labels of infinitely many items
give). Metrics: the IPCW coverage and relative width of a fixed interval [2, 8]
(``metrics._censored_interval_values``, the path of ``interval_metrics``) and the entry-level
Brier score of the exact marginals (``survival.entry_weights``, ``metrics.sequence_metrics``).

    python benchmarks/bench_censoring_curve.py --draws 1000 --out docs/results/censoring/censoring_curve.json

prints, per (censored share, test items), each metric's bias and RMSE with the split's own G
and with the training split's, and the share of draws the positivity check flags (the same for
both: it is the scored split's own). Plain numpy, about a minute.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from focus_tune.scoring import metrics, survival  # noqa: E402

L, HAZARD, LO, HI = 12, 0.15, 2.0, 8.0


def draw(rng: np.random.Generator, n: int, cut: float):
    """n items of 3 classes, the event 2 absorbing at a geometric time, a share ``cut`` cut at a
    uniform entry: (labels [n, L], observed [n, L], stored times, censored)."""
    T = rng.geometric(HAZARD, n)
    labels = np.where(np.arange(1, L + 1)[None] >= T[:, None], 2, rng.integers(0, 2, (n, L)))
    C = np.where(rng.random(n) < cut, rng.integers(1, L + 1, n), L)
    seen = T <= C
    observed = np.arange(1, L + 1)[None] <= np.where(seen, L, C)[:, None]
    censored = ~seen & (C < L)
    return labels, observed, np.where(censored, C, np.minimum(T, L)), censored


def exact_marginals(n: int) -> np.ndarray:
    """P(Y_i = a) of :func:`draw`'s chain: [n, L, 3]."""
    alive = (1 - HAZARD) ** np.arange(1, L + 1)
    p = np.stack([alive / 2, alive / 2, 1 - alive], axis=-1)
    return np.broadcast_to(p, (n, L, 3))


def scores(labels, observed, t, censored, G) -> dict[str, float]:
    n = len(t)
    lo, hi = np.full(n, LO), np.full(n, HI)
    values, _, _ = metrics._censored_interval_values(lo, hi, hi, t.astype(np.float64), 0.9, censored, L, G)
    weights = survival.entry_weights(observed, t, censored, G)
    brier = metrics.sequence_metrics(exact_marginals(n), labels, weights=weights)["brier"]
    return {"coverage": values["coverage"], "relative_width": values["relative_width"], "brier": brier}


def population() -> dict[str, float]:
    """The full-label values of the process (closed form for the coverage and the width, the
    exact marginals' expected Brier)."""
    t = np.arange(1, L + 1)
    pmf = HAZARD * (1 - HAZARD) ** (t - 1)
    pmf[-1] += (1 - HAZARD) ** L  # T = L: the event at L or never
    mean_t = float((t * pmf).sum())
    p = exact_marginals(1)[0]
    brier = float(np.mean((p * (1 - p)).sum(axis=1)))  # E sum_a (p_a - 1[Y = a])^2 = sum_a p_a (1 - p_a)
    return {"coverage": float(pmf[(t >= LO) & (t <= HI)].sum()), "relative_width": (HI - LO) / mean_t,
            "brier": brier}


def run(draws: int, sizes, cuts, train_items: int, seed: int = 0) -> dict:
    truth = population()
    rows = []
    for cut in cuts:
        for n in sizes:
            rng = np.random.default_rng([seed, int(cut * 100), n])
            _, _, t_train, c_train = draw(rng, train_items, cut)
            G_train = survival.censoring_survival(t_train, c_train, L)
            own, borrowed, flagged = [], [], 0
            for _ in range(draws):
                labels, observed, t, c = draw(rng, n, cut)
                G_own = survival.censoring_survival(t, c, L)
                blocked = survival.positivity_entry(G_own, L)
                if blocked is not None:  # flagged either way: the scored split's own check
                    flagged += 1
                    continue
                own.append(scores(labels, observed, t, c, G_own))
                borrowed.append(scores(labels, observed, t, c, G_train))
            row = {"censored_share_cut": cut, "test_items": n, "draws": draws, "flagged": flagged}
            for key, value in truth.items():
                for name, got in (("own", own), ("train", borrowed)):
                    x = np.array([g[key] for g in got])
                    x = x[np.isfinite(x)]
                    row[f"{key}/{name}/bias"] = float(x.mean() - value)
                    row[f"{key}/{name}/rmse"] = float(np.sqrt(((x - value) ** 2).mean()))
            rows.append(row)
    return {"population": truth, "train_items": train_items, "length": L, "hazard": HAZARD, "interval": [LO, HI],
            "rows": rows}


def table(result: dict) -> str:
    lines = ["| cut share | test items | flagged | metric | own G: bias | own G: RMSE | training G: bias | "
             "training G: RMSE |", "|---:|---:|---:|---|---:|---:|---:|---:|"]
    for row in result["rows"]:
        for key in result["population"]:
            lines.append(f"| {row['censored_share_cut']:.1f} | {row['test_items']} | {row['flagged']}/{row['draws']} "
                         f"| {key} | {row[f'{key}/own/bias']:+.4f} | {row[f'{key}/own/rmse']:.4f} | "
                         f"{row[f'{key}/train/bias']:+.4f} | {row[f'{key}/train/rmse']:.4f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[30, 60, 120, 180])
    parser.add_argument("--cuts", type=float, nargs="+", default=[0.5, 0.8])
    parser.add_argument("--train-items", type=int, default=3000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = run(args.draws, args.sizes, args.cuts, args.train_items)
    print(table(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
