"""Where does the paper's effect live on a laptop? A sweep of training-set size x epochs x width.

For each (training-set size, model width, schedule, seed, dataset draw) the script builds the
scenario's built-in dataset with that many training items (the same validation and test frames
for every size; ``--data-seeds`` draws other datasets, as a search's ``--seed`` does), trains
the simulator with the quick profile's optimiser settings (the learning rate, its schedule and
the batch size each a flag), and scores the test split every few epochs, the model of that
epoch as it stands (the paper scores the last epoch), against references scored on the same
items:

* image-blind: every item gets the per-entry class frequencies of the training sequences;
* exact: the true marginals of the data's generator (their AUC is the best achievable);
* with ``--references``: the report's reference rows (``image-blind``, ``oracle``,
  ``exact``), each through the profile's estimator and M (``baseline_rows``), as the
  searches score them, so the model's ECE stands beside the oracle's with the same noise.

Each line of the JSONL output is one (configuration, epoch) with test macro AUC, CE, ECE,
overconfidence, coverage and relative width of I_0.9, the train loss and the reference
values. A configuration whose last epoch is already in ``--out`` is skipped, so a stopped
sweep resumes where it was (a configuration cut off midway runs again from epoch 1).
`--plot` turns a JSONL file into the figure of docs/RESULTS.md.

    python benchmarks/regime_sweep.py --game hero --sizes 500 2000 --epochs 30 --every 5 \
        --schedules none l1..3=0.05 --out sweep-hero.jsonl
    # the paper's recipe shape: a constant rate, the last epoch scored, 1000 test items
    python benchmarks/regime_sweep.py --game facemed --sizes 250 500 --epochs 120 --every 20 \
        --lr 1e-3 --lr-schedule constant --test-items 1000 --references --out sweep-facemed-constant.jsonl
    # a cell judged across dataset draws too (a search's --seed r draws its own data)
    python benchmarks/regime_sweep.py --game hero --sizes 250 --epochs 160 --every 20 --lr 1e-3 \
        --lr-schedule constant --test-items 1000 --references --build-size 1000 --schedules none \
        --data-seeds 3 6 9 --out sweep-hero-constant.jsonl
    python benchmarks/regime_sweep.py --plot sweep-hero.jsonl sweep-facemed.jsonl --figure docs/img/regime_sweep.png
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch

from focus_tune.config.space import load_search_config, space_path
from focus_tune.data import load_dataset
from focus_tune.data.builtin.profiles import FACEMED, get_spec
from focus_tune.scoring import metrics
from focus_tune.scoring.baselines import ImageBlind
from focus_tune.scoring.evaluation import Scoring, evaluate
from focus_tune.sim.adam_patch import eager_optimizers
from focus_tune.sim.device_split import DeviceSplit
from focus_tune.sim.model import Simulator
from focus_tune.sim.regularization import LambdaSchedule
from focus_tune.sim.train import LR_SCHEDULES, LearningRate, seed_everything, train_one_epoch

SCHEDULES = {
    "none": lambda L: LambdaSchedule.none(L),
    "l1..3=0.05": lambda L: LambdaSchedule.staged([0.05, 0.05, 0.05], 0.0, 1, L),
    "l1..3=0.05,l4..11=0.005": lambda L: LambdaSchedule.staged([0.05, 0.05, 0.05], 0.005, 11, L),
    "const=0.005": lambda L: LambdaSchedule.constant(0.005, L),
    "const=0.05": lambda L: LambdaSchedule.constant(0.05, L),
    "l1..3=0.5": lambda L: LambdaSchedule.staged([0.5, 0.5, 0.5], 0.0, 1, L),
    "l1..3=0.5,l4..11=0.05": lambda L: LambdaSchedule.staged([0.5, 0.5, 0.5], 0.05, 11, L),
}


def done_configs(path: str | None, epochs: int) -> set[tuple]:
    """(game, size, width, schedule, seed, lr, lr_schedule, data seed) of the configurations
    whose last epoch is in the JSONL file ``path`` already."""
    if not path or not Path(path).exists():
        return set()
    done = set()
    for line in open(path):
        if line.strip():
            r = json.loads(line)
            if r["epoch"] == epochs:
                done.add(_key(r))
    return done


def drop_unfinished(path: str | None, epochs: int, planned: set[tuple]) -> int:
    """Rewrite the JSONL file ``path`` without the rows of the ``planned`` configurations that
    were cut off before their last epoch (they run again whole); returns how many rows went."""
    if not path or not Path(path).exists():
        return 0
    rows = [line for line in open(path) if line.strip()]
    done = done_configs(path, epochs)
    keep = [line for line in rows if (key := _key(json.loads(line))) not in planned or key in done]
    if len(keep) < len(rows):
        Path(path).write_text("".join(keep))
    return len(rows) - len(keep)


def _key(r: dict) -> tuple:
    return (r["game"], r["train_items"], r["width"], r["schedule"], r["seed"], r.get("lr"), r.get("lr_schedule"),
            r.get("data_seed", 0))


_REFERENCES: dict[tuple, dict] = {}


def references(ds, size: int, scoring) -> dict:
    """The report's reference rows on the test split (image-blind of the first ``size``
    training items, oracle, exact), each scored as the searches score them; cached per size."""
    from focus_tune.scoring.baselines import baseline_rows

    key = (str(ds.path), size, scoring)
    if key not in _REFERENCES:
        train = dataclasses.replace(ds.train, images=ds.train.images[:size], sequences=ds.train.sequences[:size],
                                    time_to_event=ds.train.time_to_event[:size], extras={},
                                    exact_marginals=None, observed_length=None)
        view = _View(ds.path, ds.manifest, train, ds.test)
        t0 = time.time()
        rows = baseline_rows(view, scoring, seeds=[0])
        out = {}
        for family, fam_rows in rows.items():
            for k in ("marginal/ece", "marginal/ce", "marginal/auc", "marginal/overconfidence",
                      "interval/coverage", "interval/relative_width"):
                if fam_rows and f"test/{k}" in fam_rows[0]:
                    out[f"ref/{family}/{k.split('/')[1]}"] = float(fam_rows[0][f"test/{k}"])
        print(f"references for n={size}: {time.time() - t0:.0f} s", flush=True)
        _REFERENCES[key] = out
    return _REFERENCES[key]


@dataclasses.dataclass(frozen=True)
class _View:
    """A dataset whose training split is cut to the sweep's size (what baseline_rows reads)."""

    path: Path
    manifest: object
    train: object
    test: object


def build(game: str, train_items: int, root: Path, seed: int = 0) -> Path:
    """The quick dataset of `game` with `train_items` training items (cached under root)."""
    spec = dataclasses.replace(get_spec(game, "quick"), train=train_items)
    out = root / f"{game}-quick-n{train_items}-seed{seed}"
    if (out / "manifest.json").exists():
        return out
    if game == FACEMED:
        from focus_tune.data.builtin.facemed import build_facemed

        return build_facemed(spec, out, seed)
    from focus_tune.data.builtin.ale import build_atari

    return build_atari(spec, out, seed)


def run_config(args, game: str, size: int, width: int, schedule: str, seed: int, out, data_seed: int = 0) -> None:
    """Train one configuration on dataset draw ``data_seed``; score the test split every `--every` epochs."""
    cfg = load_search_config(space_path(game), "quick").train
    lr, lr_schedule = args.lr or cfg.lr, args.lr_schedule or cfg.lr_schedule
    ds = load_dataset(build(game, max(args.sizes + [args.build_size]), Path(args.data_root), data_seed))
    m = ds.manifest
    train = DeviceSplit.from_arrays(ds.train, items=size)  # the first `size` items: same val/test for every size
    test = DeviceSplit.from_arrays(ds.test, items=args.test_items)
    labels = test.sequences.numpy()
    blind_probs = ImageBlind(ds.train.sequences[:size], len(test), m.num_classes).marginals()
    blind = metrics.sequence_metrics(blind_probs, labels, cfg.ece_bins)
    exact = metrics.sequence_metrics(test.exact_marginals, labels, cfg.ece_bins)
    gen = seed_everything(seed)
    hidden = args.hidden or cfg.hidden
    model = Simulator(m.num_classes, cfg.encoder, hidden, hidden, m.image_shape[0], encoder_width=width)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    lambdas = SCHEDULES[schedule](m.length).tensor()
    batch = args.batch_size or cfg.batch_size
    rate = LearningRate.of(lr, lr_schedule, args.epochs, len(train), batch)
    refs = references(ds, size, Scoring.of(dataclasses.replace(cfg, test_items=args.test_items))) \
        if args.references else {}
    t0 = time.time()
    for epoch in range(1, args.epochs + 1):
        loss = train_one_epoch(model, opt, train, lambdas, batch, gen, lr=rate,
                               step=(epoch - 1) * -(-len(train) // batch))["train/loss"]
        if epoch % args.every and epoch != args.epochs:
            continue
        # The profile's estimator and M, as its finals are scored
        r = evaluate(model, test, cfg.num_samples, m.event_class, torch.Generator().manual_seed(1000 + epoch),
                     cfg.ece_bins, cfg.alpha, estimator=cfg.estimator)
        row = {"game": game, "train_items": size, "width": width, "schedule": schedule, "seed": seed,
               **({"data_seed": data_seed} if data_seed else {}),
               "lr": lr, "lr_schedule": lr_schedule, "batch_size": batch, "test_items": len(test),
               "epoch": epoch, "train_loss": loss, "seconds": time.time() - t0, **refs,
               **{k: float(v) for k, v in r.items() if isinstance(v, (int, float))},
               "blind/auc": blind["auc"], "blind/ce": blind["ce"], "blind/ece": blind["ece"],
               "exact/auc": exact["auc"], "exact/ce": exact["ce"]}
        print(f"{game} n={size} w={width} {schedule} s{seed} d{data_seed} ep {epoch:3d} loss {loss:.3f} | "
              f"AUC {row['marginal/auc']:.3f} (blind {blind['auc']:.3f}, exact {exact['auc']:.3f}) "
              f"CE {row['marginal/ce']:.4f} (blind {blind['ce']:.4f}, exact {exact['ce']:.4f}) "
              f"ECE {row['marginal/ece']:.4f} (oracle {refs.get('ref/oracle/ece', float('nan')):.4f}) "
              f"overconf {row.get('marginal/overconfidence', float('nan')):+.3f} cov {row['interval/coverage']:.2f} "
              f"w {row['interval/relative_width']:.2f} | {row['seconds']:.0f} s", flush=True)
        out.write(json.dumps(row) + "\n")
        out.flush()


def plot(files: list[str], figure: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for f in files for line in open(f) if line.strip()]
    games = sorted({r["game"] for r in rows})
    panels = [("marginal/auc", "test macro AUC"), ("marginal/ce", "test CE"),
              ("marginal/ece", "test ECE"), ("interval/coverage", "coverage of I_0.9")]
    fig, axes = plt.subplots(len(games), len(panels), figsize=(4 * len(panels), 3.2 * len(games)), squeeze=False)
    for gi, game in enumerate(games):
        g = [r for r in rows if r["game"] == game]
        configs = sorted({(r["train_items"], r["width"], r["schedule"]) for r in g})
        for pi, (key, title) in enumerate(panels):
            ax = axes[gi, pi]
            for ci, (n, w, s) in enumerate(configs):
                sel = [r for r in g if (r["train_items"], r["width"], r["schedule"]) == (n, w, s)]
                epochs = sorted({r["epoch"] for r in sel})
                mean = [np.mean([r[key] for r in sel if r["epoch"] == e]) for e in epochs]
                style = "-" if s == "none" else "--"
                colour = f"C{sorted({c[:2] for c in configs}).index((n, w))}"
                ax.plot(epochs, mean, style, marker="o", ms=3, color=colour,
                        label=f"n={n} w={w} {s}")
            ref = {"marginal/auc": ("blind/auc", "exact/auc"), "marginal/ce": ("blind/ce", "exact/ce"),
                   "marginal/ece": ("blind/ece", None), "interval/coverage": (None, None)}[key]
            if ref[0]:
                ax.axhline(np.mean([r[ref[0]] for r in g]), color="grey", ls=":", label="image-blind")
            if ref[1]:
                ax.axhline(np.mean([r[ref[1]] for r in g]), color="black", ls=":", label="exact")
            if key == "marginal/ece" and all("ref/oracle/ece" in r for r in g):  # scored as the model is
                ax.axhline(np.mean([r["ref/oracle/ece"] for r in g]), color="green", ls=":", label="oracle")
            if key == "interval/coverage" and all("ref/oracle/coverage" in r for r in g):
                ax.axhline(np.mean([r["ref/oracle/coverage"] for r in g]), color="green", ls=":", label="oracle")
            if key == "interval/coverage":
                ax.axhline(0.9, color="black", ls=":", label="nominal 0.9")
            ax.set_title(f"{game}: {title}")
            ax.set_xlabel("epoch")
        axes[gi, 0].legend(fontsize=6)
    fig.tight_layout()
    Path(figure).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure, dpi=110)
    print(f"wrote {figure}")


def regime_table(files: list[str]) -> list[str]:
    """Per scenario, cell (items, recipe) and scored epoch: ``none``'s median over its runs (its
    seeds on every dataset draw) against the paper's regime
    (focus_tune.replicate.regime.PAPER_REGIME), each check's value beside its limit, the
    training work (item-epochs) it took, and on how many dataset draws the check passed when
    judged on that draw's runs alone (a search draws its own data, so a cell judged on one draw
    says little of the next)."""
    from focus_tune.replicate.regime import PAPER_REGIME, check_run, sweep_run

    rows = [json.loads(line) for f in files for line in open(f) if line.strip()]
    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["schedule"] == "none":
            cells.setdefault((r["game"], r["train_items"], r["width"], r.get("lr"), r.get("lr_schedule")), []).append(r)
    out = ["| scenario | items | lr | epoch | item-epochs | runs | coverage | ECE − oracle's | CE − image-blind's "
           "| regime | draws kept |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for (game, n, width, lr, schedule), cell in sorted(cells.items(), key=lambda kv: tuple(map(str, kv[0]))):
        for epoch in sorted({r["epoch"] for r in cell}):
            # a run is (draw, seed); rows from before --data-seeds are draw 0
            at = [{**r, "data_seed": (d := r.get("data_seed", 0)), "seed": f"{d}/{r['seed']}"}
                  for r in cell if r["epoch"] == epoch]
            draws = sorted({r["data_seed"] for r in at})
            med = {k: float(np.median([r[k] for r in at]))
                   for k in ("interval/coverage", "marginal/ece", "marginal/ce")}
            oracle = float(np.median([r.get("ref/oracle/ece", np.nan) for r in at]))
            blind = float(np.median([r.get("ref/image-blind/ce", np.nan) for r in at]))
            kept = not check_run(sweep_run(at, epoch), PAPER_REGIME)
            per_draw = sum(not check_run(sweep_run([r for r in at if r["data_seed"] == d], epoch), PAPER_REGIME)
                           for d in draws)
            out.append(f"| {game} | {n} | {lr:g} {schedule} | {epoch} | {n * epoch} | {len(at)} | "
                       f"{med['interval/coverage']:.3f} | {med['marginal/ece'] - oracle:+.4f} | "
                       f"{med['marginal/ce'] - blind:+.4f} | {'**yes**' if kept else 'no'} | {per_draw}/{len(draws)} |")
    return out


def main() -> None:
    eager_optimizers()  # a process that trains: Adam without the torch._dynamo import (focus_tune/sim/adam_patch.py)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--game", default="hero")
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 2000])
    ap.add_argument("--widths", type=int, nargs="+", default=None,
                    help="ResNet-18 first-stage channels (default: the quick profile's)")
    ap.add_argument("--hidden", type=int, default=None, help="LSTM hidden size (default: the quick profile's)")
    ap.add_argument("--schedules", nargs="+", default=["none", "l1..3=0.05"], choices=list(SCHEDULES))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--data-seeds", type=int, nargs="+", default=[0],
                    help="dataset draws (the built-in data's seed, as a search's --seed draws it); each seed trains "
                         "on each draw")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--lr", type=float, default=None, help="default: the quick profile's")
    ap.add_argument("--lr-schedule", choices=LR_SCHEDULES, default=None,
                    help="default: the quick profile's (decay); constant is the paper's")
    ap.add_argument("--references", action="store_true",
                    help="score the report's reference rows (image-blind, oracle, exact) with the profile's "
                         "estimator and M on the same test items, once per training size")
    ap.add_argument("--batch-size", type=int, default=None, help="default: the quick profile's")
    ap.add_argument("--build-size", type=int, default=0,
                    help="build the dataset with this many training items (at least max(--sizes)), so that runs "
                         "with other --sizes share it")
    ap.add_argument("--test-items", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-root", default="data_cache/sweep")
    ap.add_argument("--out", default=None, help="JSONL file to append rows to")
    ap.add_argument("--plot", nargs="+", default=None, help="JSONL files to plot instead of running")
    ap.add_argument("--regime", nargs="+", default=None,
                    help="JSONL files (written with --references) to judge against the paper's regime instead of "
                         "running")
    ap.add_argument("--figure", default="docs/img/regime_sweep.png")
    args = ap.parse_args()
    if args.plot:
        plot(args.plot, args.figure)
        return
    if args.regime:
        print("\n".join(regime_table(args.regime)))
        return
    torch.set_num_threads(args.threads)
    cfg = load_search_config(space_path(args.game), "quick").train
    widths = args.widths or [cfg.encoder_width]
    lr, lr_schedule = args.lr or cfg.lr, args.lr_schedule or cfg.lr_schedule
    planned = [(args.game, size, width, schedule, seed, lr, lr_schedule, data_seed)
               for data_seed in args.data_seeds for size in args.sizes for width in widths for seed in args.seeds
               for schedule in args.schedules]
    dropped = drop_unfinished(args.out, args.epochs, set(planned))
    if dropped:
        print(f"dropped {dropped} rows of configurations cut off before epoch {args.epochs}", flush=True)
    done = done_configs(args.out, args.epochs)
    out = open(args.out, "a") if args.out else open("/dev/null", "w")
    for key in planned:
        if key in done:
            print(f"done already: {key}", flush=True)
            continue
        game, size, width, schedule, seed = key[:5]
        run_config(args, game, size, width, schedule, seed, out, data_seed=key[-1])


if __name__ == "__main__":
    main()
