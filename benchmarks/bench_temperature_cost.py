"""Where a temperature row's validation time goes: one candidate's evaluation, split by part.

A temperature row (``temperature-scaled``, ``time-dependent temperature``) scores each
candidate vector with one validation evaluation (``Scoring.evaluate`` of the validation
split, the searches' estimator and M, ``per_entry``): draw the Monte Carlo samples, the
teacher-forced p(event -> event), the scores. This times those three parts apart, the way
``evaluate`` calls them, on a profile's validation split with a model of its architecture
(weights as initialised: the sampler draws every entry from the model, so its cost does not
depend on them), one thread as in a trial, and prints each part's share and what a stage
could save by reusing the samples of the entries before its own (the only part its
candidates share): ``(i - 1) / L`` of the sampling for stage T_i, at most ``k1 / L`` for the
stage of the rest.

    python benchmarks/bench_temperature_cost.py [--game hero] [--profile quick] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import torch

from focus_tune.config.space import load_search_config, space_path
from focus_tune.data import ensure_dataset, load_dataset
from focus_tune.scoring import montecarlo
from focus_tune.scoring.evaluation import Scoring, draw_samples, evaluation_generator, score, teacher_forced_logits
from focus_tune.sim.device_split import DeviceSplit
from focus_tune.sim.model_io import DataInfo, build_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--game", default="hero")
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--repeats", type=int, default=3, help="evaluations timed (after one warm-up)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-root", default="data_cache")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    cfg = load_search_config(space_path(args.game), args.profile)
    tc = cfg.train
    ds = load_dataset(ensure_dataset(args.game, args.profile, args.data_root, seed=0))
    info = DataInfo.of(ds.manifest)
    val = DeviceSplit.from_arrays(ds.val, items=tc.val_items)
    model = build_model(tc, info).eval()
    scoring = Scoring.of(tc, "val")
    L, event = ds.manifest.length, info.event
    t = torch.full((L,), 1.1)  # a candidate off 1, as most are
    rb = event if scoring.estimator == "rao_blackwell" else None
    forced = event if scoring.event_sampling == "forced" else None
    labels = val.sequences.cpu().numpy()
    print(f"{args.game} {args.profile}: {len(val)} validation items, L = {L}, M = {scoring.num_samples}, "
          f"estimator {scoring.estimator}, k1 = {cfg.grid.k1}, {args.threads} thread(s)")

    parts = {"draw the samples": 0.0, "teacher-forced p_stay": 0.0, "estimate and score": 0.0}
    for rep in range(args.repeats + 1):
        gen = evaluation_generator(0, -3)
        t0 = time.perf_counter()
        drawn = draw_samples(model, val.images, scoring.num_samples, L, gen, forced_event=forced, temperature=t,
                             rao_blackwell=rb)
        t1 = time.perf_counter()
        teacher_forced_logits(model, val)
        t2 = time.perf_counter()
        est = montecarlo.estimate(drawn, scoring.estimator, event, model.num_classes, scoring.alpha, None)
        score(est, labels, val.time_to_event.cpu().numpy(), scoring.ece_bins, val.exact_marginals, None,
              scoring.alpha, observed=val.observed_numpy, censored=val.censored)
        montecarlo.leak(drawn.samples, event)
        t3 = time.perf_counter()
        if rep:  # the first is a warm-up
            for key, dt in zip(parts, (t1 - t0, t2 - t1, t3 - t2)):
                parts[key] += dt / args.repeats
    total = sum(parts.values())
    print(f"one candidate's evaluation: {total:.2f} s")
    for key, dt in parts.items():
        print(f"  {key:24s} {dt:6.2f} s  {100 * dt / total:5.1f} %")
    share = cfg.grid.k1 / L
    print(f"a stage's candidates share the entries before its own: at most k1 / L = {cfg.grid.k1}/{L} = "
          f"{100 * share:.1f} % of the sampling, {100 * share * parts['draw the samples'] / total:.1f} % of an "
          f"evaluation, for the stage of the rest (stage T_i: (i - 1) / L)")


if __name__ == "__main__":
    main()
