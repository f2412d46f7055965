"""``python -m focus_tune.replicate``: on synthetic run folders (``--aggregate-only``: schedules,
decisions, agreement of the fixed stages under each rule, wins, means and pooled paired
differences with the run as the unit), and end to end on the smoke profile: a finished
search is not run again, Ctrl-C stops the running one and aggregates the finished, and the
same command resumes it; the replication is one MLflow run naming its searches."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from focus_tune.replicate.regime import PAPER_REGIME, REGIMES, check_run, checks_for, regime, sweep_run
from smoke_search import GAME, RUN, search_runs

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
        for seed in range(r, r + 3):  # the post-hoc rows: a temperature that helps a little, none's conformal
            base = 0.03 + 0.001 * seed + 0.004 * r
            w.writerow(["temperature-scaled", "value", seed, base - 0.002 * (1 + r % 2), base, 0.5, 0.7, 0.02, 0.85,
                        1.0, 3.0])
            w.writerow(["none +conformal", "value", seed, "", "", "", "", "", 0.9, 1.2 + 0.01 * r, 2.9 - 0.01 * seed])
    # stage 1: l0.05 lowest by 0.001 with SE 0.002 (a tie at 1 SE); constant: 0.005 clearly lowest
    search = {"chosen": {"time-dependent": "l1=0.005 rest=0" if r % 2 else "l1=0.05 rest=0",
                         "constant": "all=0.005"},
              "stages": [_stage("stage1", [("stage1-l0.005", 0.005, 0.021, 0.002), ("stage1-l0.05", 0.05, 0.020, None)],
                                "stage1-l0.005", rule="tie: less penalty"),
                         _stage("constant",
                                [("constant-0.005", 0.005, 0.02, None), ("constant-0.05", 0.05, 0.05, 0.003)],
                                "constant-0.005")]}
    (report / "search.json").write_text(json.dumps(search))


def test_aggregate_only_reads_runs_and_pools_by_run(tmp_path):
    storage = tmp_path / "runs"
    for r in range(4):
        _run(storage, r)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "focus_tune.replicate", "--game", "hero", "--seeds", "0-3",
                           "--storage", str(storage), "--out", str(out), "--aggregate-only",
                           "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    s = json.loads((out / "replication.json").read_text())
    assert s["runs"] == 4 and s["missing_seeds"] == []
    assert dict(map(tuple, s["schedules"]["time-dependent"])) == {"l1=0.005 rest=0": 2, "l1=0.05 rest=0": 2}
    assert s["decisions"] == {"count": 8, "ties": 4, "within_1se": 8, "within_2se": 8, "median_z": 0.5}
    stage1 = s["stability"]["stage1"]
    assert stage1["search's rule"] == {"modal": "stage1-l0.005", "share": 1.0, "runs": 4}
    assert stage1["lowest (paper)"] == {"modal": "stage1-l0.05", "share": 1.0, "runs": 4}
    assert stage1["tie rule at 1 SE"]["modal"] == "stage1-l0.005"  # 0.001 <= 1 x 0.002
    assert s["stability"]["constant"]["tie rule at 2 SE"]["modal"] == "constant-0.005"
    assert s["wins"]["test/marginal/ece"] == {"time-dependent": 4}
    ece = s["differences"]["time-dependent - none/test/marginal/ece"]
    assert ece["mean"] == pytest.approx(-0.01) and ece["below_zero"] == 4 and ece["runs"] == 4
    # every run differs by exactly -0.01: no spread, no test
    assert ece["p"] != ece["p"] and ece["low"] != ece["low"] and ece["high"] != ece["high"]
    const = s["differences"]["constant - none/test/marginal/ece"]
    assert const["mean"] == pytest.approx(0.0) and const["below_zero"] == 2 and const["above_zero"] == 2
    assert const["low"] < 0 < const["high"] and 0.5 < const["p"] <= 1
    assert s["means"]["test/marginal/ece"]["oracle"]["mean"] < s["means"]["test/marginal/ece"]["none"]["mean"]
    assert ece["per_run"] == pytest.approx([-0.01] * 4)
    assert s["differences"]["time-dependent - none/test/marginal/ece"]["primary"]
    assert not s["differences"]["time-dependent - none/test/marginal/auc"]["primary"]
    md = (out / "replication.md").read_text()
    assert "R = 4 searches" in md and "| time-dependent - none | ECE* | -0.0100 |" in md
    assert "![paired differences to none, run by run](replication.png)" in md
    assert (out / "replication.png").read_bytes()[:4] == b"\x89PNG"
    # every row has CE 0.5, image-blind's too: no family reads the frame, in any run
    assert s["regime"]["kept"] == 0 and len(s["regime"]["runs"][0]["missed"]) == 3
    assert "**Kept in 0 of 4 searches.**" in md
    assert "| 0 | **no** | CE at least 0.08 below image-blind's — none: 0.500 against 0.420;" in md
    (run,) = _replication_runs(tmp_path / "mlflow.db", "hero")
    assert run.data.tags["regime_kept"] == "0/4"


def _finals(**rows):
    """A search's finals: family -> its seeds' rows ({key: value}), three seeds alike."""
    return {"finals": {f: [dict(v)] * 3 for f, v in rows.items()}, "seed": 7}


def test_the_regime_is_checked_search_by_search_against_its_own_references():
    ce, auc, cov = "test/marginal/ce", "test/marginal/auc", "test/interval/coverage"
    reads = {ce: 0.50, auc: 0.70}
    kept = _finals(none=reads, constant=reads, **{"time-dependent": reads, "image-blind": {ce: 0.60, auc: 0.5}})
    assert check_run(kept, REGIMES["hero"]) == []
    # 0.51 is only 0.075 below image-blind's 0.585; a missing AUC misses too
    blind = _finals(none=reads, constant={ce: 0.51, auc: 0.70}, **{"time-dependent": {ce: 0.40},
                                                                  "image-blind": {ce: 0.585}})
    missed = check_run(blind, REGIMES["hero"])
    assert [(m["check"].split()[0], m["family"]) for m in missed] == [("CE", "constant"), ("macro", "time-dependent")]
    assert missed[0]["value"] == pytest.approx(0.51) and missed[0]["limit"] == pytest.approx(0.505)
    # no image-blind row: the CE check cannot be kept
    assert len(check_run(_finals(none=reads, constant=reads, **{"time-dependent": reads}), REGIMES["hero"])) == 3
    # FaceMed: the coverage check is the unregularized family's alone
    face = {auc: 0.80, cov: 0.95}
    r = regime("facemed", [_finals(none={auc: 0.80, cov: 0.86}, constant=face, **{"time-dependent": face}),
                           _finals(none=face, constant=face, **{"time-dependent": face})])
    assert r["kept"] == 1 and [x["kept"] for x in r["runs"]] == [True, False]
    assert r["runs"][1]["missed"][0]["family"] == "none"
    assert regime("digits", [kept]) is None  # a scenario without declared checks
    assert set(REGIMES) == {"hero", "facemed", "seaquest", "riverraid", "bankheist", "roadrunner"}


def test_the_papers_regime_is_judged_on_nones_median_against_its_own_references():
    ece, ce, cov = "test/marginal/ece", "test/marginal/ce", "test/interval/coverage"
    refs = {"oracle": [{ece: 0.030, ce: 0.40}] * 3, "image-blind": [{ece: 0.05, ce: 0.70}] * 3}
    # one seed out of the regime does not move the median; lambda's rows are not read
    over = [{ece: 0.08, ce: 0.62, cov: 0.70}, {ece: 0.09, ce: 0.60, cov: 0.75}, {ece: 0.01, ce: 0.80, cov: 0.95}]
    run = {"seed": 0, "finals": {"none": over, "time-dependent": [{}], **refs}}
    assert check_run(run, PAPER_REGIME) == []
    assert checks_for("hero", "overconfident") == PAPER_REGIME and checks_for("hero") == REGIMES["hero"]
    # calibrated enough (ECE only 0.015 above the oracle's), covering, or blind: each misses its own check
    for change, label in [({ece: 0.045}, "ECE"), ({cov: 0.85}, "I_0.9"), ({ce: 0.66}, "reads")]:
        rows = [{**r, **change} for r in over]
        missed = check_run({"seed": 0, "finals": {"none": rows, **refs}}, PAPER_REGIME)
        assert [label in m["check"] for m in missed] == [True], (change, missed)
    assert regime("digits", [run], profile="overconfident")["kept"] == 1  # the same checks for every scenario


def test_a_sweep_cell_is_judged_as_a_search():
    rows = [{"game": "facemed", "schedule": "none", "seed": s, "epoch": e, "marginal/ece": 0.08 + e / 1e4,
             "marginal/ce": 0.62, "interval/coverage": 0.7, "marginal/auc": 0.75, "ref/oracle/ece": 0.03,
             "ref/oracle/ce": 0.4, "ref/image-blind/ce": 0.70, "ref/image-blind/ece": 0.05}
            for s in range(3) for e in (80, 160)]
    run = sweep_run(rows, 160)
    assert [r["test/marginal/ece"] for r in run["finals"]["none"]] == [pytest.approx(0.096)] * 3
    assert run["finals"]["oracle"] == [{"seed": s, "test/marginal/ece": 0.03, "test/marginal/ce": 0.4}
                                       for s in range(3)]
    assert check_run(run, PAPER_REGIME) == []


def test_the_sweeps_regime_table_judges_a_cell_over_its_dataset_draws_and_on_each(tmp_path):
    """benchmarks/regime_sweep.py --regime: a cell's runs on every dataset draw give the median
    check; each draw judged on its own runs gives "draws kept"; rows from before --data-seeds
    (no data_seed) are draw 0; the resume key tells the draws apart."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("regime_sweep", Path(__file__).parents[1] / "benchmarks" /
                                                  "regime_sweep.py")
    sweep = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("regime_sweep", sweep)  # its dataclass looks its module up there
    spec.loader.exec_module(sweep)

    def row(seed, coverage, data_seed=None):
        return {"game": "hero", "train_items": 250, "width": 32, "schedule": "none", "seed": seed, "lr": 1e-3,
                "lr_schedule": "constant", "epoch": 120, "marginal/ece": 0.08, "marginal/ce": 0.55,
                "interval/coverage": coverage, "ref/oracle/ece": 0.03, "ref/image-blind/ce": 0.64,
                **({} if data_seed is None else {"data_seed": data_seed})}

    rows = [row(s, 0.7) for s in range(3)] + [row(0, 0.85, 3), row(0, 0.75, 6)]
    path = tmp_path / "sweep.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (line,) = [x for x in sweep.regime_table([str(path)]) if x.startswith("| hero")]
    # five runs, median coverage 0.70; draw 0 (three seeds) and draw 6 keep it, draw 3 does not
    assert line == "| hero | 250 | 0.001 constant | 120 | 30000 | 5 | 0.700 | +0.0500 | -0.0900 | **yes** | 2/3 |"
    assert sweep.done_configs(str(path), 120) == {sweep._key(r) for r in rows}
    assert sweep._key(rows[0])[-1] == 0 and sweep._key(rows[3])[-1] == 3


def test_the_regime_command_reads_finished_reports(tmp_path):
    for r in range(2):
        _run(tmp_path, r)
    proc = subprocess.run([sys.executable, "-m", "focus_tune.replicate.regime", "--game", "hero", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "**Kept in 0 of 2 searches.**" in proc.stdout and proc.stdout.count("| **no** |") == 2
    proc = subprocess.run([sys.executable, "-m", "focus_tune.replicate.regime", "--game", "hero", str(tmp_path / "x")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no results.csv under" in proc.stderr


def test_missing_runs_are_named(tmp_path):
    _run(tmp_path / "runs", 0)
    proc = subprocess.run([sys.executable, "-m", "focus_tune.replicate", "--game", "hero", "--runs", "2",
                           "--storage", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--aggregate-only",
                           "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 3
    assert json.loads((tmp_path / "out" / "replication.json").read_text())["missing_seeds"] == [1]
    assert "not finished: seeds 1" in proc.stderr
    (run,) = _replication_runs(tmp_path / "mlflow.db", "hero")
    assert run.info.status == "FAILED" and run.data.tags["runs"] == "1"


@pytest.mark.parametrize("bad, message", [(["--runs", "0"], "--runs must be at least 1"),
                                         (["--seeds", "a-b"], "is not a list like 0-4"),
                                         (["--runs", "2", "--", "--seed", "3"], "--seed after --"),
                                         (["--runs", "2", "--", "--set", "train.epochs=3"], "--set after --"),
                                         (["--runs", "1", "--set", "train.epochs"], "expected KEY=VALUE"),
                                         (["--runs", "1", "--set", "train.epochs=-1"],
                                          "error: the searches' flags: --set: train.epochs: -1 must be >= 1")])
def test_bad_flags_are_named(tmp_path, bad, message):
    proc = subprocess.run([sys.executable, "-m", "focus_tune.replicate", "--game", "hero", *bad],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not list(tmp_path.glob("runs/replication/*-seed*")), "no search started"


def test_a_storage_whose_searches_had_other_overrides_is_refused(tmp_path):
    """Replicated searches are found by their folders' names: a finished one made with other
    --set would be counted as this replication's, so the replication refuses to start."""
    folder = tmp_path / "runs" / "hero-smoke-seed0"
    folder.mkdir(parents=True)
    (folder / "search_state.json").write_text(json.dumps({"fingerprint": {"overrides": {"train.epochs": 5}}}))
    proc = subprocess.run([sys.executable, "-m", "focus_tune.replicate", "--game", "hero", "--profile", "smoke",
                           "--runs", "1", "--storage", str(tmp_path / "runs"), "--set", "train.epochs=2"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert ("seed 0's search in" in proc.stderr and "was made with --set train.epochs=5, this replication gives "
            "--set train.epochs=2: use another --storage" in proc.stderr), proc.stderr


def test_version():
    proc = subprocess.run([sys.executable, "-m", "focus_tune.replicate", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("focus-tune ")


def _replication_runs(db: Path, game: str):
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name(f"focus-tune/{game}")
    return client.search_runs([exp.experiment_id], filter_string="tags.kind = 'replication'")


def _lines_until(proc, text: str, seen: list[str]) -> None:
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            return
    raise AssertionError(f"{text!r} never printed:\n{''.join(seen)}")


def test_smoke_replication_skips_the_finished_search_stops_on_ctrl_c_and_resumes(smoke_search, tmp_path):
    """Seed 0 is the session's finished smoke search, copied into the storage folder as a
    replication leaves it; seed 1 is searched, stopped by Ctrl-C once a trial of it finished
    (the test waits on its search state, not on a clock), then resumed by the same command.

    The suite's one Ctrl-C of a whole search, so the search of seed 1 is held to what Ctrl-C
    promises a search: it holds its folder's lock while it runs and releases it; it stops within
    a minute, saves its finished trials and hands out no trial again; its MLflow parent is KILLED
    with the reason and no child stays RUNNING; --resume retrains nothing that had finished,
    ends FINISHED, and its final models load through the documented one-liner.
    (tests/test_reliability.py has the second Ctrl-C, which exits at once.)"""
    storage = tmp_path / "runs"
    storage.mkdir()
    shutil.copytree(smoke_search.work / "runs" / RUN, storage / RUN)
    shutil.copy(smoke_search.work / "mlflow.db", storage / f"mlflow-{RUN}.db")
    finished_at = (storage / RUN / "report" / "results.csv").stat().st_mtime_ns
    db = tmp_path / "mlflow.db"
    cmd = [sys.executable, "-m", "focus_tune.replicate", "--game", GAME, "--profile", "smoke", "--runs", "2",
           "--storage", str(storage), "--tracking-uri", f"sqlite:///{db}"]
    env = {**__import__("os").environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []
    try:
        _lines_until(proc, "seed 1: searching", seen)
        folder = storage / f"{GAME}-smoke-seed1"
        state = folder / "search_state.json"
        deadline = time.time() + 400  # a guard against a hung search, not a timing
        while time.time() < deadline and proc.poll() is None:
            if state.exists():
                try:
                    if any(v is not None for v in json.loads(state.read_text())["results"].values()):
                        break
                except ValueError:
                    pass  # caught mid-write
            time.sleep(0.2)
        holder = json.loads((folder / "search.lock").read_text())["pid"]  # the running search holds its folder
        assert "focus_tune.search" in Path(f"/proc/{holder}/cmdline").read_bytes().decode().replace("\0", " ")
        t0 = time.time()
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=400)
        stopped_in = time.time() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    first = "".join(seen) + rest
    assert proc.returncode == 130, first[-3000:]
    assert stopped_in < 60, stopped_in
    # the search of seed 1, as Ctrl-C left it
    assert not (folder / "search.lock").exists()  # released
    saved = json.loads(state.read_text())
    assert len([v for v in saved["results"].values() if v is not None]) >= 1 and saved["fit_seconds"] == []
    log = (storage / "logs" / f"{GAME}-smoke-seed1.log").read_text()
    assert "continue with the same command and --resume" in log
    done = [tid for tid, v in saved["results"].items() if v is not None]
    assert all(log.count(f"] {tid}: training") == 1 for tid in done), "a trial was handed out again"
    client, exp, parents, _ = search_runs(storage / f"mlflow-{GAME}-smoke-seed1.db")
    assert [p.info.status for p in parents] == ["KILLED"] and "SIGINT" in parents[0].data.tags["stop_reason"]
    kids = client.search_runs([exp.experiment_id], filter_string="tags.kind != 'search'")
    assert "RUNNING" not in {k.info.status for k in kids}
    assert "[1/2] facemed seed 0: finished before, not run again (time-dependent " in first
    assert "seed 1: stopped after" in first and "interrupted: the finished searches are aggregated" in first
    out = storage / f"{GAME}-smoke-replication"
    assert json.loads((out / "replication.json").read_text())["missing_seeds"] == [1]
    (run,) = _replication_runs(db, GAME)
    assert run.info.status == "KILLED"

    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "seed 0: finished before, not run again" in again.stdout
    assert "facemed seed 1: resuming" in again.stdout and "[2/2] facemed seed 1: done in" in again.stdout
    log = (storage / "logs" / f"{GAME}-smoke-seed1.log").read_text()
    assert "resuming: " in log and "resuming: 0 trials already done" not in log
    finished = json.loads(state.read_text())["results"]
    for tid, score in saved["results"].items():
        assert finished[tid] == score, f"{tid}: a finished trial was retrained"
    assert all(log.count(f"] {tid}: training") == 1 for tid in done), "a finished trial was trained again"
    client, exp, parents, _ = search_runs(storage / f"mlflow-{GAME}-smoke-seed1.db")
    assert [p.info.status for p in parents] == ["FINISHED"]
    models = client.search_logged_models([exp.experiment_id])
    assert sorted(m.name for m in models) == ["model-constant", "model-none", "model-time-dependent"]
    import mlflow

    from focus_tune.sim.model_io import load_model

    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{storage / f'mlflow-{GAME}-smoke-seed1.db'}")
    try:
        model = load_model(f"models:/{models[0].model_id}")
    finally:
        mlflow.set_tracking_uri(before)
    assert not model.training and sum(p.numel() for p in model.parameters()) > 0
    assert {p.name for p in (folder / "models" / "none").iterdir()} == {"weights.npz", "model.json"}
    assert (storage / RUN / "report" / "results.csv").stat().st_mtime_ns == finished_at
    summary = json.loads((out / "replication.json").read_text())
    assert summary["runs"] == 2 and summary["missing_seeds"] == [] and summary["seeds"] == [0, 1]
    assert all(r["run_id"] for r in summary["search_runs"])
    (run,) = _replication_runs(db, GAME)  # the same run, updated
    assert run.info.status == "FINISHED" and run.data.tags["runs"] == "2"
    for r in summary["search_runs"]:
        uri, run_id = run.data.tags[f"search.seed{r['seed']}"].split()
        assert MlflowClient(uri).get_run(run_id).data.tags["kind"] == "search"
    artifacts = {a.path for a in MlflowClient(f"sqlite:///{db}").list_artifacts(run.info.run_id)}
    assert {"replication.md", "replication.json", "replication.png", "searches"} <= artifacts
    assert "replication/time-dependent-minus-none/ece/mean" in run.data.metrics


def _aggregated(tmp_path, name: str):
    """Four fake H.E.R.O. searches (:func:`_run`) aggregated by ``python -m focus_tune.replicate
    --aggregate-only`` into ``tmp_path/name``: a replication folder with its replication.json."""
    storage, out = tmp_path / "runs", tmp_path / name
    for r in range(4):
        _run(storage, r)
    subprocess.run([sys.executable, "-m", "focus_tune.replicate", "--game", "hero", "--seeds", "0-3", "--storage",
                    str(storage), "--out", str(out), "--aggregate-only", "--tracking-uri",
                    f"sqlite:///{tmp_path / 'mlflow.db'}"], check=True, capture_output=True, timeout=120, cwd=tmp_path)
    return out


def test_the_verdict_across_scenarios(tmp_path):
    """python -m focus_tune.replicate.verdict: one row per scenario from its replication.json,
    the post-hoc comparisons, the regime, the paper's values and Holm over every scenario's
    primary comparisons together."""
    from focus_tune.replicate.verdict import PAPER, verdict

    out = _aggregated(tmp_path, "hero-quick")
    for r, wall, kind in ((0, 540, "with"), (1, 600, "with"), (2, 1200, "without")):  # what
        # scripts/verdict_replications.sh leaves beside each search
        (out / "searches" / f"seed{r}").mkdir(parents=True)
        (out / "searches" / f"seed{r}" / "provenance.json").write_text(json.dumps(
            {"commit": "c9f0136" + "0" * 33, "cpu": f"AMD EPYC {kind} AVX-512", "cores": 2, "wall_s": wall}))
    from focus_tune.replicate.verdict import BLOCK_END, BLOCK_START, DATA_END, DATA_START

    readme, plain = tmp_path / "README.md", tmp_path / "plain.md"
    readme.write_text(f"# x\n\n{BLOCK_START}\nold table\n{BLOCK_END}\n\nafter\n{DATA_START}\nold data\n{DATA_END}\n")
    plain.write_text("no block here\n")
    cmd = [sys.executable, "-m", "focus_tune.replicate.verdict", "--out", str(tmp_path / "verdict"), str(out)]
    refused = subprocess.run([*cmd, "--docs", str(readme), str(plain)], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2
    assert "plain.md: needs one" in refused.stderr and "no file was changed" in refused.stderr
    assert "old table" in readme.read_text() and plain.read_text() == "no block here\n"
    proc = subprocess.run([*cmd, "--docs", str(readme)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = readme.read_text()
    assert text.startswith(f"# x\n\n{BLOCK_START}\n| scenario | R |") and text.endswith(f"{DATA_END}\n")
    assert "old table" not in text and "| H.E.R.O. | 4 | 0.0385 | -0.0100, 4/4 | 0.850 | -0.010, 0/4 |" in text
    assert "old data" not in text and f"{BLOCK_END}\n\nafter\n{DATA_START}\n| scenario |" in text
    v = json.loads((tmp_path / "verdict" / "verdict.json").read_text())
    row = v["scenarios"]["hero"]
    assert row["runs"] == 4 and row["regime"] == {"kept": 0, "runs": 4} and row["paper"] == {
        "ece": list(PAPER["hero"]["ece"]), "coverage": list(PAPER["hero"]["coverage"])}
    ts = row["comparisons"]["ECE vs temperature-scaled"]
    assert ts["pair"] == ["time-dependent", "temperature-scaled"] and ts["primary"]
    # per search: -0.01 - (-0.002 or -0.004) = -0.008 / -0.006
    assert ts["per_run"] == pytest.approx([-0.008, -0.006, -0.008, -0.006]) and ts["below"] == 4
    conformal = row["comparisons"]["interval score vs none +conformal"]
    assert conformal["primary"] and conformal["mean"] == pytest.approx(0.1 + 0.01 * 2.5)  # 3.0 - (2.9 - 0.01 (r + 1))
    assert not row["comparisons"]["width vs none +conformal"]["primary"]
    assert row["none_conformal_coverage"] == pytest.approx(0.9)
    # none covers 0.85 and time-dependent 0.84 in every search: below zero 4/4, closer to 0.9 in none
    cov = row["comparisons"]["coverage"]
    assert cov["below"] == 4 and cov["closer"] == 0
    md = (tmp_path / "verdict" / "verdict.md").read_text()
    assert "| H.E.R.O. | 4 |" in md and "0.095 → 0.048" in md and "0/4 |" in md
    assert "| -0.010, 0/4 |" in md  # the coverage cell counts the searches closer to 0.9
    assert (tmp_path / "verdict" / "verdict.png").read_bytes()[:4] == b"\x89PNG"
    assert "| H.E.R.O. | 2 | 9.5 min (9.0-10.0) | c9f0136 | AMD EPYC with AVX-512, 2 cores |" in md
    assert "| H.E.R.O. | 1 | 20.0 min (20.0-20.0) | c9f0136 | AMD EPYC without AVX-512, 2 cores |" in md  # not pooled
    # equivalence and the pooled estimate: one scenario pools to its own t interval
    ece = row["comparisons"]["ECE"]
    assert set(ece["equivalence"]) == {"low", "high", "margin", "equivalent"}
    assert "## Equivalence, headroom and the pooled estimate" in md
    assert v["pooled"]["all"]["names"] == ["hero"] and v["pooled"]["games"]["names"] == ["hero"]
    # the data facts of an earlier verdict.json stand in for the datasets
    again = subprocess.run([*cmd, "--data-facts", str(tmp_path / "verdict" / "verdict.json")], capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "verdict" / "verdict.json").read_text())["data"] == v["data"]
    # Holm over all scenarios: two scenarios double the primary tests, the pooled adjustment is at
    # least each scenario's own
    s = json.loads((out / "replication.json").read_text())
    one, two = verdict({"hero": s}), verdict({"hero": s, "seaquest": s})
    assert two["primary_tests"] == 2 * one["primary_tests"] > 0
    for label, c in two["scenarios"]["seaquest"]["comparisons"].items():
        if c["primary"] and c["p"] == c["p"]:
            assert c["holm_all"] >= one["scenarios"]["hero"]["comparisons"][label]["holm_all"]


def test_a_kept_report_brings_its_validation_scores_where_its_store_is_gone(tmp_path):
    """scripts/verdict_replications.sh keeps each search's report with a validation.json (the
    fixed stages' candidates' validation scores from its MLflow store); aggregated from those
    copies alone, the selection-rule rows that need them are still there."""
    from focus_tune.replicate.analysis import VALIDATION_FILE, read_run, summarize

    runs = []
    for r in range(2):
        _run(tmp_path, r)
        folder = tmp_path / f"hero-quick-seed{r}"
        val = {"stage1-l0.005-s0": {"val/brier": 0.30}, "stage1-l0.05-s0": {"val/brier": 0.31},
               "constant-0.005-s0": {"val/brier": 0.32}, "constant-0.05-s0": {"val/brier": 0.29}}
        (folder / "report" / VALIDATION_FILE).write_text(json.dumps(val))
        runs.append(read_run(folder, None, r))
        assert runs[-1]["val"] == val
    stability = summarize(runs)["stability"]
    assert stability["stage1"]["lowest brier"] == {"modal": "stage1-l0.005", "share": 1.0, "runs": 2}
    assert stability["constant"]["lowest brier"] == {"modal": "constant-0.05", "share": 1.0, "runs": 2}
    shutil.rmtree(tmp_path / "hero-quick-seed1" / "report")
    _run(tmp_path, 1)  # without the file: no scores, and no such row from it
    assert read_run(tmp_path / "hero-quick-seed1", None, 1)["val"] == {}
    # a run whose scores are lost is left out of the share, not counted as choosing otherwise
    runs[1] = read_run(tmp_path / "hero-quick-seed1", None, 1)
    stability = summarize(runs)["stability"]
    assert stability["stage1"]["lowest brier"] == {"modal": "stage1-l0.005", "share": 1.0, "runs": 1}
    assert stability["stage1"]["search's rule"]["runs"] == 2


def test_what_the_data_show(tmp_path):
    """The verdict's table of why the scenarios differ: each dataset's test split (mean min(T, L),
    the share with the event within L, the share censored) and, from the replication, how much
    the frame tells (image-blind's CE minus the exact process's) and how much of it `none` reads."""
    import numpy as np

    from focus_tune.data import write_dataset
    from focus_tune.replicate.verdict import data_facts, facts_markdown, frame_facts

    A, B, END, U = 0, 1, 2, -1
    sequences = np.array([[A, B, A, B], [B, A, B, A], [A, A, A, A],  # train, val
                          [A, END, END, END],  # test: T = 2
                          [A, B, A, B],  # no event within L: min(T, L) = 4
                          [A, U, U, U]])  # censored after entry 1
    folder = write_dataset(tmp_path / "mine", images=np.zeros((6, 8, 8), np.uint8), sequences=sequences,
                           classes=["A", "B", "END"], event="END", splits=["train", "train", "val", *["test"] * 3])
    (facts,) = data_facts([folder]).values()
    assert facts["L"] == 4 and facts["items"] == 3 and facts["datasets"] == ["mine"]
    assert facts["mean_length"] == pytest.approx((2 + 4 + 1) / 3)
    assert facts["event_rate"] == pytest.approx(1 / 3) and facts["censored"] == pytest.approx(1 / 3)
    assert facts["val_mean_length"] == 4  # [A, A, A, A]: no event within L
    ce = {"image-blind": 0.7, "exact": 0.3, "none": 0.5, "time-dependent": 0.45}
    frame = frame_facts({"mine": {"means": {"test/marginal/ce": {k: {"mean": v} for k, v in ce.items()}}}})
    assert frame["mine"]["tells"] == pytest.approx(0.4) and frame["mine"]["read"] == pytest.approx(0.5)
    assert frame_facts({"x": {"means": {}}})["x"]["read"] != frame_facts({"x": {"means": {}}})["x"]["read"]  # NaN
    rows = facts_markdown(frame, {"mine": facts})
    assert rows[2] == "| mine | 4 | 2.3 | 4.0 | 33 % | 33 % | 0.700 | 0.300 | 0.500 | 0.450 | 0.400 | 50 % |"


def test_the_split_association_pairs_each_search_with_its_own_dataset():
    """Search by search: (validation - test) / test of the mean min(T, L), from the dataset whose
    manifest seed is the search's seed, against that search's `none +conformal` test coverage;
    Spearman's rho as a plain rank correlation computes it, and none below 8 searches."""
    import numpy as np

    from focus_tune.replicate.verdict import association_markdown, split_association

    rng = np.random.default_rng(0)
    test_len = rng.uniform(10, 20, 10)
    val_len = test_len * (1 + rng.uniform(-0.4, 0.2, 10))
    coverage = 0.9 + 0.3 * (val_len - test_len) / test_len + rng.normal(0, 0.01, 10)
    reps, data = {}, {}
    for k, scenario in enumerate(("a", "b")):
        seeds = range(5 * k, 5 * k + 5)
        reps[scenario] = {"means": {"test/interval/coverage": {"none +conformal": {
            "per_seed": {str(s): float(coverage[s]) for s in seeds}}}}}
        data[scenario] = {"per_dataset": [{"folder": f"{scenario}-quick-seed{s}", "seed": s,
                                           "mean_length": float(test_len[s]), "val_mean_length": float(val_len[s])}
                                          for s in seeds]}
    data["a"]["per_dataset"].append({"folder": "a-quick-seed9", "seed": 9, "mean_length": 5.0,
                                     "val_mean_length": 5.0})  # no such search
    a = split_association(reps, data)
    assert a["n"] == 10
    x = (val_len - test_len) / test_len

    def ranks(v):
        r = np.empty(len(v))
        r[np.argsort(v)] = np.arange(len(v))
        return r

    rx, ry = ranks(x), ranks(coverage)
    assert a["rho"] == pytest.approx(np.corrcoef(rx, ry)[0, 1])  # no ties: Pearson of the ranks
    assert a["rho"] > 0.8 and a["p"] < 0.01
    line = association_markdown(a)[0]
    assert "Spearman's rho" in line and "exploratory" in line and "n = 10" in line
    few = split_association({"a": reps["a"]}, {"a": data["a"]})
    assert few["n"] == 5 and "rho" not in few and "no rank correlation" in association_markdown(few)[0]


def test_readme_and_results_open_with_the_committed_verdict():
    """The verdict blocks of README.md and docs/RESULTS.md are the short table of the committed
    docs/results/verdict/verdict.json (scripts/verdict_aggregate.sh writes all three)."""
    from focus_tune.replicate.verdict import (
        BLOCK_END,
        BLOCK_START,
        DATA_END,
        DATA_START,
        facts_markdown,
        short_markdown,
    )

    root = Path(__file__).resolve().parents[1]
    v = json.loads((root / "docs" / "results" / "verdict" / "verdict.json").read_text())
    table, facts = short_markdown(v), facts_markdown(v["frame"], v["data"])
    assert len(table) == 2 + 6 and len(facts) == 2 + 6

    def block(text: str, start: str, end: str) -> list[str]:
        return text[text.index(start) + len(start):text.index(end)].strip("\n").split("\n")

    for doc in ("README.md", "docs/RESULTS.md"):
        text = (root / doc).read_text()
        assert block(text, BLOCK_START, BLOCK_END) == table, doc
        if DATA_START in text:
            assert block(text, DATA_START, DATA_END) == facts, doc
    assert DATA_START in (root / "docs/RESULTS.md").read_text()


def test_the_regime_verdicts_searches_share_no_final_seed_and_its_margin_follows_nones_headroom():
    from focus_tune.replicate.regime_design import FINAL_SEEDS, MIN_SEARCHES, equivalence_margin, search_seeds

    seeds = search_seeds(MIN_SEARCHES)
    finals = [set(range(s, s + FINAL_SEEDS)) for s in seeds]
    assert seeds[0] == 0 and all(a.isdisjoint(b) for i, a in enumerate(finals) for b in finals[i + 1:])
    # the median headroom 0.04 (none 0.09 - oracle 0.05), a quarter of it
    assert equivalence_margin([0.07, 0.09, 0.10], [0.05, 0.05, 0.05]) == pytest.approx(0.01)
    assert equivalence_margin([0.03], [0.05]) == 0.0  # no headroom: nothing could be shown equivalent
    with pytest.raises(ValueError):
        equivalence_margin([0.1], [])


def test_the_regime_verdict_has_its_declared_primary_holm_over_scenarios_and_a_pooled_headline(tmp_path):
    """python -m focus_tune.replicate.verdict --regime: the design of regime_design.py on
    replications (here the quick fixture's, as two scenarios): one primary comparison per
    scenario and Holm over those alone, the secondary comparisons without a test, the pooled
    estimate, and the pages' regime block rewritten."""
    from focus_tune.replicate.verdict import REGIME_END, REGIME_START, regime_markdown, regime_verdict

    out = _aggregated(tmp_path, "hero-overconfident")
    s = json.loads((out / "replication.json").read_text())
    import copy

    key = "time-dependent - none/test/marginal/ece"
    a, b = copy.deepcopy(s), copy.deepcopy(s)
    a["differences"][key]["p"], b["differences"][key]["p"] = 0.04, 0.01  # the fixture's runs do not differ
    v = regime_verdict({"hero": a, "seaquest": b})
    assert v["primary_tests"] == 2  # one per scenario, not 36
    assert v["scenarios"]["hero"]["comparisons"]["ECE"]["holm_all"] == pytest.approx(0.04)
    assert v["scenarios"]["seaquest"]["comparisons"]["ECE"]["holm_all"] == pytest.approx(0.02)
    row = v["scenarios"]["hero"]
    assert [label for label, c in row["comparisons"].items() if c["primary"]] == ["ECE"]
    assert all(c["holm_all"] != c["holm_all"] for label, c in row["comparisons"].items() if not c["primary"])
    assert row["comparisons"]["ECE"]["per_run"] == pytest.approx(s["differences"][
        "time-dependent - none/test/marginal/ece"]["per_run"])
    assert set(row["comparisons"]["ECE"]["equivalence"]) == {"low", "high", "margin", "equivalent"}
    assert v["pooled"]["all"]["names"] == ["hero", "seaquest"]
    # beside the headline, the pool over the scenarios whose searches kept the regime in more than half
    runs = s["runs"]
    a["regime"], b["regime"] = {"kept": runs // 2 + 1, "runs": runs}, {"kept": runs // 2, "runs": runs}
    held = regime_verdict({"hero": a, "seaquest": b})
    assert held["pooled"]["in_regime"]["names"] == ["hero"]
    assert held["pooled"]["in_regime"]["mean"] == pytest.approx(row["comparisons"]["ECE"]["mean"])
    assert any(line.startswith("**In the regime** (the scenarios whose searches kept the regime's checks in more "
                               "than half: H.E.R.O.)") for line in regime_markdown(held))
    a["regime"]["kept"] = runs // 2
    assert any("no scenario's searches kept" in line for line in regime_markdown(regime_verdict({"hero": a})))
    page = tmp_path / "README.md"
    page.write_text(f"x\n{REGIME_START}\nold\n{REGIME_END}\n")
    proc = subprocess.run([sys.executable, "-m", "focus_tune.replicate.verdict", "--regime", "--out",
                           str(tmp_path / "verdict-regime"), str(out), "--docs", str(page)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    assert "old" not in text and "| H.E.R.O. | 4 |" in text and "**Pooled over 1 scenario(s)**" in text
    assert (tmp_path / "verdict-regime" / "verdict.png").read_bytes()[:4] == b"\x89PNG"


def test_grid_reach_counts_every_stage_choice_at_the_grids_edges(tmp_path):
    """verdict --regime's check that the lambda grid reaches: every choice of a time-dependent
    stage (stage 1..k1 or joint) and of the constant stage, at its grid's top, bottom or between,
    and the searches with a time-dependent choice at the top; none's stage and a stage of one
    candidate say nothing."""
    from focus_tune.replicate.verdict import grid_reach, grid_reach_markdown

    def stage(name, winner, lambdas):
        return {"stage": name, "winner": f"{name}-{winner}",
                "candidates": [{"trial_id": f"{name}-{x}", "lambda": x} for x in lambdas]}

    searches = {  # seed -> stages
        0: [stage("stage1", 0.5, [0.05, 0.5]), stage("stage2", 0.05, [0.05, 0.5]), stage("joint", 0.05, [0.05, 0.5]),
            stage("constant", 0.5, [0.05, 0.5]), {"stage": "none", "winner": "none-s0",
                                                  "candidates": [{"trial_id": "none-s0", "lambda": None}]}],
        3: [stage("stage1", 0.05, [0.05, 0.5]), stage("joint", 0.05, [0.05, 0.5]),
            stage("constant", 0.05, [0.05, 0.5])],
        6: [stage("stage1", 0.2, [0.05, 0.2, 0.5]), stage("constant", 0.2, [0.05, 0.2, 0.5]),
            stage("stage2", 0.5, [0.5])],
    }
    folder = tmp_path / "hero-overconfident"
    for seed, stages in searches.items():
        (folder / "searches" / f"seed{seed}").mkdir(parents=True)
        (folder / "searches" / f"seed{seed}" / "search.json").write_text(json.dumps({"stages": stages}))
    reach = grid_reach({"hero": folder})["hero"]
    assert reach == {"searches": 3, "lambdas": [0.05, 0.2, 0.5], "td_searches_top": 1,
                     "td_choices": 6, "td_top": 1, "td_bottom": 4, "constant_choices": 3, "constant_top": 1,
                     "constant_bottom": 1}
    assert grid_reach_markdown({"hero": reach})[-1] == "| H.E.R.O. | 3 | 0.05, 0.2, 0.5 | 1 / 4 / 6 | 1/3 | 1 / 1 / 3 |"


def test_the_replication_script_keeps_a_scenarios_searches_on_one_machine_kind(tmp_path):
    """scripts/verdict_replications.sh: a search kept at this commit from another machine kind
    stops the scenario's next search (exit 3, before any search runs), since a scenario's R
    searches must share a commit and a machine kind; another commit's searches do not."""
    repo = tmp_path / "worktree"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f").write_text("x")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    main = tmp_path / "main"
    kept = main / "docs" / "results" / "replication" / "hero-overconfident" / "searches" / "seed0"
    kept.mkdir(parents=True)

    stub = tmp_path / "bin"  # a python that says it ran and fails: no real search starts
    stub.mkdir()
    (stub / "python").write_text("#!/bin/sh\necho stub-search-ran >&2\nexit 1\n")
    (stub / "python").chmod(0o755)

    def run():
        env = {**os.environ, "PROFILE": "overconfident", "GAMES": "hero", "SEEDS": "3",
               "PATH": f"{stub}:{os.environ['PATH']}"}
        return subprocess.run(["bash", str(REPO / "scripts" / "verdict_replications.sh"), str(main),
                               str(tmp_path / "storage")], cwd=repo, env=env, capture_output=True, text=True,
                              timeout=60)

    (kept / "provenance.json").write_text(json.dumps({"commit": commit, "cpu": "Some Other CPU without AVX-512",
                                                      "cores": 2, "wall_s": 1}))
    proc = run()
    assert proc.returncode == 3, proc.stderr
    assert "another machine kind" in proc.stderr and "hero" in proc.stderr
    assert "stub-search-ran" not in proc.stderr  # stopped before the search

    (kept / "provenance.json").write_text(json.dumps({"commit": "0" * 40, "cpu": "Some Other CPU without AVX-512",
                                                      "cores": 2, "wall_s": 1}))
    proc = run()  # another commit's search: this one goes ahead (to the stub)
    assert proc.returncode == 1 and "stub-search-ran" in proc.stderr, proc.stderr
