"""Where the noise of a validation score comes from: training seed, Monte Carlo draws, items.

Reads a finished search's run folder (``runs/<game>-<profile>-seed<seed>``) and re-evaluates
the validation split with the finals' models: each family's winner retrained with 3 seeds
(9 models; same schedule within a family, only the training seed differs). Every model's
validation marginal ECE is computed ``--draws`` times with independent Monte Carlo generators
(M as in the search, the search's evaluation code), and each evaluation is bootstrapped over
the validation items. Printed per family and pooled over the families:

* Monte Carlo: the SD of one model's score over generators (the pooled within-model SD);
* training seed: the SD of the models' true scores within a family, from the spread of their
  mean scores minus the Monte Carlo part (var(means) - var_MC / draws, floored at 0);
* items: the bootstrap SD of one evaluation's score over resampled validation items.

and, for a staged decision (two candidates compared on the same items, each trained once,
each evaluated once): the SD of the difference of two scores from each source, and the
paired item part (the bootstrap SD of the difference between two models on the same
resamples, which is what the shared items contribute to a decision). The search's own
evaluation draws the same uniforms for every candidate of an epoch; the draws here are
independent, so the Monte Carlo part is an upper bound for a decision's.

    python benchmarks/bench_noise.py runs/hero-quick-seed0 [--draws 2] [--boot 200] [--threads 2]
"""

import argparse
import json
import math
import re
import time
from pathlib import Path

import numpy as np
import torch

from focus_tune.config.space import load_search_config, space_path
from focus_tune.data import load_dataset
from focus_tune.names import FAMILIES
from focus_tune.procedure.plan import SearchPlan
from focus_tune.scoring.evaluation import evaluate, evaluation_generator
from focus_tune.scoring.metrics import sequence_ece
from focus_tune.scoring.temperature import paired_bootstrap_se
from focus_tune.sim.device_split import DeviceSplit
from focus_tune.sim.model_io import DataInfo, build_model


def checkpoint_of(run: Path, trial_id: str, sources: dict) -> Path:
    """The weights of a trial: its own last checkpoint, or (a seed-0 final that only evaluated
    a search trial's model) its source trial's."""
    for tid in (trial_id, sources.get(trial_id)):
        found = sorted(run.glob(f"search*/{tid}/checkpoint_*/checkpoint.pt")) if tid else []
        if found:
            return found[-1]
    raise SystemExit(f"{run}: no checkpoint of {trial_id}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path, help="a finished search's run folder")
    ap.add_argument("--draws", type=int, default=2, help="Monte Carlo evaluations per model (>= 2)")
    ap.add_argument("--boot", type=int, default=200, help="bootstrap resamples of the validation items")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    state = json.loads((args.run / "search_state.json").read_text())
    game, profile, seed = re.fullmatch(r"(.+)-(\w+)-seed(\d+)", args.run.name).groups()
    cfg = load_search_config(space_path(game), profile)
    dataset = load_dataset(state["fingerprint"]["data"])
    m = dataset.manifest
    info = DataInfo.of(m)
    train = cfg.train
    val = DeviceSplit.from_arrays(dataset.val, items=train.val_items)
    labels = val.sequences.numpy()
    seeds = [t for t in state["results"] if re.fullmatch(r"final-none-s\d+", t)]
    plan = SearchPlan(cfg.grid, length=m.length, seed=int(seed), final_seeds=len(seeds))
    sources = {t.trial_id: t.source_trial for t in plan.all_trials(state["results"])}
    finals = sorted(t for t in state["results"]
                    if any(re.fullmatch(rf"final-{re.escape(f)}-s\d+", t) for f in args.families))
    print(f"{args.run}: {game} {profile}, {len(labels)} validation items, M = {train.num_samples}, "
          f"{args.draws} Monte Carlo draws per model, {args.boot} bootstrap resamples, {len(finals)} final models")
    scores, probs, started = {}, {}, time.perf_counter()
    for trial_id in finals:
        model = build_model(train, info)
        model.load_state_dict(torch.load(checkpoint_of(args.run, trial_id, sources), map_location="cpu",
                                         weights_only=True)["model"])
        runs = []
        spec_seed = int(re.search(r"-s(\d+)$", trial_id).group(1))
        epoch = int(state["finals"].get(trial_id, {}).get("epoch", train.epochs))
        for d in range(args.draws):
            # Draw 0 repeats the search's own validation draw (its generator), so its score must
            # equal the recorded one; the others are fresh generators.
            gen = evaluation_generator(spec_seed, epoch) if d == 0 else torch.Generator().manual_seed(1_000_003 * d + 7)
            out = evaluate(model, val, train.num_samples, info.event, gen, train.ece_bins, train.alpha,
                           event_sampling=train.event_sampling, per_entry=True)
            runs.append(out["marginal/ece"])
            probs.setdefault(trial_id, out["probs"])  # the first draw, for the bootstrap
        scores[trial_id] = runs
        recorded = state["results"][trial_id]
        print(f"  {trial_id:26s} val ECE per draw {' '.join(f'{x:.4f}' for x in runs)} "
              f"(recorded in the search: {recorded:.4f})", flush=True)
    elapsed = time.perf_counter() - started

    def on_items(p, idx):
        return sequence_ece(p[idx], labels[idx], train.ece_bins)

    zero = np.zeros_like(next(iter(probs.values())))
    item_sd = {t: paired_bootstrap_se(on_items, probs[t], zero, len(labels), args.boot, seed=1)
               for t in finals}  # a constant predictor scores the same on every resample: no pairing
    rows, pooled = [], {"mc": [], "between": [], "items": [], "pair_items": []}
    for fam in args.families:
        ids = [t for t in finals if re.fullmatch(rf"final-{re.escape(fam)}-s\d+", t)]
        if len(ids) < 2:
            continue
        s = np.array([scores[t] for t in ids])  # (seeds, draws)
        var_mc = float(s.var(axis=1, ddof=1).mean())
        var_between = float(s.mean(axis=1).var(ddof=1))
        var_train = max(0.0, var_between - var_mc / args.draws)
        items = float(np.mean([item_sd[t] for t in ids]))
        pair_items = paired_bootstrap_se(on_items, probs[ids[0]], probs[ids[1]], len(labels), args.boot, seed=2)
        rows.append((fam, len(ids), s.mean(), math.sqrt(var_mc), math.sqrt(var_train), items, pair_items))
        pooled["mc"].append(var_mc)
        pooled["between"].append(var_train)
        pooled["items"].append(items)
        pooled["pair_items"].append(pair_items)
    print(f"({elapsed:.0f} s of evaluations)\n")
    print("family            seeds  mean val ECE   SD Monte Carlo   SD training seed   SD items   "
          "SD items, paired difference")
    for fam, n, mean, mc, tr, it, pit in rows:
        print(f"{fam:16s} {n:6d}  {mean:12.4f}   {mc:14.4f}   {tr:16.4f}   {it:8.4f}   {pit:10.4f}")
    mc, tr = math.sqrt(np.mean(pooled["mc"])), math.sqrt(np.mean(pooled["between"]))
    it, pit = float(np.mean(pooled["items"])), float(np.mean(pooled["pair_items"]))
    print(f"{'pooled':16s} {'':6s}  {'':12s}   {mc:14.4f}   {tr:16.4f}   {it:8.4f}   {pit:10.4f}")
    print("\nSD of the difference of two candidates' scores (each trained once, evaluated once, same items):")
    print(f"  training seeds {math.sqrt(2) * tr:.4f} | Monte Carlo (independent draws) {math.sqrt(2) * mc:.4f} | "
          f"items (paired) {pit:.4f} | all {math.sqrt(2 * tr**2 + 2 * mc**2 + pit**2):.4f}")
    print("one score alone (vs its expectation over seeds, draws and validation sets): "
          f"{math.sqrt(tr**2 + mc**2 + it**2):.4f}")


if __name__ == "__main__":
    main()
