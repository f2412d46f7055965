"""How far a calibrated predictor's scores move with the labels alone (finite test data).

The test labels of a dataset are one draw of each item's sequence from its true process.
This script keeps the items (images, true process) of a split fixed, redraws their label
sequences R times from the same process (the generator's chain, as the dataset was built)
and scores fixed predictors against each draw with :func:`focus_tune.scoring.metrics.sequence_metrics`:

* exact: the true marginals P(Y_i | x), calibrated by construction;
* oracle counted: the class frequencies of M draws of the true process per item, drawn once
  (the report's ``oracle`` row with the paper's estimator);
* oracle Rao-Blackwell: the same M draws, each entry's probabilities averaged over the
  process's own conditionals at the sampled prefixes (``train.estimator: rao_blackwell``).

Printed per split and predictor: the mean and SD over the R label draws of the sequence-level
ECE, debiased squared ECE (``ece_debiased_sq``) and its signed root (``ece_debiased``), and
where the stored labels fall (the fraction of redraws scoring at least as high). A second
line redraws the labels independently per entry (the simulation of docs/METRICS.md): the
chain's labels are correlated across entries (an ended sequence stays ended), so the mean
over entries averages fewer independent errors and varies more.

    python benchmarks/bench_label_noise.py [--games hero facemed] [--profile quick] [--draws 30]
"""

import argparse
import time

import numpy as np

from focus_tune.data import ensure_dataset, load_dataset
from focus_tune.scoring.baselines import Oracle, rao_blackwell
from focus_tune.scoring.metrics import sequence_metrics, signed_root
from focus_tune.scoring.montecarlo import marginal_probs

KEYS = ("ece", "ece_debiased_sq")


def scores(probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    out = sequence_metrics(probs, labels)
    return {k: out[k] for k in KEYS}


def independent_labels(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One label per (item, entry) drawn independently from probs [N, L, c]."""
    u = rng.random(probs.shape[:2])[..., None]
    return np.minimum((u > np.cumsum(probs, axis=2)).sum(axis=2), probs.shape[2] - 1)


def describe(name: str, stored: dict, draws: list[dict]) -> str:
    parts = []
    for k in KEYS:
        v = np.array([d[k] for d in draws])
        parts.append(f"{k} stored {stored[k]:+.2e} redrawn {v.mean():+.2e} sd {v.std(ddof=1):.2e} "
                     f"(stored at >= {np.mean(v >= stored[k]):.2f})")
    sq = np.array([d["ece_debiased_sq"] for d in draws])
    root = (f"ece_debiased stored {signed_root(stored['ece_debiased_sq']):+.4f}, "
            f"sd of the root of a zero truth ~{np.sqrt(sq.std(ddof=1)):.4f}")
    return f"  {name:22s} " + " | ".join(parts) + f" | {root}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--games", nargs="+", default=["hero", "facemed"])
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--splits", nargs="+", default=["val", "test"])
    parser.add_argument("--draws", type=int, default=30)
    parser.add_argument("--num-samples", type=int, default=100)
    parser.add_argument("--data-root", default="data_cache")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"R = {args.draws} label redraws per split, M = {args.num_samples}, seed {args.seed}")
    for game in args.games:
        ds = load_dataset(ensure_dataset(game, args.profile, args.data_root))
        m = ds.manifest
        for split_name in args.splits:
            start = time.perf_counter()
            split = ds.split(split_name)
            truth = Oracle(m, np.asarray(split.images), {k: np.asarray(v) for k, v in split.extras.items()})
            labels = np.asarray(split.sequences)
            rng = np.random.default_rng([args.seed, len(labels)])
            samples, along = truth.draw(args.num_samples, rng)
            predictors = {
                "exact": truth.marginals(),
                "oracle counted": marginal_probs(samples, m.num_classes),
                "oracle Rao-Blackwell": rao_blackwell(samples, along, m.event_class).marginals,
            }
            redraws = [truth.draw(1, rng)[0][:, 0] for _ in range(args.draws)]
            print(f"\n{game} {args.profile} {split_name}: n = {len(labels)} items, L = {m.length}")
            for name, probs in predictors.items():
                stored = scores(probs, labels)
                print(describe(name, stored, [scores(probs, y) for y in redraws]))
            exact = predictors["exact"]
            independent = [scores(exact, independent_labels(exact, rng)) for _ in range(args.draws)]
            print(describe("exact, indep. entries", scores(exact, labels), independent))
            print(f"  ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
