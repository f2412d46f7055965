"""The cost of one search, two versions side by side on this machine, in one run.

Each side runs the README's main job (``python -m focus_tune.search --game GAME``, quick
profile, local Ray, 1 CPU per trial) in a fresh folder, one after the other, and splits the
trial-seconds (what the search's trials spent, the unit of its cost) by what they did, from
the MLflow run of every trial and the search state:

* epochs: the training epochs (``time/train_s`` of every epoch);
* validation: the Monte Carlo validations (``time/eval_s``), the race epoch's included;
* test: the finals' test evaluations with the temperature-scaled baseline's fit
  (``time/test_s``; a version that does not record it counts them in "other");
* other: the rest of each trial (start-up, data to tensors, checkpoints);
* idle: slots x wall time of the search minus the trial-seconds.

A side is a commit (``--old be04d82``: checked out into a temporary worktree and imported
from there, with this environment's packages) or the working tree (``--new .``, default).

    python benchmarks/bench_search_cost.py --game hero --old be04d82 --out docs/results/search_cost/hero

``--measure FOLDER`` splits the trial-seconds of a main job already run in FOLDER (its
``runs/`` and ``mlflow.db``; e.g. a fresh clone's) the same way, without running anything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def checkout(rev: str, root: Path) -> Path:
    """The package of ``rev``: the working tree for '.', else a worktree of that commit."""
    if rev == ".":
        return REPO
    path = root / f"src-{rev}"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), rev], check=True,
                   capture_output=True)
    return path


def run_search(src: Path, game: str, profile: str, work: Path, seed: int) -> float:
    """The main job of the package at ``src`` in ``work``; returns its wall seconds."""
    work.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONUNBUFFERED="1")
    t0 = time.time()
    with open(work / "search.log", "w") as log:
        proc = subprocess.run([sys.executable, "-m", "focus_tune.search", "--game", game, "--profile", profile,
                               "--seed", str(seed)],
                              cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"the search in {work} failed ({proc.returncode}); see {work / 'search.log'}")
    return time.time() - t0


def components(work: Path, game: str, profile: str, seed: int, wall: float) -> dict:
    """The trial-seconds of the search in ``work``, split as the module docstring says."""
    from mlflow.tracking import MlflowClient

    run = work / "runs" / f"{game}-{profile}-seed{seed}"
    state = json.loads((run / "search_state.json").read_text())
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    exp = client.get_experiment_by_name(f"focus-tune/{game}")
    runs = {r.data.tags.get("trial_id"): r for r in client.search_runs([exp.experiment_id], max_results=1000)}
    parts = {"epochs": 0.0, "validation": 0.0, "test": 0.0}
    epochs = validations = 0
    for tid in state["trial_seconds"]:
        r = runs[tid]
        if r.data.tags.get("source_trial"):
            pass  # evaluates a search trial's checkpoint: its MLflow history is that trial's copy
        else:
            train = client.get_metric_history(r.info.run_id, "time/train_s")
            evals = client.get_metric_history(r.info.run_id, "time/eval_s")
            parts["epochs"] += sum(m.value for m in train)
            parts["validation"] += sum(m.value for m in evals)
            epochs += len(train)
            validations += len(evals)
        parts["test"] += r.data.metrics.get("time/test_s", 0.0)
    total = sum(state["trial_seconds"].values())
    slots = state["slots"]
    parts["other"] = total - sum(parts.values())
    eff = json.loads((run / "report" / "efficiency.json").read_text())
    return {"wall_s": wall, "search_s": sum(state["fit_seconds"]), "trial_s": total, "slots": slots,
            "idle_s": slots * eff["wall_s"] - total, **{f"{k}_s": v for k, v in parts.items()},
            "trials": len(state["trial_seconds"]), "epochs": epochs, "validations": validations,
            "stopped": state.get("stopped", {}),
            "schedule": json.loads((run / "report" / "search.json").read_text())["chosen"]}


def table(sides: dict[str, dict]) -> str:
    (a, old), (b, new) = sides.items()
    rows = [("trial-seconds", "trial_s"), ("  epochs", "epochs_s"), ("  validation", "validation_s"),
            ("  test evaluation", "test_s"), ("  other", "other_s"), ("idle slot-seconds", "idle_s"),
            ("search wall (s)", "search_s")]
    out = [f"| | {a} | {b} | {b} / {a} |", "|---|---:|---:|---:|"]
    for label, key in rows:
        ratio = f"{new[key] / old[key]:.2f}" if old[key] > 0 else ""
        out.append(f"| {label} | {old[key]:.0f} | {new[key]:.0f} | {ratio} |")
    for label, key in (("trials", "trials"), ("epochs trained", "epochs"), ("validations", "validations")):
        out.append(f"| {label} | {old[key]} | {new[key]} | |")
    out.append(f"| candidates stopped by racing | {len(old['stopped'])} | {len(new['stopped'])} | |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--game", default="hero")
    ap.add_argument("--old", default="be04d82", help="commit of the first side (default be04d82)")
    ap.add_argument("--new", default=".", help="commit of the second side ('.': the working tree)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", default="quick", help="quick (default); smoke checks the script in seconds")
    ap.add_argument("--out", type=Path, help="folder for cost.json and cost.md")
    ap.add_argument("--keep", type=Path, help="keep the two run folders here (default: a temporary folder, removed)")
    ap.add_argument("--measure", type=Path, help="only split the finished main job in this folder")
    args = ap.parse_args()
    if args.measure:
        eff = json.loads((args.measure / "runs" / f"{args.game}-{args.profile}-seed{args.seed}" / "report" /
                          "efficiency.json").read_text())
        parts = components(args.measure, args.game, args.profile, args.seed, eff["wall_s"])
        print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in parts.items() if k != "stopped"}))
        return
    root = args.keep or Path(tempfile.mkdtemp(prefix="search-cost-"))
    root.mkdir(parents=True, exist_ok=True)
    sides = {}
    try:
        for rev in (args.old, args.new):
            label = "working tree" if rev == "." else rev
            src = checkout(rev, root)
            work = root / f"run-{'tree' if rev == '.' else rev}"
            print(f"{label}: python -m focus_tune.search --game {args.game} --profile {args.profile} "
                  f"--seed {args.seed} in {work}", flush=True)
            wall = run_search(src, args.game, args.profile, work, args.seed)
            sides[label] = components(work, args.game, args.profile, args.seed, wall)
            print(f"  {wall / 60:.1f} min, {sides[label]['trial_s']:.0f} trial-seconds", flush=True)
    finally:
        for rev in (args.old, args.new):
            if rev != ".":
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(root / f"src-{rev}")],
                               capture_output=True)
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    (a, old), (b, new) = sides.items()
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "unknown CPU") if Path("/proc/cpuinfo").exists() else "unknown CPU"
    text = (f"{args.game} {args.profile} search, seed {args.seed}, {os.cpu_count()} cores ({cpu}); "
            f"{a} then {b} in one run\n\n"
            f"{table(sides)}\n\nratio of trial-seconds {b} / {a}: {new['trial_s'] / old['trial_s']:.2f}\n"
            f"schedules chosen: {a} {old['schedule']}; {b} {new['schedule']}\n")
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cost.json").write_text(json.dumps({"game": args.game, "profile": args.profile, "seed": args.seed,
                                                        "cpu": cpu, "sides": sides}, indent=1))
        (args.out / "cost.md").write_text(text)


if __name__ == "__main__":
    main()
