"""benchmarks/replicate.py on synthetic run folders: schedules, decisions, agreement of the
fixed stages under each rule, wins, means and pooled paired differences with the run as the
unit (no search is run: ``--aggregate-only``)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KEYS = ("test/marginal/ece", "test/marginal/ece_debiased", "test/marginal/ce", "test/marginal/auc",
        "test/marginal/rmse", "test/interval/coverage", "test/interval/relative_width",
        "test/interval/interval_score")


def _stage(name, rows, winner, rule="lowest"):
    cands = [{"trial_id": f"{tid}-s0", "trained_as": f"{tid}-s0", "lambda": lam, "k2": None, "penalty": lam,
              "score": score, "status": "ok", "se": se} for tid, lam, score, se in rows]
    return {"stage": name, "winner": f"{winner}-s0", "candidates": cands,
            "decision": {"rule": rule, "rival": cands[0]["trial_id"], "difference": 0.001, "se": 0.002}}


def _run(folder: Path, r: int):
    """One finished search: time-dependent beats none by 0.01 ECE on every seed (+ a run effect)."""
    report = folder / f"hero-quick-seed{r}" / "report"
    report.mkdir(parents=True)
    with (report / "results.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["family", "stat", "seed", *KEYS])
        for family, shift in (("none", 0.0), ("constant", 0.002 * (-1) ** r), ("time-dependent", -0.01),
                              ("oracle", -0.02), ("image-blind", 0.03)):
            for seed in range(r, r + 3):
                base = 0.03 + 0.001 * seed + 0.004 * r
                w.writerow([family, "value", seed, base + shift, base, 0.5, 0.7, 0.02, 0.85 + shift, 1.0, 3.0])
    # stage 1: l0.05 lowest by 0.001 with SE 0.002 (a tie at 1 SE); constant: 0.005 clearly lowest
    search = {"chosen": {"time-dependent": "l1=0.005 rest=0" if r % 2 else "l1=0.05 rest=0",
                         "constant": "all=0.005"},
              "stages": [_stage("stage1", [("stage1-l0.005", 0.005, 0.021, 0.002), ("stage1-l0.05", 0.05, 0.020, None)],
                                "stage1-l0.005", rule="tie: less penalty"),
                         _stage("constant", [("constant-0.005", 0.005, 0.02, None), ("constant-0.05", 0.05, 0.05, 0.003)],
                                "constant-0.005")]}
    (report / "search.json").write_text(json.dumps(search))


def test_aggregate_only_reads_runs_and_pools_by_run(tmp_path):
    storage = tmp_path / "runs"
    for r in range(4):
        _run(storage, r)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "replicate.py"), "--game", "hero",
                           "--seeds", "0-3", "--storage", str(storage), "--out", str(out), "--aggregate-only"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    s = json.loads((out / "replication.json").read_text())
    assert s["runs"] == 4 and s["missing_seeds"] == []
    assert dict(map(tuple, s["schedules"]["time-dependent"])) == {"l1=0.005 rest=0": 2, "l1=0.05 rest=0": 2}
    assert s["decisions"] == {"count": 8, "ties": 4, "within_1se": 8, "within_2se": 8, "median_z": 0.5}
    stage1 = s["stability"]["stage1"]
    assert stage1["search's rule"] == {"modal": "stage1-l0.005", "share": 1.0}
    assert stage1["lowest (paper)"] == {"modal": "stage1-l0.05", "share": 1.0}
    assert stage1["tie rule at 1 SE"]["modal"] == "stage1-l0.005"  # 0.001 <= 1 x 0.002
    assert s["stability"]["constant"]["tie rule at 2 SE"]["modal"] == "constant-0.005"
    assert s["wins"]["test/marginal/ece"] == {"time-dependent": 4}
    ece = s["differences"]["time-dependent - none/test/marginal/ece"]
    assert ece["mean"] == pytest.approx(-0.01) and ece["below_zero"] == 4 and ece["runs"] == 4
    # every run differs by exactly -0.01: no spread, no test
    assert ece["p"] != ece["p"]
    const = s["differences"]["constant - none/test/marginal/ece"]
    assert const["mean"] == pytest.approx(0.0) and const["below_zero"] == 2 and const["above_zero"] == 2
    assert const["low"] < 0 < const["high"] and 0.5 < const["p"] <= 1
    assert s["means"]["test/marginal/ece"]["oracle"]["mean"] < s["means"]["test/marginal/ece"]["none"]["mean"]
    md = (out / "replication.md").read_text()
    assert "R = 4 searches" in md and "| time-dependent - none | ECE | -0.0100 |" in md


def test_missing_runs_are_named(tmp_path):
    _run(tmp_path / "runs", 0)
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "replicate.py"), "--game", "hero",
                           "--seeds", "0-1", "--storage", str(tmp_path / "runs"), "--out", str(tmp_path / "out"),
                           "--aggregate-only"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3
    assert json.loads((tmp_path / "out" / "replication.json").read_text())["missing_seeds"] == [1]
