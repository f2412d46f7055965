"""Joint stage: the grid against Optuna (focus_tune.procedure.optuna_joint.JointOptuna) at equal budgets.

Training is deterministic given (schedule, seed), so a finished grid search holds the
validation ECE of every joint candidate: this script replays Optuna over those recorded
scores instead of training again. For each budget b = 1..(distinct joint trainings):

* grid@b: the first b joint trainings in grid order (lambda_all outer, k2 inner), plus the
  candidates the stages already know (k2 <= k1: the stage-k1 winner); the full grid is b = max;
* Optuna@b: JointOptuna(space, budget=b, seed=s) for each seed s, answered by the recorded
  scores; its choice is the best candidate it has a result for (ties in grid order).

Each choice is reported by its validation ECE (what the search selects on) and by the test
marginal ECE of its checkpoint (evaluated once per distinct candidate, on the test split as
the profile defines it, with the evaluation the finals use: trial.score_final's
generator and focus_tune.scoring.evaluation.evaluate).

    python benchmarks/bench_joint_search.py --run-dir runs/hero-quick-seed0 \\
        --out docs/results/joint_search/hero-quick

writes <out>/results.json and <out>/table.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from focus_tune.config.space import SearchConfig, load_search_config, space_path  # noqa: E402
from focus_tune.data.dataset_reader import load_dataset  # noqa: E402
from focus_tune.errors import ConfigError  # noqa: E402
from focus_tune.procedure.optuna_joint import JointOptuna, default_budget  # noqa: E402
from focus_tune.procedure.plan import SearchPlan  # noqa: E402
from focus_tune.scoring.evaluation import evaluate, evaluation_generator  # noqa: E402
from focus_tune.sim.device_split import DeviceSplit  # noqa: E402
from focus_tune.sim.model_io import DataInfo, build_model  # noqa: E402
from focus_tune.trial.checkpoint import CHECKPOINT_FILE  # noqa: E402


def load_run(run_dir: Path):
    state = json.loads((run_dir / "search_state.json").read_text())
    fp = state["fingerprint"]
    try:
        cfg = SearchConfig.from_dict(fp["config"], where=str(run_dir / "search_state.json"))
    except ConfigError:  # a config of another code version: the YAML the run names
        cfg = load_search_config(space_path(fp["config"]["game"]), fp["config"]["profile"])
        if cfg.to_dict()["grid"] != fp["config"]["grid"]:
            raise
    seed = int(re.search(r"-s(\d+)$", next(t for t in state["results"] if t.startswith("none-"))).group(1))
    return state, cfg, Path(fp["data"]), seed


def joint_space(cfg: SearchConfig, length: int, seed: int, results: dict):
    """The JointSpace the driver hands to Optuna, rebuilt from the stages' results."""
    before = {k: v for k, v in results.items() if not k.startswith(("joint-", "final-time-dependent"))}
    plan = SearchPlan(cfg.grid, length=length, seed=seed, final_seeds=cfg.final_seeds, joint_search="optuna")
    space = plan.next_batch(before).joint_space
    if space is None:
        raise SystemExit("the run's stage results do not open the joint stage")
    return space


def test_ece(checkpoints: dict, trial_ids, cfg, dataset, seed: int) -> dict[str, float]:
    """Test marginal ECE of each trial's last checkpoint (the finals' evaluation)."""
    train, info = cfg.train, DataInfo.of(dataset.manifest)
    test = DeviceSplit.from_arrays(dataset.test, "cpu", items=train.test_items)
    out = {}
    for tid in trial_ids:
        model = build_model(train, info)  # as the trainable builds it
        state = torch.load(Path(checkpoints[tid]) / CHECKPOINT_FILE, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        t0 = time.perf_counter()
        with torch.no_grad():
            res = evaluate(model, test, train.num_samples, event=info.event, generator=evaluation_generator(seed, -1),
                           n_bins=train.ece_bins, alpha=train.alpha, event_sampling=train.event_sampling)
        out[tid] = float(res["marginal/ece"])
        print(f"  test ECE {tid}: {out[tid]:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", type=Path, required=True, help="a finished --joint-search grid search folder")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seeds", type=int, default=20, help="Optuna seeds 0..N-1 per budget")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    state, cfg, data_path, seed = load_run(args.run_dir)
    results, checkpoints = state["results"], state["checkpoints"]
    dataset = load_dataset(data_path)
    space = joint_space(cfg, dataset.manifest.length, seed, results)

    grid = [(la, k2) for la in space.lambdas for k2 in space.k2]
    tid_of = {key: space.joint_trial(*key).trial_id for key in grid}
    missing = sorted({t for t in tid_of.values() if results.get(t) is None})
    if missing:
        raise SystemExit(f"{args.run_dir}: no recorded score for {missing}: a finished grid search is needed")
    known = {tid_of[(la, k2)] for la, k2, _ in space.evaluated}
    trainings = list(dict.fromkeys(t for t in tid_of.values() if t not in known))  # grid order
    n = len(trainings)
    order = list(dict.fromkeys(tid_of.values()))

    def choose(tried: set[str]) -> str:  # lowest val ECE, ties in grid order
        return min((results[t], order.index(t), t) for t in tried)[2]

    print(f"{args.run_dir}: {len(grid)} grid points, {len(order)} distinct schedules, {n} joint trainings, "
          f"{len(known)} known from the stages", flush=True)
    test = test_ece(checkpoints, order, cfg, dataset, seed)
    full = choose(set(order))

    rows = []
    for b in range(0 if known else 1, n + 1):  # b = 0: what the stages know, nothing trained
        g = choose(known | set(trainings[:b]))
        chosen, spent = [], []
        for s in range(args.seeds):
            opt = JointOptuna(space, budget=b, seed=s)
            tried = set()
            while (spec := opt.ask()) is not None:
                tried.add(spec.trial_id)
                opt.tell(spec.trial_id, results[spec.trial_id])
            spent.append(opt.spent)
            chosen.append(choose(known | tried))
        rows.append({
            "budget": b,
            "grid": {"chosen": g, "val_ece": results[g], "test_ece": test[g]},
            "optuna": {
                "chosen": {t: chosen.count(t) for t in dict.fromkeys(chosen)},
                "val_ece_mean": float(np.mean([results[t] for t in chosen])),
                "test_ece_mean": float(np.mean([test[t] for t in chosen])),
                "found_full_grid_winner": sum(t == full for t in chosen),
                "trainings_mean": float(np.mean(spent)),
            },
        })

    out = {
        "run_dir": str(args.run_dir), "game": cfg.scenario, "profile": cfg.profile, "seed": seed,
        "grid": {"lambdas": list(space.lambdas), "k2": list(space.k2)},
        "joint_trainings": n, "known_from_stages": sorted(known), "default_budget": default_budget(n),
        "optuna_seeds": args.seeds,
        "candidates": {t: {"val_ece": results[t], "test_ece": test[t]} for t in order},
        "full_grid_winner": full, "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(out, indent=2) + "\n")
    (args.out / "table.md").write_text(table(out))
    print(table(out))
    return 0


def table(out: dict) -> str:
    s = out["optuna_seeds"]
    lines = [
        f"{out['game']} {out['profile']}: joint grid lambda_all {out['grid']['lambdas']} x k2 {out['grid']['k2']}, "
        f"{out['joint_trainings']} joint trainings, known from the stages: {', '.join(out['known_from_stages'])}; "
        f"full grid's winner {out['full_grid_winner']}",
        "",
        "| candidate | val ECE | test ECE |",
        "|---|---|---|",
        *(f"| {t} | {c['val_ece']:.5f} | {c['test_ece']:.5f} |" for t, c in out['candidates'].items()),
        "",
        f"| trainings b | grid@b chosen | grid@b val / test ECE | Optuna@b mean val / test ECE ({s} seeds) "
        f"| Optuna found the full grid's winner | Optuna's choices |",
        "|---|---|---|---|---|---|",
    ]
    for r in out['rows']:
        g, o = r['grid'], r['optuna']
        choices = ", ".join(f"{t} x{c}" for t, c in o['chosen'].items())
        default = " (default)" if r['budget'] == out['default_budget'] else ""
        lines.append(f"| {r['budget']}{default} | {g['chosen']} | {g['val_ece']:.5f} / {g['test_ece']:.5f} "
                     f"| {o['val_ece_mean']:.5f} / {o['test_ece_mean']:.5f} | {o['found_full_grid_winner']}/{s} "
                     f"| {choices} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
