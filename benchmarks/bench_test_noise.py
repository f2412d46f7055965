"""How much Monte Carlo noise does the test evaluation add, at the search's M and at fewer draws?

Reads finished searches' run folders (``runs/<game>-<profile>-seed<seed>``) and evaluates the
test split again with their final models (each family's winner retrained over the final
seeds), ``--draws`` times per model at each M of ``--samples`` (the search's estimator,
items and evaluation code). Draw 0 at the search's own M uses the search's test generator, so
its numbers must equal the recorded ones (results.csv; printed beside them); the other draws
use fresh generators. Per metric (the verdict's primary endpoints, CE and AUC) and per M:

* the mean score over the models and draws, and its shift from the first M (per model, the
  mean over its draws at this M minus at the first; mean over the models ± SE): fewer draws
  are not only noisier, a score that is not linear in the probabilities (CE, coverage, the
  interval score, AUC) moves with the noise;
* Monte Carlo, one score: the SD of one model's score over the draws (pooled over the models);
* Monte Carlo, paired difference: the SD over the draws of a family's score minus ``none``'s
  on the same seed. Draw d of every model of one seed uses the same uniforms (as the search's
  test evaluation does), so much of one score's Monte Carlo noise is common to both and
  cancels: this is the noise the verdict's paired differences carry;
* training seed, paired difference: the SD over the seeds of those differences (each the mean
  over its draws) minus their Monte Carlo part (floored at 0; pooled over families and runs),
  and the Monte Carlo share of the two.

    python benchmarks/bench_test_noise.py runs/replication/hero-quick-seed0 [RUN ...] --samples 50 25 \\
        --draws 2 [--threads 2] [--out scores.json]
    python benchmarks/bench_test_noise.py --scores scores.json   # the table again, nothing evaluated
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_noise import checkpoint_of  # noqa: E402

from focus_tune.config.space import load_search_config, space_path  # noqa: E402
from focus_tune.data import evaluation_groups, load_dataset  # noqa: E402
from focus_tune.names import FAMILIES  # noqa: E402
from focus_tune.procedure.plan import SearchPlan  # noqa: E402
from focus_tune.scoring.evaluation import evaluate, evaluation_generator  # noqa: E402
from focus_tune.sim.device_split import DeviceSplit  # noqa: E402
from focus_tune.sim.model_io import DataInfo, build_model  # noqa: E402

METRICS = ("marginal/ece", "marginal/ece_debiased", "interval/coverage", "interval/interval_score",
           "marginal/ce", "marginal/auc")


def recorded(run: Path) -> dict[tuple[str, int], dict[str, float]]:
    """(family, seed) -> the search's own test metrics (report/results.csv)."""
    out = {}
    with (run / "report" / "results.csv").open() as fh:
        for row in csv.DictReader(fh):
            if row["stat"] == "value" and row["family"] in FAMILIES:
                out[(row["family"], int(row["seed"]))] = {k: float(row[f"test/{k}"]) for k in METRICS
                                                          if row.get(f"test/{k}")}
    return out


def evaluate_run(run: Path, samples: list[int], draws: int) -> tuple[dict, int]:
    """{(family, seed): {M: [metrics of each draw]}} of one run folder, and its number of final seeds.
    Draw d > 0 uses one generator for every model (the same uniforms, as the search's test
    evaluation gives every family of a seed); draw 0 at the search's M is the search's own."""
    state = json.loads((run / "search_state.json").read_text())
    game, profile, seed = re.fullmatch(r"(.+)-(\w+)-seed(\d+)", run.name).groups()
    cfg = load_search_config(space_path(game), profile)
    train = cfg.train
    dataset = load_dataset(state["fingerprint"]["data"])
    info = DataInfo.of(dataset.manifest)
    test = DeviceSplit.from_arrays(dataset.test, items=train.test_items)
    groups = evaluation_groups({k: v[:len(test)] for k, v in dataset.test.extras.items()}, dataset.manifest.game)
    finals = sorted(t for t in state["results"] if re.fullmatch(r"final-.+-s\d+", t))
    seeds = len([t for t in finals if t.startswith("final-none-")])
    plan = SearchPlan(cfg.grid, length=dataset.manifest.length, seed=int(seed), final_seeds=seeds)
    sources = {t.trial_id: t.source_trial for t in plan.all_trials(state["results"])}
    truth = recorded(run)
    print(f"{run}: {game} {profile}, {len(test)} test items, {train.estimator} estimator, search M = "
          f"{train.num_samples}; M {samples}, {draws} draws per model, {len(finals)} final models", flush=True)
    scores = {}
    for trial_id in finals:
        family, s = re.fullmatch(r"final-(.+)-s(\d+)", trial_id).groups()
        s = int(s)
        model = build_model(train, info)
        model.load_state_dict(torch.load(checkpoint_of(run, trial_id, sources), map_location="cpu",
                                         weights_only=True)["model"])
        for M in samples:
            for d in range(draws):
                own = d == 0 and M == train.num_samples
                gen = (evaluation_generator(s, -1) if own
                       else torch.Generator().manual_seed(1_000_003 * (d + 1) + 7919 * M))
                out = evaluate(model, test, M, info.event, gen, train.ece_bins, train.alpha, groups=groups,
                               event_sampling=train.event_sampling, estimator=train.estimator)
                scores.setdefault((family, s), {}).setdefault(M, []).append({k: out[k] for k in METRICS})
                if own:
                    same = truth.get((family, s), {})
                    print(f"  {trial_id:24s} M = {M}: ECE {out['marginal/ece']:.6f} (recorded "
                          f"{same.get('marginal/ece', math.nan):.6f}), coverage {out['interval/coverage']:.4f} "
                          f"(recorded {same.get('interval/coverage', math.nan):.4f})", flush=True)
    return scores, seeds


def table(per_run: list[dict], samples: list[int]) -> str:
    """The summary of :func:`evaluate_run`'s scores, one line per (metric, M)."""
    first = samples[0]
    lines = [f"metric                    M    mean   shift from M = {first:<3d}   SD MC, one score   "
             "SD MC, paired diff.   SD seeds, paired diff.   MC share, paired diff."]
    models = [v for scores in per_run for v in scores.values()]
    for key in METRICS:
        for M in samples:
            mean = float(np.mean([d[key] for v in models for d in v[M]]))
            shifts = np.array([np.mean([d[key] for d in v[M]]) - np.mean([d[key] for d in v[first]]) for v in models])
            shift = (f"{shifts.mean():+.4f} ± {shifts.std(ddof=1) / math.sqrt(len(shifts)):.4f}"
                     if M != first and len(shifts) > 1 else "-")
            one = np.mean([np.var([d[key] for d in v[M]], ddof=1) for v in models])
            # A paired difference (family - none, one seed): draw d of both uses the same uniforms.
            var_mc, var_seed = [], []
            for scores in per_run:
                for family in FAMILIES:
                    if family == "none":
                        continue
                    diffs = np.array([[a[key] - b[key] for a, b in zip(v[M], scores[("none", seed)][M])]
                                      for (f, seed), v in sorted(scores.items())
                                      if f == family and ("none", seed) in scores])  # (seeds, draws)
                    if diffs.size == 0:
                        continue
                    mc = float(diffs.var(axis=1, ddof=1).mean())
                    var_mc.append(mc)
                    if len(diffs) > 1:
                        var_seed.append(max(0.0, float(diffs.mean(axis=1).var(ddof=1)) - mc / diffs.shape[1]))
            mc, tr = math.sqrt(np.mean(var_mc)), math.sqrt(np.mean(var_seed)) if var_seed else math.nan
            share = mc**2 / (mc**2 + tr**2) if mc + tr > 0 else math.nan
            lines.append(f"{key:24s} {M:3d}  {mean:6.4f}  {shift:>19s}   {math.sqrt(one):16.4f}   {mc:19.4f}   "
                         f"{tr:22.4f}   {share:22.2f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="*", type=Path, help="finished searches' run folders")
    ap.add_argument("--samples", type=int, nargs="+", default=[50, 25], help="the Ms to compare")
    ap.add_argument("--draws", type=int, default=2, help="Monte Carlo evaluations per model and M (>= 2)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, help="write every evaluation's scores here (JSON)")
    ap.add_argument("--scores", type=Path, help="tabulate the scores an earlier --out wrote; evaluate nothing")
    args = ap.parse_args()
    if args.scores:
        saved = json.loads(args.scores.read_text())
        per_run = [{tuple(k.rsplit("-s", 1)[0:1]) + (int(k.rsplit("-s", 1)[1]),): {int(M): d for M, d in v.items()}
                    for k, v in run.items()} for run in saved["runs"].values()]
        print(table(per_run, saved["samples"]))
        return
    if not args.runs:
        ap.error("name a run folder (or --scores FILE)")
    if args.draws < 2:
        ap.error("--draws must be at least 2 (the Monte Carlo SD needs two draws)")
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    per_run = [evaluate_run(run, args.samples, args.draws)[0] for run in args.runs]
    print(f"({time.perf_counter() - started:.0f} s of evaluations)\n")
    if args.out:
        runs = {str(run): {f"{f}-s{seed}": v for (f, seed), v in scores.items()}
                for run, scores in zip(args.runs, per_run)}
        args.out.write_text(json.dumps({"samples": args.samples, "draws": args.draws, "runs": runs}, indent=1))
    print(table(per_run, args.samples))


if __name__ == "__main__":
    main()
