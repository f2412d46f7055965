"""Is the unregularized simulator overconfident in the quick profile's regime?

Trains the quick profile's model (search_spaces/<game>.yaml, profile quick) on the quick
dataset with a few schedules, and prints validation ECE (with its floor where the data has
exact marginals), RMSE to the exact marginals and the coverage / width of I_0.9 every
`--every` epochs. This is how the quick profile's size and epochs were chosen
(docs/RESULTS.md).

    python benchmarks/quick_regime.py --game hero --epochs 60 --every 10
"""

import argparse
import time

import torch

from focus_tune.config import load_search_config, space_path
from focus_tune.data import ensure_dataset, load_dataset
from focus_tune.model import Simulator
from focus_tune.regularization import LambdaSchedule
from focus_tune.train import Split, evaluate, seed_everything, train_one_epoch

SCHEDULES = {
    "none": lambda L: LambdaSchedule.none(L),
    "l1..3=0.05": lambda L: LambdaSchedule.staged([0.05, 0.05, 0.05], 0.0, 1, L),
    "l1..3=0.05,l4..11=0.01": lambda L: LambdaSchedule.staged([0.05, 0.05, 0.05], 0.01, 11, L),
    "const=0.01": lambda L: LambdaSchedule.constant(0.01, L),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--game", default="hero")
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--schedules", nargs="+", default=["none", "l1..3=0.05"], choices=list(SCHEDULES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-root", default="data_cache")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_search_config(space_path(args.game), "quick").train
    ds = load_dataset(ensure_dataset(args.game, "quick", args.data_root))
    m = ds.manifest
    train, val = Split.from_arrays(ds.train), Split.from_arrays(ds.val, items=cfg.val_items)
    print(f"{args.game} quick: {len(train)} train / {len(val)} val items, L={m.length}, "
          f"{cfg.encoder} {cfg.embed_dim}/{cfg.hidden}, lr {cfg.lr}, batch {cfg.batch_size}, M={cfg.num_samples}")
    for name in args.schedules:
        gen = seed_everything(args.seed)
        model = Simulator(m.num_classes, cfg.encoder, cfg.embed_dim, cfg.hidden, m.image_shape[0])
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        lambdas = SCHEDULES[name](m.length).tensor()
        t0 = time.time()
        for epoch in range(1, args.epochs + 1):
            loss = train_one_epoch(model, opt, train, lambdas, cfg.batch_size, gen)["train/loss"]
            if epoch % args.every == 0:
                r = evaluate(model, val, cfg.num_samples, m.event_class, torch.Generator().manual_seed(epoch),
                             cfg.ece_bins, cfg.alpha)
                floor = r.get("marginal/ece_floor", float("nan"))
                print(f"{name:24s} epoch {epoch:3d} loss {loss:7.3f} | val ECE {r['marginal/ece']:.4f} "
                      f"(floor {floor:.4f}) RMSE {r.get('marginal/rmse', float('nan')):.4f} "
                      f"AUC {r['marginal/auc']:.3f} | coverage {r['interval/coverage']:.2f} "
                      f"rel.width {r['interval/relative_width']:.2f} | {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
