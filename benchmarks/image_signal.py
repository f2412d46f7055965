"""How much do the built-in datasets' images carry? Exact truth against an image-blind predictor.

For each scenario's dataset (built once, cached under --data-root) it scores, on the test
split, the exact marginals P(Y_i = a | x) of the data's generator and the image-blind
predictor (the per-entry class frequencies of the training sequences) with the report's
metrics (macro AUC, CE, ECE). The CE gap between the two is what a simulator can gain by
reading the image. For the Atari player model it also shows which frame features carry
it (the exact marginals recomputed with one feature held at its training mean) and what
the generator's earlier, weaker image effects (version 1: half of today's) gave, with labels
redrawn from that version.

    python benchmarks/image_signal.py --games hero facemed --profile quick
"""
from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from focus_tune.data import ensure_dataset, load_dataset
from focus_tune.data.builtin.profiles import FACEMED
from focus_tune.scoring import metrics
from focus_tune.scoring.baselines import ImageBlind


def image_blind(train_sequences: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """The image-blind row's limit without sampling (per-entry training frequencies) for every item: [N, L, c]."""
    n, L, c = shape
    return ImageBlind(train_sequences, n, c).marginals()


def score(probs: np.ndarray, labels: np.ndarray) -> str:
    s = metrics.sequence_metrics(probs, labels, 10)
    return f"AUC {s['auc']:.3f}  CE {s['ce']:.4f}  ECE {s['ece']:.4f}"


def atari_ablation(ds, labels: np.ndarray) -> None:
    from focus_tune.data.builtin.ale import (
        END,
        FEATURES,
        PLAYER_MODELS,
        calibrate_offset,
        exact_marginals,
        frame_features,
        player_params,
        sample_sequences,
    )

    man = ds.manifest
    player = man.details["player_model"]
    z = (frame_features(ds.test.images) - np.array(player["feature_mean"])) / np.array(player["feature_std"])
    model = PLAYER_MODELS[man.game]

    def exact(z_, model_=model):
        return exact_marginals(player_params(z_, model_, man.sampling_freq, man.length, player["offset"]))

    for k, name in enumerate(FEATURES):
        held = z.copy()
        held[:, k] = 0.0
        print(f"  exact, {name:10s} held at its mean: {score(exact(held), labels)}")
    # Generator v1: half of today's image effects and first_bonus 1 (labels redrawn from it).
    v1 = dataclasses.replace(model, steer=model.steer / 2, climb=model.climb / 2, fire=model.fire / 2,
                             hold_effect=model.hold_effect / 2, first_bonus=1.0,
                             hazard_effects=tuple(h / 2 for h in model.hazard_effects))
    z_train = (frame_features(ds.train.images) - np.array(player["feature_mean"])) / np.array(player["feature_std"])
    offset = calibrate_offset(z_train, v1, man.sampling_freq, man.length, man.details["mean_length_target"])
    rng = np.random.default_rng(0)
    params = [player_params(z_, v1, man.sampling_freq, man.length, offset) for z_ in (z_train, z)]
    train_v1, test_v1 = (sample_sequences(p, rng) for p in params)
    print(f"  generator v1 (half the image effects), labels redrawn: exact "
          f"{score(exact_marginals(params[1]), test_v1)}")
    print(f"  generator v1, image-blind: {score(image_blind(train_v1, (len(test_v1), man.length, END + 1)), test_v1)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--games", nargs="+", default=["hero", "facemed"])
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--data-root", default="data_cache")
    args = ap.parse_args()
    for game in args.games:
        ds = load_dataset(ensure_dataset(game, args.profile, args.data_root))
        labels = ds.test.sequences
        exact = np.asarray(ds.test.exact_marginals, dtype=np.float64)
        print(f"{game} ({args.profile}): {len(ds.train.sequences)} train / {len(labels)} test items")
        print(f"  exact marginals:  {score(exact, labels)}")
        print(f"  image-blind:      {score(image_blind(ds.train.sequences, exact.shape), labels)}")
        if game != FACEMED:
            atari_ablation(ds, labels)


if __name__ == "__main__":
    main()
