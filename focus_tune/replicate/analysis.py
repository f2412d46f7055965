"""What holds across R replicated searches of one scenario.

Reads the run folders (``report/results.csv``, ``report/search.json``, ``search_state.json``)
and each search's MLflow store (the validation scores of the stage candidates), and computes:

* the chosen schedules (time-dependent and constant), how many runs chose each;
* every stage decision: the rule that decided it (lowest, or the tie rule) and its margin in
  standard errors; for the decisions whose candidates are the same in every run (stage 1,
  constant), how often the runs agree under the search's rule, under the paper's (lowest
  score wins), under the tie rule at 1 and 2 SE and under each validation score a search
  could select by;
* per test metric, how often each family (none, constant, time-dependent) has the best mean
  over its final seeds, and the means of every row (the baselines and the best achievable
  beside the models, scored like them by the search's report);
* pooled paired differences (constant - none, time-dependent - none, time-dependent -
  constant): per run the mean over its seeds of the per-seed differences (pairs share a
  seed), then over runs the mean, a 95 % t interval (R - 1 degrees of freedom: the run is
  the unit, since seeds of one run share its data and its schedule), the runs on each side
  of zero and a t-test p-value, Holm-adjusted over every difference of the scenario and,
  apart, over the primary endpoints (:data:`PRIMARY`).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np

from ..names import conformal_row
from ..procedure.plan import tie_rule
from ..report.columns import COMPARED_COLUMNS, COVERAGE_TARGET, ROWS
from ..report.stats import holm, one_sample_test, paired_differences, t_quantile
from ..report.tables import read_finals

MODELS = ("none", "constant", "time-dependent")
# The searched schedule against the cheap fixes after training: one temperature chosen on the
# validation split (calibration), and none's I_0.9 calibrated by split conformal (intervals).
POST_HOC_PAIRS = (("time-dependent", "temperature-scaled"), ("time-dependent", conformal_row("none")),
                  ("time-dependent", "time-dependent temperature"))  # the per-entry temperature (since 393c35c)
PAIRS = (("constant", "none"), ("time-dependent", "none"), ("time-dependent", "constant"), *POST_HOC_PAIRS)
# The endpoints the verdict rests on, declared before the replication was run: calibration
# (ECE and its debiased estimate) and the time-to-event intervals (coverage, interval score).
PRIMARY = ("test/marginal/ece", "test/marginal/ece_debiased", "test/interval/coverage",
           "test/interval/interval_score")
# The verdict's primary comparisons (declared before the six scenarios' replications ran):
# time-dependent against none on PRIMARY, against temperature-scaled on ECE, and against
# none +conformal on the interval score (its width is shown beside, not tested as primary: a
# width compares only at equal coverage, which the interval score charges for).
VERDICT_PRIMARY = (*((("time-dependent", "none"), k) for k in PRIMARY),
                   (("time-dependent", "temperature-scaled"), "test/marginal/ece"),
                   (("time-dependent", conformal_row("none")), "test/interval/interval_score"))


def is_primary(pair: tuple[str, str], key: str) -> bool:
    """Whether a difference is one of the scenario's primary endpoints: PRIMARY for the pairs
    of the search's families, the verdict's declared ones for the post-hoc pairs."""
    if pair in POST_HOC_PAIRS:
        return (pair, key) in VERDICT_PRIMARY
    return key in PRIMARY
# Decisions whose candidates do not depend on earlier decisions: comparable across runs.
FIXED_STAGES = ("stage1", "constant")
SELECT_METRICS = {"ece": "val/ece", "ece_debiased": "val/ece_debiased_sq", "brier": "val/brier", "ce": "val/ce"}


def seed_list(text: str) -> list[int]:
    """"0-4" or "0,2,5" (or both: "0-2,7") -> the seeds, in order, each once."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            seeds = range(int(lo), int(hi or lo) + 1)
        except ValueError:
            raise ValueError(f"seeds: {text!r} is not a list like 0-4 or 0,2,5") from None
        out += [s for s in seeds if s not in out]
    if not out or min(out) < 0:
        raise ValueError(f"seeds: {text!r} names no seed >= 0")
    return out


def run_dir(storage: Path, scenario: str, profile: str, seed: int) -> Path:
    """A replicated search's run folder: the search's own naming under the storage folder."""
    return storage / f"{scenario}-{profile}-seed{seed}"


def store_uri(storage: Path, scenario: str, profile: str, seed: int) -> str:
    """A replicated search's own MLflow store: searches that run at once never share a SQLite file."""
    return f"sqlite:///{(storage / f'mlflow-{scenario}-{profile}-seed{seed}.db').resolve()}"


def finished(folder: Path) -> bool:
    return (folder / "report" / "results.csv").exists()


VALIDATION_FILE = "validation.json"  # a report folder's copy of validation_scores, kept where its store is not


def read_run(folder: Path, uri: str | None, seed: int) -> dict:
    """One finished search: its finals, its search record, its MLflow parent run and the
    validation scores of its fixed stages' candidates (from the store; without one, from
    ``report/validation.json`` where a kept copy of the report has it; else empty)."""
    report = folder / "report"
    state = json.loads((folder / "search_state.json").read_text()) if (folder / "search_state.json").exists() else {}
    run = {"seed": seed, "folder": str(folder), "finals": read_finals(report / "results.csv"),
           "search": json.loads((report / "search.json").read_text()),
           "parent_run_id": state.get("parent_run_id"), "tracking_uri": uri}
    if uri:
        run["val"] = validation_scores(uri, run["search"], run["parent_run_id"])
    elif (report / VALIDATION_FILE).exists():
        run["val"] = json.loads((report / VALIDATION_FILE).read_text())
    else:
        run["val"] = {}
    return run


def validation_scores(uri: str, search: dict, parent_run_id: str | None) -> dict[str, dict[str, float]]:
    """trial id -> its last validation scores ({"val/ece": ..., ...}) from the search's MLflow
    store, for the candidates of the fixed stages (the children of its parent run when known)."""
    from mlflow.tracking import MlflowClient

    wanted = {c["trained_as"] for s in search["stages"] if s["stage"] in FIXED_STAGES for c in s["candidates"]}
    client = MlflowClient(tracking_uri=uri)
    query = f"tags.mlflow.parentRunId = '{parent_run_id}'" if parent_run_id else ""
    out = {}
    for exp in client.search_experiments():
        for r in client.search_runs([exp.experiment_id], filter_string=query, max_results=5000):
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
    """(mean, low, high, p) of a 95 % t interval and t-test against 0 over the runs (interval
    and p NaN where the runs do not differ: no test)."""
    if x.size < 2:
        return (float(x.mean()) if x.size else math.nan), math.nan, math.nan, math.nan
    mean, p = one_sample_test(x)
    if not math.isfinite(p):  # the runs do not differ: no interval either
        return mean, math.nan, math.nan, p
    half = t_quantile(0.975, x.size - 1) * float(x.std(ddof=1) / math.sqrt(x.size))
    return mean, mean - half, mean + half, p


def lowest(candidates: list[dict], score=lambda c: c["score"]) -> str | None:
    ok = [c for c in candidates if c["status"] == "ok" and score(c) is not None and math.isfinite(score(c))]
    return min(ok, key=score)["trained_as"] if ok else None


def tie_pick(stage: dict, z: float) -> str | None:
    """A recorded stage decided again by ``focus_tune.procedure.plan.tie_rule`` at z SE. The trace holds
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


def agreement(choices: list[str | None]) -> tuple[str, float, int]:
    """The modal choice, the share of the runs that could make the choice which made it, and how
    many could: a run without the rule's inputs (None: the stage absent, or its validation
    scores lost with its MLflow store) is left out, not counted as disagreeing."""
    known = [c for c in choices if c is not None]
    if not known:
        return "n/a", math.nan, 0
    top, n = Counter(known).most_common(1)[0]
    return top, n / len(known), len(known)


def strip_seed(trial_id: str | None) -> str | None:
    return None if trial_id is None else trial_id.rsplit("-s", 1)[0]


def summarize(runs: list[dict]) -> dict:
    R = len(runs)
    out: dict = {"runs": R, "seeds": [r["seed"] for r in runs], "folders": [r["folder"] for r in runs],
                 "search_runs": [{"seed": r["seed"], "tracking_uri": r["tracking_uri"], "run_id": r["parent_run_id"]}
                                 for r in runs]}
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
        stability[name] = {rule: dict(zip(("modal", "share", "runs"), agreement(picks)))
                           for rule, picks in rules.items()}
    out["stability"] = stability

    columns = [c for c in COMPARED_COLUMNS if c.better]
    wins, means = {}, {}
    for col in columns:
        per_run = [{f: family_mean(r, f, col.key) for f in MODELS} for r in runs]
        wins[col.key] = dict(Counter(better_of(col, v) or "n/a" for v in per_run))
        means[col.key] = {}
        for f in ROWS:
            by_seed = {r["seed"]: family_mean(r, f, col.key) for r in runs}
            x = np.array([v for v in by_seed.values() if np.isfinite(v)])
            if x.size:
                means[col.key][f] = {"mean": float(x.mean()),
                                     "sd_runs": float(x.std(ddof=1)) if x.size > 1 else math.nan,
                                     "runs": int(x.size),
                                     "per_seed": {str(k): float(v) for k, v in by_seed.items() if np.isfinite(v)}}
    out["wins"], out["means"] = wins, means

    raw = {}
    for a, b in PAIRS:
        for col in columns:
            per_run = []
            for r in runs:
                d = paired_differences(r["finals"].get(a, []), r["finals"].get(b, []), col.key)
                if d.size:
                    per_run.append(float(d.mean()))
            if not per_run and (a, b) in POST_HOC_PAIRS:
                continue  # a metric the post-hoc row does not have (none +conformal: the intervals only)
            x = np.array(per_run)
            mean, lo, hi, p = t_interval(x)
            raw[f"{a} - {b}/{col.key}"] = {"mean": mean, "low": lo, "high": hi, "p": p, "runs": int(x.size),
                                           "below_zero": int((x < 0).sum()), "above_zero": int((x > 0).sum()),
                                           "per_run": per_run, "primary": is_primary((a, b), col.key)}
    adjusted = holm({k: v["p"] for k, v in raw.items()})
    primary = holm({k: v["p"] for k, v in raw.items() if v["primary"]})
    for k, v in raw.items():
        v["holm"] = adjusted[k]
        v["holm_primary"] = primary.get(k, math.nan)
    out["differences"] = raw
    return out
