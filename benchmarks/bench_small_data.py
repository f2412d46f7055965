"""How small a test (or validation) split can a search read? The test ECE's noise at small
sizes, against the gaps between the families and image-blind in the worked example.

    python benchmarks/bench_small_data.py                 # a few seconds
    python benchmarks/bench_small_data.py --draws 2000

The worked example's chain (scripts/digits_dataset.py, L = 20, 3 classes; digits uniform,
no censoring: censoring only adds noise) is drawn ``--draws`` times at each test size n, one
sequence per item. Two calibrated predictors are scored on the same draws with the search's
ECE (focus_tune.scoring.metrics.sequence_ece, B = 10 equal-mass bins): the exact marginals
P(Y_i | digit) (a family at its best: it reads the image) and their mixture over digits
(image-blind at its best: the same for every item). Per n it prints each one's mean ECE (the
floor of a calibrated predictor at that size) and SD, and the SD of their paired
difference, which is what one test split's comparison of a family with image-blind carries.

A split is too small when the SD of a calibrated, image-reading predictor's test ECE (the
exact marginals': its standard error from one split) exceeds the gap to detect, ``--gap``
(default 0.0092: the smallest of the worked example's family - image-blind ECE gaps,
docs/results/digits-quick, 180 test items; 0.011-0.014 over its five replications,
docs/results/replication/digits-quick): below that size one standard error of the split's
ECE is larger than the difference a search should see, so it cannot tell a family from
image-blind on its ECE. The printed floor is the smallest size of the grid where SD <= gap,
and the fitted one (c / gap)^2 from SD ~ c / sqrt(n);
focus_tune.search refuses a dataset with a smaller test or validation split
(``MIN_SPLIT_ITEMS`` in focus_tune/search/cli.py) unless --allow-small. It is a necessary
condition, not a sufficient one: the last columns show that the paired difference of the two
rows on one split is noisier still (2 SD <= gap needs several times the floor), and that at
small sizes the ECE favours the image-blind row (one confidence per entry: fewer, fuller
bins), so a family's ECE above image-blind's on a small split says little.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import digits_dataset as digits  # noqa: E402

from focus_tune.scoring.metrics import sequence_ece  # noqa: E402


def draw_sequences(d: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One uncensored sequence per item from its digit's chain: int [n, L]."""
    n = len(d)
    seqs = np.empty((n, digits.LENGTH), np.int64)
    state = np.full(n, digits.CALM)
    mats = np.stack([digits.transition(k) for k in range(10)])[d]
    for i in range(digits.LENGTH):
        cum = np.cumsum(mats[np.arange(n), state], axis=1)
        state = np.minimum((rng.random(n)[:, None] > cum).sum(axis=1), 2)
        seqs[:, i] = state
    return seqs


def measure(n: int, draws: int, bins: int, rng: np.random.Generator) -> dict[str, float]:
    table = digits.exact_marginals(np.arange(10)).astype(np.float64)  # [10, L, 3]
    blind = table.mean(axis=0)  # digits uniform: the image-blind marginals
    exact_ece, blind_ece = np.empty(draws), np.empty(draws)
    for r in range(draws):
        d = rng.integers(0, 10, n)
        labels = draw_sequences(d, rng)
        exact_ece[r] = sequence_ece(table[d], labels, bins)
        blind_ece[r] = sequence_ece(np.broadcast_to(blind, (n, *blind.shape)), labels, bins)
    diff = exact_ece - blind_ece
    return {"n": n, "exact_mean": exact_ece.mean(), "exact_sd": exact_ece.std(ddof=1),
            "blind_mean": blind_ece.mean(), "blind_sd": blind_ece.std(ddof=1),
            "diff_mean": diff.mean(), "diff_sd": diff.std(ddof=1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[5, 10, 20, 40, 80, 100, 120, 140, 160, 180, 200, 320, 640])
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--bins", type=int, default=10)
    ap.add_argument("--gap", type=float, default=0.0092)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print(f"digits chain, L = {digits.LENGTH}, B = {args.bins}, {args.draws} draws per size, seed {args.seed}, "
          f"gap {args.gap}; mean (SD) over draws")
    print(f"{'n':>5} | {'exact ECE (SD)':>16} | {'image-blind (SD)':>16} | {'exact - blind (SD)':>18} | SD <= gap | "
          "2 SD(diff) <= gap")
    floor = paired = None
    scaled, scaled_diff = [], []  # SD * sqrt(n) at n >= 40: the SE's constant
    for n in args.sizes:
        m = measure(n, args.draws, args.bins, rng)
        if n >= 40:
            scaled.append(m["exact_sd"] * np.sqrt(n))
            scaled_diff.append(m["diff_sd"] * np.sqrt(n))
        ok, ok_paired = m["exact_sd"] <= args.gap, 2 * m["diff_sd"] <= args.gap
        floor = n if ok and floor is None else floor
        paired = n if ok_paired and paired is None else paired
        print(f"{n:>5} | {m['exact_mean']:.4f} ({m['exact_sd']:.4f}) | {m['blind_mean']:.4f} ({m['blind_sd']:.4f}) "
              f"| {m['diff_mean']:+.4f} ({m['diff_sd']:.4f})   | {'yes' if ok else 'no':>9} | "
              f"{'yes' if ok_paired else 'no'}")
    above = f"above {args.sizes[-1]}"
    print(f"floor: {floor if floor is not None else above} items (smallest size where the SD of the exact row's "
          f"ECE <= {args.gap}); 2 SD of the paired difference <= {args.gap} from "
          f"{paired if paired is not None else above} items")
    if scaled:
        c, cd = float(np.median(scaled)), float(np.median(scaled_diff))
        print(f"fitted: SD of the ECE ~ {c:.3f} / sqrt(n), so SD <= {args.gap} from n = "
              f"{int(np.ceil((c / args.gap) ** 2))}; "
              f"SD of the paired difference ~ {cd:.3f} / sqrt(n), 2 SD <= {args.gap} from n = "
              f"{int(np.ceil((2 * cd / args.gap) ** 2))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
