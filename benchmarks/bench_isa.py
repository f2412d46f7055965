"""The quick H.E.R.O. model's training epoch with this CPU's kernels and with AVX2 kernels only.

The 2-core machines here come in two kinds, one with AVX-512 and one without, and the kinds
differ by about 2.4x in a search's trial-seconds (docs/BENCHMARKS.md). This asks how much of
that the instruction set explains: the same epochs in two processes side by side, one with the
kernels PyTorch picks, one capped at AVX2 (``ATEN_CPU_CAPABILITY=avx2``,
``ONEDNN_MAX_CPU_ISA=AVX2``, ``MKL_ENABLE_INSTRUCTIONS=AVX2``), alternating, one thread each.
It also prints a hash of each run's trained parameters: whether capping the kernels makes this
machine compute what a machine without AVX-512 computes can be checked against a recorded run
of that machine (the first validation scores of a search log), not against this hash alone.

    python benchmarks/bench_isa.py [--epochs 3] [--repeats 2] [--data-root data_cache] [--game hero --profile quick]
"""

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def train(epochs: int, data_root: str, game: str = "hero", profile: str = "quick") -> dict:
    """Epoch times of the profile's unregularized model (seed 0, one thread) and a hash of its parameters."""
    import torch

    from focus_tune.config.space import load_search_config, space_path
    from focus_tune.data import ensure_dataset, load_dataset
    from focus_tune.sim.adam_patch import eager_optimizers
    from focus_tune.sim.device_split import DeviceSplit
    from focus_tune.sim.model_io import DataInfo, build_model
    from focus_tune.sim.regularization import LambdaSchedule
    from focus_tune.sim.train import LearningRate, seed_everything, train_one_epoch

    # the worker's process trains: Adam without the torch._dynamo import (focus_tune/sim/adam_patch.py)
    eager_optimizers()
    torch.set_num_threads(1)
    cfg = load_search_config(space_path(game), profile).train
    data = load_dataset(ensure_dataset(game, profile, data_root))
    info = data.manifest
    split = DeviceSplit.from_arrays(data.train)
    lam = LambdaSchedule.none(info.length).tensor()
    rate = LearningRate.of(cfg.lr, cfg.lr_schedule, cfg.epochs, len(split), cfg.batch_size)
    steps = -(-len(split) // cfg.batch_size)
    gen = seed_everything(0)
    model = build_model(cfg, DataInfo.of(info))  # the model a trial of this profile trains
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    times = []
    for epoch in range(epochs):
        t0 = time.perf_counter()
        train_one_epoch(model, opt, split, lam, cfg.batch_size, gen, lr=rate, step=epoch * steps)
        times.append(time.perf_counter() - t0)
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16]
    return {"capability": torch.backends.cpu.get_cpu_capability(), "epoch_s": times, "params": digest}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--data-root", default="data_cache")
    ap.add_argument("--game", default="hero")
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(train(args.epochs, args.data_root, args.game, args.profile)))
        return
    base = {k: v for k, v in os.environ.items() if k not in AVX2}
    sides = {"default": base, "AVX2 only": {**base, **AVX2}}
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    for _ in range(args.repeats):
        for name, env in sides.items():
            cmd = [sys.executable, __file__, "--worker", "--epochs", str(args.epochs), "--data-root", args.data_root,
                   "--game", args.game, "--profile", args.profile]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{args.game} {args.profile} model, unregularized, seed 0, 1 thread, {args.epochs} epochs x "
          f"{args.repeats} runs, alternating")
    medians = {}
    for name, rs in runs.items():
        # the first epoch carries the allocator's and oneDNN's warm-up: the later ones are the rate
        later = [t for r in rs for t in r["epoch_s"][1:]] or [t for r in rs for t in r["epoch_s"]]
        medians[name] = statistics.median(later)
        hashes = sorted({r["params"] for r in rs})
        print(f"  {name:10s} kernels {rs[0]['capability']:7s} epoch {medians[name]:.2f} s (median after the first)"
              f"  parameters {', '.join(hashes)}")
    print(f"  ratio AVX2 only / default: {medians['AVX2 only'] / medians['default']:.2f}x")


if __name__ == "__main__":
    main()
