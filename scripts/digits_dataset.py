"""The worked example of a dataset of one's own: real handwritten digits, a sequence process
whose truth is known, some sequences cut short.

    python scripts/digits_dataset.py --out data/digits            # the dataset, through write_dataset
    python scripts/digits_dataset.py --table data/digits-table    # or PNGs + table.csv for import-table
    python -m focus_tune.search --data data/digits                # the quick search on it

Images: the 1797 8x8 handwritten digits that ship with scikit-learn (``load_digits``, the
UCI optical digits test set), grey levels 0-16 scaled to 0-255 and enlarged to 32x32
(bilinear), one channel. Sequences: L = 20 entries of {calm, busy, end}, a Markov chain
that starts calm (Y_0 = calm, not part of the sequence) and depends on the digit d only:

    from calm: end with h_d, else busy with s_d, else calm;  from busy: end with h_d, else calm
    with 0.3, else busy;  end is absorbing.  h_d = 0.02 + 0.03 d,  s_d = 0.1 (d even) or 0.4 (odd).

So the image fixes the whole distribution: the exact marginals P(Y_i = a | x) follow from the
chain and are stored (the report's ``exact`` row, the best achievable), and the image-blind
predictor (the training sequences' mixture over digits) is the trivial one. Censoring,
independent of everything: each item with probability 0.3 is cut after an entry C drawn
uniformly from 1..L-1 (entries after C unobserved, -1), unless it has ended by then.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

CLASSES = ["calm", "busy", "end"]
CALM, BUSY, END = range(3)
LENGTH = 20
SIZE = 32
CENSOR_P = 0.3


def transition(d: int) -> np.ndarray:
    """The chain's [3, 3] transition matrix for digit d (rows: from calm, busy, end)."""
    h = 0.02 + 0.03 * d
    s = 0.1 if d % 2 == 0 else 0.4
    return np.array([[(1 - h) * (1 - s), (1 - h) * s, h],
                     [(1 - h) * 0.3, (1 - h) * 0.7, h],
                     [0.0, 0.0, 1.0]])


def exact_marginals(digits: np.ndarray) -> np.ndarray:
    """P(Y_i = a | digit) for i = 1..L: float32 [N, L, 3] (forward recursion from Y_0 = calm)."""
    by_digit = np.zeros((10, LENGTH, 3))
    for d in range(10):
        p, T = np.eye(3)[CALM], transition(d)
        for i in range(LENGTH):
            p = p @ T
            by_digit[d, i] = p
    return by_digit[digits].astype(np.float32)


def draw(digits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One sequence per item from its digit's chain, then the censoring: int [N, L], -1 unobserved."""
    n = len(digits)
    seqs = np.empty((n, LENGTH), np.int64)
    state = np.full(n, CALM)
    mats = np.stack([transition(d) for d in range(10)])[digits]  # (N, 3, 3)
    for i in range(LENGTH):
        cum = np.cumsum(mats[np.arange(n), state], axis=1)
        state = (rng.random(n)[:, None] > cum).sum(axis=1)
        seqs[:, i] = state
    cut = rng.random(n) < CENSOR_P
    at = rng.integers(1, LENGTH, n)  # C in 1..L-1: entries 1..C observed
    ended = np.array([(s[:c] == END).any() for s, c in zip(seqs, at)])
    for k in np.flatnonzero(cut & ~ended):
        seqs[k, at[k]:] = -1
    return seqs


def images_of(raw: np.ndarray) -> np.ndarray:
    """uint8 [N, 1, SIZE, SIZE] from the 0-16 grey levels [N, 8, 8]."""
    from PIL import Image

    grey = np.clip(np.rint(raw * (255 / 16)), 0, 255).astype(np.uint8)
    big = [np.asarray(Image.fromarray(g).resize((SIZE, SIZE), Image.Resampling.BILINEAR)) for g in grey]
    return np.stack(big)[:, None]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="write the dataset folder (focus_tune.data.write_dataset)")
    where.add_argument("--table", type=Path, help="write PNG files and table.csv here (for import-table)")
    ap.add_argument("--seed", type=int, default=0, help="the sequences' and the censoring's draw, and the split")
    args = ap.parse_args(argv)
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        print("error: the digits ship with scikit-learn: pip install scikit-learn", file=sys.stderr)
        return 2
    digits = load_digits()
    rng = np.random.default_rng(args.seed)
    images, labels = images_of(digits.images), digits.target.astype(np.int64)
    sequences = draw(labels, rng)
    source = ("scikit-learn load_digits (UCI optical recognition of handwritten digits), 32x32; "
              "scripts/digits_dataset.py")
    if args.table is not None:
        from PIL import Image

        folder = args.table / "images"
        folder.mkdir(parents=True, exist_ok=True)
        with open(args.table / "table.csv", "w", newline="") as handle:
            out = csv.writer(handle)
            out.writerow(["image", "sequence", "digit"])
            for k, (image, seq) in enumerate(zip(images, sequences)):
                Image.fromarray(image[0]).save(folder / f"{k:04d}.png")
                out.writerow([f"images/{k:04d}.png", " ".join(CLASSES[c] for c in seq if c >= 0), labels[k]])
        print(f"wrote {len(images)} PNG files and {args.table / 'table.csv'}; import with:\n"
              f"  python -m focus_tune.data import-table {args.table / 'table.csv'} --out data/digits "
              f"--event end --classes {' '.join(CLASSES)} --length {LENGTH}")
        return 0
    from focus_tune.data import describe_dataset, write_dataset

    path = write_dataset(args.out, images=images, sequences=sequences, classes=CLASSES, event="end",
                         exact_marginals=exact_marginals(labels), seed=args.seed, name="digits", source=source,
                         extras={"digit": labels},
                         details={"process": "scripts/digits_dataset.py: h_d = 0.02 + 0.03 d, s_d = 0.1 / 0.4 "
                                             "(even / odd d), busy -> calm 0.3; censoring p 0.3, C ~ U{1..L-1}"})
    print(f"wrote {path}")
    print(describe_dataset(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
