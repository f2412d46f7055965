"""End to end: the real CLI on the smoke profile, as a subprocess, with injected faults.

One uninterrupted search (the session's shared ``smoke_search``), and one whose driver is
killed after five trials and then resumed: both must choose the same schedules, the
resumed one without retraining what was done. Faults (test-only switch, see
smoke_search.py): one trial raises once mid-training (retried from its checkpoint), one
trial's loss turns NaN (fails with that reason; its stage picks among the others).
The whole search is one Ray Tune experiment (folder ``search``; a resumed driver's is
``search-attempt2``), which Ray Tune's own ``ExperimentAnalysis`` reads. The killed and resumed
search is also the one that runs with ``--name``, ``--experiment`` and ``--tensorboard``.
"""

import json
import os
import signal
import time
from pathlib import Path

import pytest
from mlflow.artifacts import download_artifacts
from mlflow.tracking import MlflowClient

from smoke_search import GAME, RUN, cli, finish, state_of


@pytest.fixture(scope="module")
def uninterrupted(smoke_search):
    return smoke_search.work, smoke_search.out, smoke_search.seconds


def children(workdir: Path, experiment: str = f"focus-tune/{GAME}"):
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("kind") == "search"]
    kids = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, kids


def test_full_procedure_report_and_mlflow(uninterrupted):
    work, out, seconds = uninterrupted
    state = state_of(work)
    ids = set(state["results"])
    # Every stage of the procedure ran: stage1..k1 (smoke k1 = 2), joint, constant, none, finals.
    for prefix in ("stage1-", "stage2-", "joint-", "constant-", "none-", "final-none-", "final-constant-",
                   "final-time-dependent-"):
        assert any(i.startswith(prefix) for i in ids), (prefix, sorted(ids))
    assert "chosen time-dependent schedule: l1" in out
    report = work / "runs" / RUN / "report"
    for name in ("results.md", "results.csv", "entry_ece.png", "reliability.png", "intervals.png"):
        assert (report / name).stat().st_size > 0, name
    md = (report / "results.md").read_text()
    assert "time-dependent" in md and "n=3" in md
    for baseline in ("temperature-scaled", "image-blind", "image-Bayes", "oracle", "exact"):  # rows of every table
        assert f"| {baseline} |" in md and f"\n{baseline} " in out, baseline
    assert "ECE floor" not in md
    # Every row has the fair scores, stored in results.csv; the sampled references have a row per final seed.
    import csv

    with (report / "results.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["stat"] == "value"]
    for r in rows:
        conformal = r["family"].endswith(" +conformal")  # the intervals only, at a calibrated level
        for key in (() if conformal else ("test/marginal/ece", "test/marginal/ece_debiased",
                                          "test/marginal/overconfidence")) + (
                "test/interval/interval_score", "test/interval/crps", "test/interval/coverage_age_under_40"):
            assert r[key] != "", (r["family"], key)
        assert (r["test/interval/conformal_level"] != "") == conformal, r["family"]
    assert {r["family"] for r in rows if r["family"].endswith(" +conformal")} == {
        "none +conformal", "constant +conformal", "time-dependent +conformal", "temperature-scaled +conformal"}
    seeds = {f: sum(r["family"] == f for r in rows) for f in ("image-blind", "image-Bayes", "oracle", "exact", "none")}
    assert seeds == {"image-blind": 3, "image-Bayes": 3, "oracle": 3, "exact": 1, "none": 3}, seeds
    assert "## Coverage of I_0.9 by group" in md
    exact = next(r for r in rows if r["family"] == "exact")
    assert float(exact["test/marginal/ece_label_sd"]) > 0 and "Label noise. With the test items fixed" in md
    assert ", Holm " in md  # the differences are paired and adjusted

    parents, kids = children(work)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert parents[0].data.params["chosen_schedule"].startswith("l1")
    for key in ("image-blind/test/marginal/ce", "none/test/interval/interval_score"):  # headline metrics
        assert key in parents[0].data.metrics, key
    # every row's every test metric is in the parent's table (tests/test_mlflow_ui.py: what is a metric)
    table = json.loads(Path(download_artifacts(run_id=parents[0].info.run_id, artifact_path="report/tables/test_metrics.json",
                                               tracking_uri=f"sqlite:///{work / 'mlflow.db'}")).read_text())
    keyed = {f"{row}/{metric}" for row, metric in
             ((r[table["columns"].index("row")], r[table["columns"].index("metric")]) for r in table["data"])}
    for key in ("oracle/test/marginal/ece", "image-blind/test/marginal/ce", "temperature-scaled/test/marginal/ece",
                "none/test/marginal/leak", "exact/test/marginal/ece_debiased", "none/test/interval/interval_score",
                "temperature-scaled/test/temperature_pooled", "temperature-scaled/test/temperature_margin",
                "exact/test/marginal/ece_debiased_sq_label_sd"):
        assert key in keyed, key
    kid_ids = sorted(k.data.tags["trial_id"] for k in kids)
    assert kid_ids == sorted(ids), "one child run per trial"
    for k in kids:
        assert k.data.tags["stage"] in {"stage1", "stage2", "joint", "constant", "none", "final"}
        assert k.data.tags["family"] in {"none", "constant", "time-dependent"}
        assert k.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert "schedule" in k.data.params and "seed" in k.data.params
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    some = next(k for k in kids if k.data.tags["trial_id"] == "none-s0")
    assert len(client.get_metric_history(some.info.run_id, "val/ece")) >= 2, "per-epoch metrics"
    assert len(client.get_metric_history(some.info.run_id, "val/ece_debiased")) >= 2, "the debiased ECE beside it"
    arts = {a.path for a in client.list_artifacts(parents[0].info.run_id, "report")}
    assert {"report/results.md", "report/entry_ece.png"} <= arts
    models = client.search_logged_models([parents[0].info.experiment_id],
                                         filter_string=f"source_run_id = '{parents[0].info.run_id}'")
    assert sorted(m.name for m in models) == ["model-constant", "model-none", "model-time-dependent"]
    print(f"smoke search: {seconds:.0f} s")


def test_faults_retry_and_nan(uninterrupted):
    work, out, _ = uninterrupted
    state = state_of(work)
    # NaN: the trial failed with its reason and the stage chose among the others.
    assert state["results"]["stage1-l0.05-s0"] is None
    assert "FAILED" in out and "became nan" in out
    assert state["results"]["stage1-l0.01-s0"] is not None
    # stage 2 was built on the surviving stage-1 winner, lambda_1 = 0.01
    assert state["results"]["stage2-l0.05-s0"] is not None
    parents, kids = children(work)
    nan_run = next(k for k in kids if k.data.tags["trial_id"] == "stage1-l0.05-s0")
    assert nan_run.info.status == "FAILED" and "nan" in nan_run.data.tags["failure_reason"]
    # The trials that raised once were retried from a checkpoint and finished.
    for tid in ("constant-0.01-s0", "stage2-l0.01-s0"):
        assert state["results"][tid] is not None
        run = next(k for k in kids if k.data.tags["trial_id"] == tid)
        assert run.info.status == "FINISHED"
    assert sorted(d.name for d in (work / "runs" / RUN).iterdir() if d.is_dir()) == ["models", "report", "search"]
    errors = list((work / "runs" / RUN).glob("search/constant-0.01-s0/error.txt"))
    assert errors and "injected fault" in errors[0].read_text()


def test_killed_driver_resumes_without_retraining(uninterrupted, tmp_path):
    """Run from the uninterrupted search's own ``config.yaml`` (``--space``: its resolved search
    space, which a run's config.yaml is made to be taken back as) and as ``--name mytry
    --experiment my-exp --tensorboard --set train.ece_bins=10`` (the value it has: the same
    numbers): killed and resumed, it writes the uninterrupted search's results.csv byte for byte;
    the run folder runs/mytry, the MLflow experiment my-exp and parent run mytry with the
    override as a param, TensorBoard event files in the trials' folders."""
    plain, _, _ = uninterrupted
    work = tmp_path / "killed"
    work.mkdir()
    config = plain / "runs" / RUN / "config.yaml"
    named = ("--name", "mytry", "--experiment", "my-exp", "--tensorboard", "--set", "train.ece_bins=10",
             "--space", str(config))
    proc = cli(work, *named, start_new_session=True)
    state_file = work / "runs" / "mytry" / "search_state.json"
    deadline = time.time() + 300
    # Kill the whole driver (and the Ray it started) once five trials have finished.
    while time.time() < deadline:
        if state_file.exists():
            try:
                done = json.loads(state_file.read_text())["results"]
            except json.JSONDecodeError:
                done = {}
            if len(done) >= 5:
                break
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        time.sleep(0.5)
    else:
        pytest.fail("five trials did not finish in time")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = json.loads(state_file.read_text())["results"]
    assert not all(k in before for k in state_of(plain)["results"]), "killed too late to test a resume"

    out = finish(cli(work, "--resume", *named))
    assert "resuming:" in out and "MLflow: experiment my-exp, run" in out
    after = state_of(work, "mytry")
    assert after["results"] == state_of(plain)["results"], "same scores and winners as the uninterrupted run"
    # Nothing that had finished was trained again: each trial has one folder across the
    # experiments of the two drivers (search, search-attempt2).
    run = work / "runs" / "mytry"
    for tid, score in before.items():
        dirs = [d for d in run.glob(f"search*/{tid}") if d.is_dir()]
        assert len(dirs) == 1, (tid, dirs)
    resumed_lines = [line for line in out.splitlines() if line.strip().startswith("[")]
    for tid in before:
        assert not any(f" {tid}:" in line for line in resumed_lines), f"{tid} was retrained"
    parents, kids = children(work, "my-exp")
    assert sorted(k.data.tags["trial_id"] for k in kids) == sorted(after["results"])
    assert [p.info.run_name for p in parents] == ["mytry"] and parents[0].info.status == "FINISHED"
    assert parents[0].data.params["set.train.ece_bins"] == "10"
    assert "Search space changed on the command line: `--set train.ece_bins=10`." in (
        run / "report" / "results.md").read_text()
    assert MlflowClient(f"sqlite:///{work / 'mlflow.db'}").get_experiment_by_name(f"focus-tune/{GAME}") is None
    assert not (work / "runs" / RUN).exists()
    assert (run / "report" / "results.csv").read_bytes() == (plain / "runs" / RUN / "report" / "results.csv").read_bytes()
    def settings(path: Path) -> list[str]:  # config.yaml but for its comments (where it came from, the --set)
        return [line for line in path.read_text().splitlines() if not line.startswith("#")]

    assert settings(run / "config.yaml") == settings(config)
    assert "# With --set train.ece_bins=10" in (run / "config.yaml").read_text()
    # Tune copies its trial logs into the run folder from time to time and at the end: the
    # resumed driver's trials have theirs (the killed driver's last seconds may be lost).
    events = {d.parent.name for d in run.glob("search-attempt2/*/events.out.tfevents.*")}
    assert set(after["results"]) - set(before) <= events, sorted(set(after["results"]) - set(before) - events)


def test_ray_tune_analysis_reads_every_trial(smoke_search):
    """Ray Tune's own tools read the search's experiment folder (its JSON logger is on): every
    trial's reported metrics, and its config as plain columns beside the job."""
    from ray.tune import ExperimentAnalysis

    state = state_of(smoke_search.work)
    analysis = ExperimentAnalysis(str((smoke_search.work / "runs" / RUN / "search").resolve()))
    df = analysis.dataframe().set_index("config/trial/trial_id")
    reported = {tid for tid, score in state["results"].items() if score is not None}
    assert reported <= set(df.index), sorted(reported - set(df.index))
    trained = df[df["config/trial/evaluates"].isna()]
    for tid in reported & set(trained.index):  # each training's last val/ece is its recorded score (select_by ece)
        assert trained.loc[tid, "val/ece"] == pytest.approx(state["results"][tid]), tid
    evaluated = df[df["config/trial/evaluates"].notna()]
    assert len(evaluated) == 3 and evaluated["test/marginal/ece"].notna().all()
    assert {"config/trial/stage", "config/trial/family", "config/trial/schedule", "config/trial/seed"} <= set(df.columns)
    best = analysis.get_best_trial(metric="val/ece", mode="min")
    assert best.last_result["val/ece"] == pytest.approx(trained["val/ece"].min())
    assert best.config["trial"]["trial_id"] == best.config["job"].trial_id


def test_trial_actors_carry_no_runtime_env_and_ray_starts_no_idle_worker(smoke_search):
    """Tune's trial actors carry no runtime env (ray_runtime.plain_trial_actors), and the local
    Ray starts no worker before a trial asks for one (ray_runtime.NO_PRESTART)."""
    import tempfile

    root = Path(os.environ.get("RAY_TMPDIR", tempfile.gettempdir())) / "ray"
    # A session folder is named session_<date>_<time>_<microseconds>_<driver pid>; an older one
    # may end with the same pid (an earlier process's, the pid since reused): take the newest.
    sessions = sorted(root.glob(f"session_*_{smoke_search.pid}"), key=lambda p: p.name)
    assert sessions, (root, smoke_search.pid)
    raylet = (sessions[-1] / "logs" / "raylet.out").read_text()
    assert "Started worker process" in raylet  # the log this reads is the raylet's own
    assert "Create runtime env" not in raylet
    # Prestarted workers start as the driver registers, before the raylet logs its job as
    # started; without them the first worker starts when the first trial actor asks for one.
    lines = raylet.splitlines()
    job = next((i for i, line in enumerate(lines) if "already started in worker pool" in line), None)
    assert job is not None, "the raylet's log no longer says when the job started"
    early = [line for line in lines[:job] if "Started worker process" in line]
    assert not early, early
