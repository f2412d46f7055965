"""Temperature scaling of the unregularized model: which fit makes it a fair baseline.

Trains ONE unregularized ('none') model with a profile's training settings
(search_spaces/<game>.yaml, default H.E.R.O. quick) on that profile's cached dataset, then
fits temperatures on the validation split and evaluates the test split with the project's
Monte Carlo evaluation (evaluation.evaluate, the profile's M, the same generator seed for every
variant, so the variants share their uniforms):

* unscaled: T = 1;
* old per-entry (all rows): one T per entry on every validation row, dead rows included
  (the fit the trainable used before focus_tune/scoring/temperature.py);
* (a) pooled: one T on the live rows (focus_tune.scoring.temperature.fit_pooled);
* (b) per-entry live: one T per entry with >= --min-rows live rows, pooled elsewhere
  (fit_per_entry);
* (c) grid: one T on --grid chosen by the validation *sampled* marginal ECE, the way the
  search chooses lambda (choose_staged, one T for all entries).

Printed per variant: sequence-level marginal ECE, ECE over entries 1-40 and 41-L (1-based),
CE, coverage of I_alpha, the fraction of intervals that end at L, the leak, and the
temperatures (pooled value, range, how many at a bound). The conditional metrics are not
evaluated (they double the sampling and do not bear on the choice).

    python benchmarks/bench_temperature.py --out docs/results/temperature/bench.txt
"""

import argparse
import os
import sys
import time

import numpy as np
import torch

from focus_tune.config.space import load_search_config, space_path
from focus_tune.data import ensure_dataset, load_dataset
from focus_tune.scoring import temperature as temp
from focus_tune.scoring.evaluation import evaluate, teacher_forced_logits
from focus_tune.sim.adam_patch import eager_optimizers
from focus_tune.sim.device_split import DeviceSplit
from focus_tune.sim.model_io import DataInfo, build_model
from focus_tune.sim.regularization import LambdaSchedule
from focus_tune.sim.train import seed_everything, train_one_epoch


def old_per_entry(logits: torch.Tensor, labels: np.ndarray) -> temp.TemperatureFit:
    """The previous fit: one T per entry on all rows, dead ones included (baselines.fit_temperatures).

    Reproduced with the module's own bisection (mask None = every row) so that this benchmark
    keeps running once the old function is removed from focus_tune/scoring/baselines.py.
    """
    z, y = temp._check(logits, labels)
    t = np.concatenate([temp._bisect(z[:, a : a + 32], y[:, a : a + 32], None, temp.BOUNDS, 60)
                        for a in range(0, z.shape[1], 32)])
    L = z.shape[1]
    return temp.TemperatureFit(t, float("nan"), int(temp._on_bound(t, temp.BOUNDS).sum()),
                               np.full(L, z.shape[0]), np.ones(L, dtype=bool), "old per-entry (all rows)")


def main() -> None:
    eager_optimizers()  # a process that trains: Adam without the torch._dynamo import (focus_tune/sim/adam_patch.py)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--game", default="hero")
    ap.add_argument("--profile", default="quick", choices=("smoke", "quick", "paper"))
    ap.add_argument("--epochs", type=int, help="default: the profile's")
    ap.add_argument("--seed", type=int, default=0, help="training seed")
    ap.add_argument("--eval-seeds", type=int, nargs="+", default=[1],
                    help="generator seeds of the test evaluation (each variant uses each)")
    ap.add_argument("--min-rows", type=int, default=temp.MIN_LIVE_ROWS)
    ap.add_argument("--grid", type=float, nargs="+", default=list(temp.GRID))
    ap.add_argument("--split-entry", type=int, default=41, help="first entry (1-based) of the late range")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-root", default="data_cache")
    ap.add_argument("--model-cache", help="reuse / store the trained model's state here")
    ap.add_argument("--out", help="also write the printed table to this file")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    cfg = load_search_config(space_path(args.game), args.profile)
    tc = cfg.train
    ds = load_dataset(ensure_dataset(args.game, args.profile, args.data_root, seed=0))
    m = ds.manifest
    info = DataInfo.of(m)
    train = DeviceSplit.from_arrays(ds.train)
    val = DeviceSplit.from_arrays(ds.val, items=tc.val_items)
    test = DeviceSplit.from_arrays(ds.test, items=tc.test_items)
    epochs = args.epochs or tc.epochs
    L, event, M = m.length, m.event_class, tc.num_samples
    say(f"{args.game} {args.profile}: {len(train)}/{len(val)}/{len(test)} train/val/test items, L={L}, M={M}, "
        f"{epochs} epochs (profile: {tc.epochs}), lr {tc.lr}, batch {tc.batch_size}, {tc.encoder} width "
        f"{tc.encoder_width} {tc.embed_dim}/{tc.hidden}, event_sampling={tc.event_sampling}, "
        f"training seed {args.seed}, "
        f"{args.threads} thread(s)")

    model = build_model(tc, info)
    t0 = time.perf_counter()
    if args.model_cache and os.path.exists(args.model_cache):
        model.load_state_dict(torch.load(args.model_cache, weights_only=True))
        say(f"model: loaded {args.model_cache}")
    else:
        gen = seed_everything(args.seed)
        opt = torch.optim.Adam(model.parameters(), lr=tc.lr)
        for _ in range(epochs):
            train_one_epoch(model, opt, train, LambdaSchedule.none(L).tensor(), tc.batch_size, gen)
        say(f"model: trained unregularized in {time.perf_counter() - t0:.0f} s")
        if args.model_cache:
            torch.save(model.state_dict(), args.model_cache)

    common = dict(event=event, n_bins=tc.ece_bins, alpha=tc.alpha, event_sampling=tc.event_sampling)
    val_labels = val.sequences.numpy()
    live = temp.live_mask(val_labels, event).sum(0)
    last_live = int(np.flatnonzero(live > 0).max()) + 1
    say(f"validation live rows: entry 1 {live[0]}, entry 10 {live[min(9, L - 1)]}, entry 20 {live[min(19, L - 1)]}, "
        f"entry 41 {live[min(40, L - 1)]}; last entry with a live row {last_live}; "
        f"entries with >= {args.min_rows} live rows: {int((live >= args.min_rows).sum())}")

    t0 = time.perf_counter()
    z = teacher_forced_logits(model, val)
    fits = {"unscaled": None, "old per-entry (all rows)": old_per_entry(z, val_labels),
            "(a) pooled live": temp.fit_pooled(z, val_labels, event),
            "(b) per-entry live": temp.fit_per_entry(z, val_labels, event, min_rows=args.min_rows)}
    say(f"NLL fits: {time.perf_counter() - t0:.1f} s")

    t0 = time.perf_counter()

    def val_ece(t: float) -> float:  # the search's criterion: validation sampled marginal ECE
        r = evaluate(model, val, M, generator=torch.Generator().manual_seed(10_007), temperature=torch.full((L,), t),
                     **common)
        return r["marginal/ece"]

    def lowest(scored, se):  # the lowest validation ECE, no tie rule: what the grid alone says
        return min(range(len(scored)), key=lambda i: scored[i][0])

    grid = temp.choose_staged(lambda t: val_ece(float(t[0])), args.grid, L, 0, lowest, lambda a, b: 0.0, live)
    fits["(c) grid by val ECE"] = grid
    say(f"(c) grid, validation sampled marginal ECE ({time.perf_counter() - t0:.0f} s): "
        + "  ".join(f"T={g:g}: {s:.4f}" for g, s in grid.scores["all"].items()) + f"  -> T={grid.pooled:g}")

    s = args.split_entry - 1
    say()
    say(f"test split, {len(test)} items, M={M}, generator seed(s) {args.eval_seeds} shared by every variant; "
        f"ECE early = entries 1-{s}, late = {s + 1}-{L}; end@L = fraction of intervals with hi = L")
    header = (f"{'variant':26s} {'ECE':>7s} {'ECE1-' + str(s):>8s} {'ECE' + str(s + 1) + '-' + str(L):>9s} "
              f"{'CE':>7s} {'cover':>6s} {'width':>6s} {'end@L':>6s} {'leak':>6s} {'p_stay':>7s}  temperatures")
    say(header)
    say("-" * len(header))
    for name, fit in fits.items():
        tvec = None if fit is None else torch.as_tensor(fit.temperature)
        rows = []
        for es in args.eval_seeds:
            t0 = time.perf_counter()
            r = evaluate(model, test, M, generator=torch.Generator().manual_seed(es), per_entry=True,
                         temperature=tvec, **common)
            ece = np.asarray(r["per_entry"]["marginal"]["ece"])
            hi = np.asarray(r["per_entry"]["interval"]["hi"])
            rows.append([r["marginal/ece"], ece[:s].mean(), ece[s:].mean(), r["marginal/ce"],
                         r["interval/coverage"], r["interval/relative_width"], float((hi >= L).mean()),
                         r["marginal/leak"], r["marginal/p_stay"], time.perf_counter() - t0])
        v = np.mean(rows, axis=0)
        if fit is None:
            desc = "T = 1"
        else:
            own = f", {int(fit.own_fit.sum())} own" if fit.method == "per-entry" else ""
            pooled = "" if np.isnan(fit.pooled) else f"pooled {fit.pooled:.3f}, "
            desc = (f"{pooled}range {fit.temperature.min():.3f}..{fit.temperature.max():.3f}, "
                    f"mean {fit.temperature.mean():.3f}{own}, at bound {fit.at_bound}/{L}")
        say(f"{name:26s} {v[0]:7.4f} {v[1]:8.4f} {v[2]:9.4f} {v[3]:7.4f} {v[4]:6.3f} {v[5]:6.3f} {v[6]:6.3f} "
            f"{v[7]:6.3f} {v[8]:7.4f}  {desc}")
        if len(rows) > 1:
            sd = np.std(rows, axis=0, ddof=1)
            say(f"{'  (sd over eval seeds)':26s} {sd[0]:7.4f} {sd[1]:8.4f} {sd[2]:9.4f} {sd[3]:7.4f} {sd[4]:6.3f} "
                f"{sd[5]:6.3f} {sd[6]:6.3f} {sd[7]:6.3f} {sd[8]:7.4f}")
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as handle:
            handle.write("$ python benchmarks/bench_temperature.py " + " ".join(
                a for a in sys.argv[1:]) + "\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
