"""Seed-to-seed noise of ``focus_tune.predict``'s marginals: Rao-Blackwellized against counted.

Runs the user's command, ``python -m focus_tune.predict --model MODEL DATASET --items ITEMS
--json -M M``, with ``--seed 0`` and ``--seed 1`` for each estimator, and prints the RMSE
between the two seeds' marginals (over items, entries and classes) for each, their ratio
(Rao-Blackwellized / counted), the binomial counting noise sqrt(2 p (1 - p) / M) averaged
over the same cells (p: the mean of the four estimates), and the wall time of each command.

    python benchmarks/bench_predict_noise.py --model runs/hero-quick-seed0 \
        --data data_cache/hero-quick-seed0 [--items 0-19] [--samples 100] [--family time-dependent]
"""

import argparse
import json
import subprocess
import sys
import time

import numpy as np


def predict(model: str, data: str, items: str, samples: int, seed: int, estimator: str, family: str,
            tracking_uri: str | None) -> tuple[np.ndarray, float]:
    cmd = [sys.executable, "-m", "focus_tune.predict", "--model", model, data, "--items", items, "--json",
           "-M", str(samples), "--seed", str(seed), "--estimator", estimator, "--family", family]
    if tracking_uri:
        cmd += ["--tracking-uri", tracking_uri]
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - start
    return np.array([json.loads(line)["marginals"] for line in out.splitlines()]), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--items", default="0-19")
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--family", default="time-dependent")
    ap.add_argument("--tracking-uri")
    args = ap.parse_args()
    runs = {}
    for estimator in ("counted", "rao_blackwell"):
        for seed in (0, 1):
            runs[estimator, seed] = predict(args.model, args.data, args.items, args.samples, seed, estimator,
                                            args.family, args.tracking_uri)
    p = np.mean([m for m, _ in runs.values()], axis=0)
    binomial = float(np.sqrt(np.mean(2 * p * (1 - p) / args.samples)))
    rmse = {e: float(np.sqrt(np.mean((runs[e, 0][0] - runs[e, 1][0]) ** 2))) for e in ("counted", "rao_blackwell")}
    n_items, L, c = p.shape
    print(f"{args.model} ({args.family}), {args.data} items {args.items}: {n_items} items, L = {L}, c = {c}, "
          f"M = {args.samples}")
    for e in ("counted", "rao_blackwell"):
        walls = ", ".join(f"{runs[e, s][1]:.1f} s" for s in (0, 1))
        print(f"  {e:14s} seed-to-seed RMSE {rmse[e]:.5f}  (commands: {walls})")
    print(f"  binomial counting noise sqrt(2p(1-p)/M): {binomial:.5f}")
    print(f"  ratio rao_blackwell / counted: {rmse['rao_blackwell'] / rmse['counted']:.3f}")


if __name__ == "__main__":
    main()
