"""What forcing END / dead to repeat changes at evaluation, per family, and what it costs.

Trains one model per family on a profile's dataset with the profile's training settings
(search_spaces/<game>.yaml): none, constant and a time-dependent schedule (defaults: the
largest constant of the grid, and the H.E.R.O. quick run's chosen schedule of
docs/RESULTS.md). Each model is then evaluated on the same test items twice with the same
seed: `event_sampling: model` (every entry drawn from the model, the default) and `event_sampling:
forced` (the event repeats once drawn). Printed per family and mode: the leak (fraction of
sampled sequences that leave the event after reaching it), the model's mean teacher-forced
p(event -> event), the marginal ECE / CE, coverage and relative width of I_0.9, and the
wall time of the sampling alone.

    python benchmarks/bench_absorbing.py --game hero --profile quick --items 300
"""

import argparse
import time

import torch

from focus_tune.config.space import load_search_config, space_path
from focus_tune.data import ensure_dataset, load_dataset
from focus_tune.scoring.evaluation import draw_samples, evaluate
from focus_tune.sim.adam_patch import eager_optimizers
from focus_tune.sim.device_split import DeviceSplit
from focus_tune.sim.model_io import DataInfo, build_model
from focus_tune.sim.regularization import LambdaSchedule
from focus_tune.sim.train import seed_everything, train_one_epoch


def schedules(length: int, constant: float) -> dict[str, LambdaSchedule]:
    return {
        "none": LambdaSchedule.none(length),
        "constant": LambdaSchedule.constant(constant, length),
        "time-dependent": LambdaSchedule.staged([0.05, 0.005, 0.05], 0.05, 11, length),
    }


def main() -> None:
    eager_optimizers()  # a process that trains: Adam without the torch._dynamo import (focus_tune/sim/adam_patch.py)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--game", default="hero")
    ap.add_argument("--profile", default="quick", choices=("smoke", "quick", "paper"))
    ap.add_argument("--epochs", type=int, help="default: the profile's")
    ap.add_argument("--items", type=int, default=300, help="test items evaluated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-root", default="data_cache")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_search_config(space_path(args.game), args.profile)
    ds = load_dataset(ensure_dataset(args.game, args.profile, args.data_root, seed=args.seed))
    m = ds.manifest
    info = DataInfo.of(m)
    train, test = DeviceSplit.from_arrays(ds.train), DeviceSplit.from_arrays(ds.test, items=args.items)
    epochs = args.epochs or cfg.train.epochs
    print(f"{args.game} {args.profile}: {len(train)} train items, {len(test)} test items, L={m.length}, "
          f"M={cfg.train.num_samples}, {epochs} epochs, {cfg.train.encoder} (width {cfg.train.encoder_width}) "
          f"{cfg.train.embed_dim}/{cfg.train.hidden}, "
          f"{args.threads} thread(s); event class {m.class_names[m.event_class]}")
    header = (f"{'family':15s} {'mode':7s} {'leak':>6s} {'p(stay)':>8s} {'ECE':>7s} {'CE':>7s} "
              f"{'cover':>6s} {'width':>6s} {'sample_s':>9s}")
    rows = []
    for family, schedule in schedules(m.length, max(cfg.grid.constants)).items():
        gen = seed_everything(args.seed)
        model = build_model(cfg.train, info)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.train.lr)
        for _ in range(epochs):
            train_one_epoch(model, opt, train, schedule.tensor(), cfg.train.batch_size, gen)
        for mode in ("model", "forced"):
            r = evaluate(model, test, cfg.train.num_samples, m.event_class, torch.Generator().manual_seed(1),
                         cfg.train.ece_bins, cfg.train.alpha, event_sampling=mode)
            forced = m.event_class if mode == "forced" else None
            t0 = time.perf_counter()  # the sampling alone, the part the mode changes
            draw_samples(model, test.images, cfg.train.num_samples, m.length, torch.Generator().manual_seed(1), forced)
            seconds = time.perf_counter() - t0
            rows.append(f"{family:15s} {mode:7s} {r['marginal/leak']:6.3f} {r['marginal/p_stay']:8.4f} "
                        f"{r['marginal/ece']:7.4f} {r['marginal/ce']:7.4f} {r['interval/coverage']:6.3f} "
                        f"{r['interval/relative_width']:6.3f} {seconds:9.2f}")
            print(rows[-1] if len(rows) > 1 else header + "\n" + rows[-1], flush=True)


if __name__ == "__main__":
    main()
