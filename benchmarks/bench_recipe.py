"""Does the recipe stage find a recipe as good as the hand-made one, for as little?

For each target, the worked example (digits: scripts/digits_dataset.py, a dataset of one's own,
whose base recipe is the generic space's, search_spaces/generic.yaml) and a built-in game
(H.E.R.O. quick), the script

1. runs the recipe stage (``focus_tune.run_recipe``: OptunaSearch + ASHAScheduler on val/ce) at
   a budget (``--trials``, ``--trial-minutes``);
2. trains the hand-made recipe (the profile's own ``train:``) once through the same code: the
   recipe stage again, with a recipe space whose every dimension is that one value (one trial,
   alone on its CPUs, so its seconds are comparable with the found recipe's own trial);
3. writes a JSON (``--out``) with both recipes' validation CE, AUC, image-blind's CE and the
   regime, the found recipe's trial-seconds against the hand-made one's, and the recipe
   stage's whole cost (the sum of its trials' seconds, and its wall time).

It is resumable: a step whose report.json exists under ``--work`` is read back, not run again
(kill it and run the same command to continue). The measurement of issue 52, on 2 cores:

    python benchmarks/bench_recipe.py --profile quick --trials 12 --trial-minutes 10 --num-cpus 2 \\
        --work runs/bench-recipe --out docs/results/recipe/bench_recipe.json

A smoke check (seconds): ``--profile smoke --targets digits --trials 2``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGETS = ("digits", "hero")


def _dataset(target: str, work: Path, data_root: Path) -> dict:
    """run_recipe's keywords for the target's data (the digits dataset made once under --work)."""
    if target == "digits":
        folder = work / "data" / "digits"
        if not (folder / "manifest.json").exists():
            subprocess.run([sys.executable, str(REPO / "scripts" / "digits_dataset.py"), "--out", str(folder)],
                           check=True)
        return {"data": folder}
    return {"game": target, "data_root": data_root}


def _hand_space(profile: str, base: dict, folder: Path) -> Path:
    """The packaged recipe space with every dimension the hand-made value alone."""
    import yaml

    from focus_tune.config.space import SPACES_DIR
    from focus_tune.config.strict_yaml import read_yaml

    raw = read_yaml(SPACES_DIR / "recipe.yaml", "recipe.yaml")
    raw["space"] = {k: {"choice": [v]} for k, v in base.items()}
    body = raw["profiles"].get(profile) or {}
    body.pop("space", None)
    raw["profiles"][profile] = {**body, "budget": {"trials": 1}}
    if "asha" in body:  # the grace period cannot exceed the one epochs value
        body["asha"]["grace_period"] = min(body["asha"]["grace_period"], base["epochs"])
    raw["asha"]["grace_period"] = min(raw["asha"]["grace_period"], base["epochs"])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "hand_recipe.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _run(out: Path, **kwargs) -> dict:
    """A recipe stage's report.json, run first unless it exists (resumable)."""
    import focus_tune

    if not (out / "report.json").exists():
        if out.exists():  # an interrupted run: its Tune and MLflow leftovers, started again
            import shutil

            shutil.rmtree(out)
        t0 = time.time()
        focus_tune.run_recipe(out=out, **kwargs)
        print(f"{out}: {time.time() - t0:.0f} s", flush=True)
    return json.loads((out / "report.json").read_text())


def bench(target: str, args) -> dict:
    work = Path(args.work) / f"{target}-{args.profile}-seed{args.seed}"
    common = dict(profile=args.profile, seed=args.seed, num_cpus=args.num_cpus, cpus_per_trial=args.cpus_per_trial,
                  tracking_uri=args.tracking_uri, experiment="focus-tune/bench-recipe",
                  **_dataset(target, Path(args.work), Path(args.data_root)))
    found = _run(work / "recipe", trials=args.trials, trial_minutes=args.trial_minutes, **common)
    base = found["base"]["recipe"]
    hand = _run(work / "hand", recipe_space=_hand_space(args.profile, base, work), trials=1,
                trial_minutes=args.hand_minutes or 1e6, **common)
    f, h = found["best"], hand["best"]
    return {
        "target": target, "profile": args.profile, "seed": args.seed, "data": found["data"],
        "budget": found["budget"], "found": f, "hand": h, "hand_recipe": base,
        "found_is_hand": f["recipe"] == base,
        "ce_difference": f["val/ce"] - h["val/ce"],  # < 0: the found recipe is better on validation
        "reaches_hand_ce": f["val/ce"] <= h["val/ce"],
        "found_trial_seconds": f["seconds"], "hand_trial_seconds": h["seconds"],
        "at_equal_or_lower_seconds": f["seconds"] <= h["seconds"],
        "search_trial_seconds": found["trial_seconds"], "search_wall_seconds": found["seconds"],
        "trials": len(found["trials"]), "ended": found["ended"],
        "regime": {"found": found["regime"], "hand": hand["regime"]},
        "reports": {"found": str(work / "recipe" / "report.md"), "hand": str(work / "hand" / "report.md")},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", nargs="+", choices=TARGETS, default=list(TARGETS))
    ap.add_argument("--profile", default="quick", choices=("smoke", "quick", "paper"))
    ap.add_argument("--trials", type=int, default=None, help="default: recipe.yaml's budget for the profile")
    ap.add_argument("--trial-minutes", type=float, default=None, help="default: recipe.yaml's budget")
    ap.add_argument("--hand-minutes", type=float, default=None, help="the hand-made trial's cap (default: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--num-cpus", type=int, default=None, help="the local Ray's CPUs (default: all)")
    ap.add_argument("--cpus-per-trial", type=float, default=1.0)
    ap.add_argument("--work", default="runs/bench-recipe", help="the recipe stages' folders (resumable)")
    ap.add_argument("--data-root", default="data_cache")
    ap.add_argument("--tracking-uri", default=None)
    ap.add_argument("--out", default="docs/results/recipe/bench_recipe.json")
    args = ap.parse_args(argv)
    rows = []
    for target in args.targets:
        row = bench(target, args)
        rows.append(row)
        print(f"{target}: found {row['found']['recipe']} val CE {row['found']['val/ce']:.4f} in "
              f"{row['found_trial_seconds']:.0f} s | hand-made val CE {row['hand']['val/ce']:.4f} in "
              f"{row['hand_trial_seconds']:.0f} s | search {row['search_trial_seconds']:.0f} trial-s", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(sys.argv), "machine": _machine(), "targets": rows}, indent=1))
    print(f"wrote {out}")
    return 0


def _machine() -> dict:
    import os
    import platform

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout
    return {"cpu": cpu, "cpus": os.cpu_count(), "commit": commit.strip()}


if __name__ == "__main__":
    raise SystemExit(main())
