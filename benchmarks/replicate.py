"""Replication: R independent searches of one scenario, and what holds across them.

Runs ``python -m focus_tune.search --game G --profile P --seed r`` for each search seed r
(``--seeds 0-4``), ``--parallel`` at a time, each with its own MLflow store, then reads their
run folders and writes ``replication.md`` and ``replication.json`` to ``--out``:

* the chosen schedules (time-dependent and constant), how many runs chose each;
* every stage decision: the rule that decided it (lowest, or the tie rule) and its margin in
  standard errors; for the decisions whose candidates are the same in every run (stage 1,
  constant), how often the runs agree under the search's rule, under the paper's (lowest
  score wins) and under each validation score a search could select by;
* per test metric, how often each family (none, constant, time-dependent) has the best mean
  over its final seeds, and the means of every row (the baselines and the best achievable
  beside the models, scored like them by the search's report);
* pooled paired differences (constant - none, time-dependent - none, time-dependent -
  constant): per run the mean over its seeds of the per-seed differences (pairs share a
  seed), then over runs the mean, a 95 % t interval (R - 1 degrees of freedom: the run is
  the unit, since seeds of one run share its data and its schedule), the runs on each side
  of zero and a t-test p-value, Holm-adjusted over every difference of the scenario.

What varies between runs: the search seed, hence the built-in dataset's draw (items and
labels: ``ensure_dataset(..., seed)``), every training's initial weights and batch order
and the Monte Carlo draws. What does not: code, grids, profile, machine.

    python benchmarks/replicate.py --game hero --seeds 0-4 --out docs/results/replication/hero-quick
    python benchmarks/replicate.py --game hero --seeds 0-4 --parallel 10 --out OUT -- \\
        --address auto --gpus-per-trial 0.0625           # flags after -- go to every search
    python benchmarks/replicate.py --game hero --seeds 0-4 --aggregate-only --out OUT

A run folder with a finished report is not run again; one with a search state and no report is
resumed (``--resume``). Ctrl-C (or ``timeout -s INT``) stops every running search cleanly and
aggregates the finished ones; the same command continues the others.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from focus_tune.plan import tie_rule  # noqa: E402
from focus_tune.report.columns import COMPARED_COLUMNS, COVERAGE_TARGET, ROWS  # noqa: E402
from focus_tune.report.stats import _paired_test, holm, paired_differences  # noqa: E402
from focus_tune.report.tables import read_finals  # noqa: E402

MODELS = ("none", "constant", "time-dependent")
PAIRS = (("constant", "none"), ("time-dependent", "none"), ("time-dependent", "constant"))
# Decisions whose candidates do not depend on earlier decisions: comparable across runs.
FIXED_STAGES = ("stage1", "constant")
SELECT_METRICS = {"ece": "val/ece", "ece_debiased": "val/ece_debiased_sq", "brier": "val/brier", "ce": "val/ce"}


def seed_list(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


# -- running ---------------------------------------------------------------------------------
def run_dir(storage: Path, game: str, profile: str, seed: int) -> Path:
    return storage / f"{game}-{profile}-seed{seed}"


def tracking_uri(storage: Path, game: str, profile: str, seed: int) -> str:
    return f"sqlite:///{(storage / f'mlflow-{game}-{profile}-seed{seed}.db').resolve()}"


LIVE: set[subprocess.Popen] = set()  # the searches running now


def interrupt_all(grace: float = 120.0) -> None:
    """Ctrl-C each running search (it saves its state, marks its MLflow run KILLED and exits:
    the same command resumes it) and wait for them."""
    for proc in list(LIVE):
        proc.send_signal(signal.SIGINT)
    deadline = time.time() + grace
    for proc in list(LIVE):
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()


def run_one(args, seed: int) -> tuple[int, int, float]:
    folder = run_dir(args.storage, args.game, args.profile, seed)
    if (folder / "report" / "results.csv").exists():
        return seed, 0, 0.0
    cmd = [sys.executable, "-m", "focus_tune.search", "--game", args.game, "--profile", args.profile,
           "--seed", str(seed), "--storage", str(args.storage),
           "--tracking-uri", tracking_uri(args.storage, args.game, args.profile, seed), *args.search_args]
    if (folder / "search_state.json").exists():
        cmd.append("--resume")
    log = args.storage / "logs" / f"{args.game}-{args.profile}-seed{seed}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with log.open("a") as fh:
        # Its own process group: Ctrl-C here reaches the searches only through interrupt_all.
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=os.getcwd(), start_new_session=True)
        LIVE.add(proc)
        rc = proc.wait()
        LIVE.discard(proc)
    wall = time.time() - t0
    print(f"{args.game} seed {seed}: exit {rc} after {wall / 60:.1f} min (log {log})", flush=True)
    return seed, rc, wall


# -- reading -------------------------------------------------------------------------------
def read_run(folder: Path, uri: str | None) -> dict:
    report = folder / "report"
    run = {"folder": str(folder), "finals": read_finals(report / "results.csv"),
           "search": json.loads((report / "search.json").read_text())}
    run["val"] = validation_scores(uri, run["search"]) if uri else {}
    return run


def validation_scores(uri: str, search: dict) -> dict[str, dict[str, float]]:
    """trial id -> its last validation scores ({"val/ece": ..., ...}) from the run's MLflow store,
    for the candidates of the fixed stages."""
    from mlflow.tracking import MlflowClient

    wanted = {c["trained_as"] for s in search["stages"] if s["stage"] in FIXED_STAGES for c in s["candidates"]}
    client = MlflowClient(tracking_uri=uri)
    out = {}
    for exp in client.search_experiments():
        for r in client.search_runs([exp.experiment_id], max_results=5000):
            tid = r.data.tags.get("trial_id")
            if tid in wanted:
                out[tid] = {k: v for k, v in r.data.metrics.items() if k in SELECT_METRICS.values()}
    return out


# -- what holds across runs ------------------------------------------------------------------
def better_of(column, values: dict[str, float]) -> str | None:
    """The family with the best value of ``column`` (None when any is missing)."""
    if any(not math.isfinite(v) for v in values.values()):
        return None
    key = {"min": lambda f: values[f], "max": lambda f: -values[f], "zero": lambda f: abs(values[f]),
           "target": lambda f: abs(values[f] - COVERAGE_TARGET)}[column.better]
    return min(values, key=key)


def family_mean(run: dict, family: str, key: str) -> float:
    values = [row.get(key, math.nan) for row in run["finals"].get(family, [])]
    values = [v for v in values if math.isfinite(v)]
    return float(np.mean(values)) if values else math.nan


def t_interval(x: np.ndarray) -> tuple[float, float, float, float]:
    """(mean, low, high, p) of a 95 % t interval and t-test against 0 over the runs (p NaN
    where the runs do not differ: no test)."""
    from scipy import stats

    if x.size < 2:
        return (float(x.mean()) if x.size else math.nan), math.nan, math.nan, math.nan
    mean, p = _paired_test(x)
    half = float(stats.t.ppf(0.975, x.size - 1)) * float(x.std(ddof=1) / math.sqrt(x.size))
    return mean, mean - half, mean + half, p


def lowest(candidates: list[dict], score=lambda c: c["score"]) -> str | None:
    ok = [c for c in candidates if c["status"] == "ok" and score(c) is not None and math.isfinite(score(c))]
    return min(ok, key=score)["trained_as"] if ok else None


def tie_pick(stage: dict, z: float) -> str | None:
    """A recorded stage decided again by ``focus_tune.plan.tie_rule`` at z SE. The trace holds
    each candidate's SE against the chosen one, so the rule is replayed exactly where every SE
    it needs is against the chosen candidate (two candidates, or the lowest was chosen);
    elsewhere an SE it needs is unknown and the pair is taken as distinguishable."""
    rows = {}
    for c in stage["candidates"]:  # distinct trainings, candidate order
        if c["status"] == "ok" and c["score"] is not None:
            rows.setdefault(c["trained_as"], c)
    if not rows:
        return None
    chosen = next((c["trained_as"] for c in stage["candidates"] if c["trial_id"] == stage.get("winner")), None)

    def se(a: str, b: str) -> float | None:  # recorded on the other candidate's row of the pair
        if chosen not in (a, b):
            return None
        return next((rows[t]["se"] for t in (a, b) if rows[t].get("se") is not None), None)

    scored = [(c["score"], c["penalty"], tid) for tid, c in rows.items()]
    win, _, _, _ = tie_rule(scored, z, se)
    return scored[win][2]


def agreement(choices: list[str | None]) -> tuple[str, float]:
    """The modal choice and the share of runs that made it."""
    known = [c for c in choices if c is not None]
    if not known:
        return "n/a", math.nan
    top, n = Counter(known).most_common(1)[0]
    return top, n / len(choices)


def strip_seed(trial_id: str | None) -> str | None:
    return None if trial_id is None else trial_id.rsplit("-s", 1)[0]


def summarize(runs: list[dict]) -> dict:
    R = len(runs)
    out: dict = {"runs": R, "folders": [r["folder"] for r in runs]}
    out["schedules"] = {f: Counter(r["search"]["chosen"].get(f, "n/a") for r in runs).most_common()
                        for f in ("time-dependent", "constant")}
    decisions = []
    for r in runs:
        for s in r["search"]["stages"]:
            d = s.get("decision") or {}
            if d.get("rival") is not None:
                z = abs(d["difference"]) / d["se"] if d.get("se") else math.nan
                decisions.append({"stage": s["stage"], "rule": d["rule"], "z": z})
    out["decisions"] = {
        "count": len(decisions),
        "ties": sum(d["rule"].startswith("tie") for d in decisions),
        "within_1se": sum(d["z"] <= 1 for d in decisions if math.isfinite(d["z"])),
        "within_2se": sum(d["z"] <= 2 for d in decisions if math.isfinite(d["z"])),
        "median_z": float(np.nanmedian([d["z"] for d in decisions])) if decisions else math.nan,
    }
    stability = {}
    for name in FIXED_STAGES:
        stages = [next((s for s in r["search"]["stages"] if s["stage"] == name), None) for r in runs]
        rules = {"search's rule": [strip_seed(s["winner"]) if s else None for s in stages]}
        for z in (0, 1, 2):
            name_z = "lowest (paper)" if z == 0 else f"tie rule at {z} SE"
            rules[name_z] = [strip_seed(tie_pick(s, z)) if s else None for s in stages]
        for metric, key in SELECT_METRICS.items():
            picks = []
            for s, r in zip(stages, runs):
                if s is None or not r["val"]:
                    picks.append(None)
                    continue
                picks.append(strip_seed(lowest(s["candidates"], lambda c: r["val"].get(c["trained_as"], {}).get(key))))
            if any(p is not None for p in picks):
                rules[f"lowest {metric}"] = picks
        stability[name] = {rule: dict(zip(("modal", "share"), agreement(picks))) for rule, picks in rules.items()}
    out["stability"] = stability

    columns = [c for c in COMPARED_COLUMNS if c.better]
    wins, means = {}, {}
    for col in columns:
        per_run = [{f: family_mean(r, f, col.key) for f in MODELS} for r in runs]
        wins[col.key] = dict(Counter(better_of(col, v) or "n/a" for v in per_run))
        means[col.key] = {}
        for f in ROWS:
            x = np.array([family_mean(r, f, col.key) for r in runs])
            x = x[np.isfinite(x)]
            if x.size:
                means[col.key][f] = {"mean": float(x.mean()), "sd_runs": float(x.std(ddof=1)) if x.size > 1 else math.nan,
                                     "runs": int(x.size)}
    out["wins"], out["means"] = wins, means

    raw = {}
    for a, b in PAIRS:
        for col in columns:
            per_run = []
            for r in runs:
                d = paired_differences(r["finals"].get(a, []), r["finals"].get(b, []), col.key)
                if d.size:
                    per_run.append(float(d.mean()))
            x = np.array(per_run)
            mean, lo, hi, p = t_interval(x)
            raw[f"{a} - {b}/{col.key}"] = {"mean": mean, "low": lo, "high": hi, "p": p, "runs": int(x.size),
                                           "below_zero": int((x < 0).sum()), "above_zero": int((x > 0).sum())}
    adjusted = holm({k: v["p"] for k, v in raw.items()})
    for k, v in raw.items():
        v["holm"] = adjusted[k]
    out["differences"] = raw
    return out


# -- the report ----------------------------------------------------------------------------
def fmt(x: float, digits: int = 4) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def markdown(game: str, profile: str, seeds: list[int], s: dict, search_args: list[str]) -> str:
    from focus_tune.report.columns import COMPARED_COLUMNS as COLS

    label = {c.key: c.label for c in COLS}
    R = s["runs"]
    lines = [f"# Replication: {game} ({profile}), R = {R} searches (seeds {seeds[0]}-{seeds[-1]})", "",
             "Each run: `python -m focus_tune.search --game " f"{game} --profile {profile} --seed r"
             + (" " + " ".join(search_args) if search_args else "") + "`; the seed also draws the dataset.", "",
             "## Chosen schedules", "", "| family | schedule | runs |", "|---|---|---:|"]
    for family, counts in s["schedules"].items():
        lines += [f"| {family} | `{sched}` | {n}/{R} |" for sched, n in counts]
    d = s["decisions"]
    lines += ["", "## Stage decisions", "",
              f"{d['count']} decisions between two or more candidates; {d['ties']} went to a less penalized "
              f"candidate by the tie rule; {d['within_1se']} were within 1 SE and {d['within_2se']} within 2 SE "
              f"of their closest rival (median {fmt(d['median_z'], 1)} SE).", "",
              "Agreement across runs of the decisions whose candidates are the same in every run "
              "(the modal choice and the share of runs that made it):", "",
              "| stage | rule | modal choice | share |", "|---|---|---|---:|"]
    for stage, rules in s["stability"].items():
        lines += [f"| {stage} | {rule} | `{v['modal']}` | {fmt(v['share'], 2)} |" for rule, v in rules.items()]
    lines += ["", "## Which family is best, run by run", "",
              "Runs in which each family has the best mean over its final seeds (coverage: closest to "
              f"{COVERAGE_TARGET:g}; ECE debiased: closest to 0).", "",
              "| metric | " + " | ".join(MODELS) + " |", "|---|" + "---:|" * len(MODELS)]
    for key, counts in s["wins"].items():
        lines.append(f"| {label[key]} | " + " | ".join(f"{counts.get(f, 0)}/{R}" for f in MODELS) + " |")
    lines += ["", "## Means over runs", "",
              "Mean over runs of each row's mean over its seeds (± SD across runs); the baselines are "
              "scored like the models by the search's report (same estimator, M, bins).", "",
              "| row | " + " | ".join(label[k] for k in s["means"]) + " |", "|---|" + "---:|" * len(s["means"])]
    for f in ROWS:
        cells = [s["means"][k].get(f) for k in s["means"]]
        if any(cells):
            lines.append(f"| {f} | " + " | ".join(
                "n/a" if c is None else f"{fmt(c['mean'])} ± {fmt(c['sd_runs'])}" for c in cells) + " |")
    lines += ["", "## Pooled paired differences", "",
              "Per run, the mean over its seeds of the per-seed differences; over runs, the mean, a 95 % t "
              f"interval ({R - 1} degrees of freedom), the runs below / above zero, the t-test p-value and "
              "its Holm adjustment over every row of this table.", "",
              "| difference | metric | mean | 95 % CI | runs < 0 / > 0 | p | Holm p |",
              "|---|---|---:|---|---:|---:|---:|"]
    for name, v in s["differences"].items():
        pair, key = name.split("/", 1)
        lines.append(f"| {pair} | {label[key]} | {fmt(v['mean'])} | [{fmt(v['low'])}, {fmt(v['high'])}] | "
                     f"{v['below_zero']} / {v['above_zero']} | {fmt(v['p'], 3)} | {fmt(v['holm'], 3)} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    argv = sys.argv[1:]
    search_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--game", required=True)
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--seeds", default="0-4", help="search seeds, e.g. 0-4 or 0,2,5")
    ap.add_argument("--storage", type=Path, default=Path("runs/replication"))
    ap.add_argument("--parallel", type=int, default=1, help="searches at once")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--aggregate-only", action="store_true", help="read the run folders, run nothing")
    args = ap.parse_args(argv)
    args.search_args = search_args
    seeds = seed_list(args.seeds)
    if not args.aggregate_only:
        args.storage.mkdir(parents=True, exist_ok=True)
        pool = ThreadPoolExecutor(max_workers=max(1, args.parallel))
        futures = [pool.submit(run_one, args, s) for s in seeds]
        try:
            done = [f.result() for f in futures]
        except KeyboardInterrupt:
            # Stop the searches cleanly and report on those that finished; rerun to resume the rest.
            for f in futures:
                f.cancel()
            interrupt_all()
            pool.shutdown(wait=True)
            print("interrupted: the finished searches are aggregated below; the same command resumes the others",
                  file=sys.stderr)
            done = []
        pool.shutdown(wait=True)
        failed = [s for s, rc, _ in done if rc != 0]
        if failed:
            print(f"searches with seeds {failed} failed; their logs are in {args.storage / 'logs'}", file=sys.stderr)
    runs, missing = [], []
    for seed in seeds:
        folder = run_dir(args.storage, args.game, args.profile, seed)
        if not (folder / "report" / "results.csv").exists():
            missing.append(seed)
            continue
        db = args.storage / f"mlflow-{args.game}-{args.profile}-seed{seed}.db"
        runs.append(read_run(folder, tracking_uri(args.storage, args.game, args.profile, seed) if db.exists() else None))
    if not runs:
        print("no finished search to aggregate", file=sys.stderr)
        return 1
    summary = summarize(runs)
    summary["missing_seeds"] = missing
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "replication.json").write_text(json.dumps(summary, indent=1))
    text = markdown(args.game, args.profile, [s for s in seeds if s not in missing], summary, search_args)
    (args.out / "replication.md").write_text(text)
    print(text)
    return 0 if not missing else 3


if __name__ == "__main__":
    sys.exit(main())
