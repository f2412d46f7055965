"""Fewer epochs at the same point? Test metrics of the unregularized quick model per training recipe.

Each recipe ``kind:epochs:lr[:batch]`` (kind ``const``: constant learning rate, the paper's
Adam; ``oc``: one-cycle; ``decay``: constant, then a cosine over the last 20 % of the steps;
``focus_tune.sim.train.LearningRate``) trains the quick model of a
scenario unregularized (seed 0, 1 thread, the quick data's 1000 training items) and scores
the whole test split as a final does (M = 100, counted, absorbing: model): one JSON line per
recipe with the training seconds, the last epoch's training loss and the test ECE, CE, AUC,
and coverage and relative width of I_0.9. The image-blind CE of the same test split is the
reference line's (``--blind``).

    python benchmarks/bench_epochs.py --game hero const:30:1e-3 const:10:2e-3 oc:12:3e-3
    python benchmarks/bench_epochs.py --game facemed const:30:1e-3 const:18:2e-3 oc:15:3e-3:32
    python benchmarks/bench_epochs.py --game hero const:10:2e-3 oc:10:3e-3 --seeds 0-9 --score-last 2 \
        --samples 10 --estimator rao_blackwell

How steady a recipe is from seed to seed and at its end: ``--seeds 0-9`` trains each
recipe once per seed (the seed of ``seed_everything``, as a final of that seed trains), and
``--score-last 2`` scores the last two epochs, one line per (recipe, seed, epoch); a
recipe whose scores jump between its last epochs leaves a final at the mercy of where its
last step lands. ``--samples`` and ``--estimator`` set the test evaluation's M and
estimator (default M = 100, counted; ``--samples 10 --estimator rao_blackwell`` scores in
about a tenth of the time, with more Monte Carlo noise, the same for every recipe).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from focus_tune.data import ensure_dataset, load_dataset
from focus_tune.names import ESTIMATORS
from focus_tune.replicate.analysis import seed_list
from focus_tune.scoring import metrics
from focus_tune.scoring.baselines import ImageBlind
from focus_tune.scoring.evaluation import evaluate
from focus_tune.sim.adam_patch import eager_optimizers
from focus_tune.sim.device_split import DeviceSplit
from focus_tune.sim.model import Simulator
from focus_tune.sim.regularization import LambdaSchedule
from focus_tune.sim.train import LearningRate, seed_everything, train_one_epoch

KINDS = {"const": "constant", "oc": "onecycle", "decay": "decay"}  # recipe kind -> lr_schedule
KEYS = ("marginal/ece", "marginal/ce", "marginal/auc", "interval/coverage", "interval/relative_width")


def main() -> None:
    eager_optimizers()  # a process that trains: Adam without the torch._dynamo import (focus_tune/sim/adam_patch.py)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipes", nargs="*", help="kind:epochs:lr[:batch], kind const, oc or decay")
    ap.add_argument("--game", default="hero")
    ap.add_argument("--data-root", default="data_cache")
    ap.add_argument("--blind", action="store_true", help="also print the image-blind reference line")
    ap.add_argument("--seeds", default="0", type=seed_list, help="training seeds: 0, 0,3,5 or 0-9 (default 0)")
    ap.add_argument("--score-last", type=int, default=1, help="score each of the last N epochs (default 1)")
    ap.add_argument("--samples", type=int, default=100, help="M of the test evaluation (default 100)")
    ap.add_argument("--estimator", default="counted", choices=ESTIMATORS,
                    help="the test evaluation's (default counted)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ds = load_dataset(ensure_dataset(args.game, "quick", args.data_root))
    m = ds.manifest
    train, test = DeviceSplit.from_arrays(ds.train), DeviceSplit.from_arrays(ds.test)
    lambdas = LambdaSchedule.none(m.length).tensor()
    if args.blind:
        blind = ImageBlind(ds.train.sequences, len(test), m.num_classes).marginals()
        out = metrics.sequence_metrics(blind, test.sequences.numpy(), 10)
        print(json.dumps({"game": args.game, "recipe": "image-blind", "marginal/ce": round(out["ce"], 4),
                          "marginal/auc": round(out["auc"], 4)}), flush=True)
    for recipe in args.recipes:
        parts = recipe.split(":")
        kind, epochs, lr = parts[0], int(parts[1]), float(parts[2])
        batch = int(parts[3]) if len(parts) > 3 else 64
        schedule = LearningRate.of(lr, KINDS[kind], epochs, len(train), batch)
        steps = -(-len(train) // batch)
        for seed in args.seeds:
            gen = seed_everything(seed)
            model = Simulator(m.num_classes, "resnet18", 128, 128, m.image_shape[0], encoder_width=32)
            opt = torch.optim.Adam(model.parameters(), lr=lr)
            train_s = 0.0
            for e in range(epochs):
                t0 = time.perf_counter()
                out = train_one_epoch(model, opt, train, lambdas, batch, gen, lr=schedule, step=e * steps)
                train_s += time.perf_counter() - t0
                if e + 1 > epochs - args.score_last:  # train_one_epoch puts the model back in training mode
                    res = evaluate(model.eval(), test, args.samples, m.event_class, torch.Generator().manual_seed(0),
                                   10, 0.9, estimator=args.estimator)
                    print(json.dumps({"game": args.game, "recipe": recipe, "seed": seed, "epoch": e + 1,
                                      "train_s": round(train_s), "train_loss": round(out["train/loss"], 4),
                                      **{k: round(res[k], 4) for k in KEYS}}), flush=True)


if __name__ == "__main__":
    main()
