"""End to end: the real CLI on the smoke profile, as a subprocess, with injected faults.

One uninterrupted search (the session's shared ``smoke_search``), and one ended twice before it
finishes: its storage fills up (a small tmpfs, where one can be mounted), then, resumed, its
driver is killed; resumed again, it must choose the same schedules with the same scores,
without retraining what was done. Faults (test-only switch, see smoke_search.py): one trial
raises once mid-training (retried from its checkpoint), one trial's loss turns NaN (fails
with that reason; its stage picks among the others). The whole search is one Ray Tune
experiment (folder ``search``; a resumed driver's is ``search-attempt<k>``), which Ray Tune's
own ``ExperimentAnalysis`` reads. The interrupted search is also the one that runs with
``--name``, ``--experiment`` and ``--tensorboard``.
"""

import errno
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.artifacts import download_artifacts
from mlflow.tracking import MlflowClient

from smoke_search import GAME, RUN, cli, finish, search_runs, state_of


@pytest.fixture(scope="module")
def uninterrupted(smoke_search):
    return smoke_search.work, smoke_search.out, smoke_search.seconds


def children(workdir: Path, experiment: str = f"focus-tune/{GAME}"):
    _, _, parents, kids = search_runs(workdir / "mlflow.db", experiment)
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
        "none +conformal", "constant +conformal", "time-dependent +conformal", "temperature-scaled +conformal",
        "time-dependent temperature +conformal"}
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
    table = json.loads(Path(download_artifacts(run_id=parents[0].info.run_id,
                                               artifact_path="report/tables/test_metrics.json",
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


# -- one search ended three ways: a full disk, a killed driver, then finished -------------------
FILLED_AFTER = 4  # finished trials (of 17) before the disk is filled
NAMED = ("--name", "mytry", "--experiment", "my-exp", "--tensorboard", "--set", "train.ece_bins=10")


def _small_tmpfs(folder: Path) -> Path | None:
    """A 64 MB tmpfs mounted at ``folder``, or None where one cannot be mounted (needs root or
    CAP_SYS_ADMIN): the full-disk attempt is then left out."""
    folder.mkdir()
    if shutil.which("mount") is None:
        return None
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder)], capture_output=True)
    return folder if made.returncode == 0 else None


def _fill(folder: Path) -> Path:
    """Write a file until the filesystem is full; returns it."""
    filler = folder / "filler"
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(chunk)
        except OSError as err:
            assert err.errno == errno.ENOSPC, err
    with open(filler, "ab", buffering=0) as handle:  # the last partial MiB
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def _results(state_file: Path) -> dict:
    try:
        return json.loads(state_file.read_text())["results"]
    except (OSError, ValueError):
        return {}


def _wait_for(proc, state_file: Path, count: int, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while len(_results(state_file)) < count:
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.2)


@pytest.fixture(scope="module")
def interrupted(uninterrupted, tmp_path_factory):
    """The uninterrupted search again, from its own ``config.yaml`` (``--space``: its resolved
    search space, which a run's config.yaml is made to be taken back as) and as ``--name mytry
    --experiment my-exp --tensorboard --set train.ece_bins=10`` (the value it has: the same
    numbers), with a 64 MB tmpfs as ``--storage`` (MLflow's sqlite and the data stay off it).
    Attempt 1: the test fills the tmpfs once four trials have finished (the search must stop
    with one error line). Attempt 2: ``--resume`` after the space is freed, killed with its
    whole process group (kill -9) once two more trials have finished. Attempt 3: ``--resume``
    to the end. Where no tmpfs can be mounted, attempt 1 is left out (storage on disk)."""
    plain, _, _ = uninterrupted
    root = tmp_path_factory.mktemp("interrupted")
    work = root / "work"
    work.mkdir()
    store = _small_tmpfs(root / "store")
    named = (*NAMED, "--space", str(plain / "runs" / RUN / "config.yaml"),
             "--storage", str(store if store is not None else work / "runs"))
    folder = (store if store is not None else work / "runs") / "mytry"
    state_file = folder / "search_state.json"
    record = {"work": work, "store": store, "folder": folder, "plain": plain, "done_before": []}
    try:
        if store is not None:
            proc = cli(work, *named)
            _wait_for(proc, state_file, FILLED_AFTER)
            filler = _fill(store)
            t0 = time.time()
            out = proc.communicate(timeout=300)[0]
            record.update(full_disk={"returncode": proc.returncode, "out": out, "seconds": time.time() - t0,
                                     "lock_left": (folder / "search.lock").exists(),
                                     "state": json.loads(state_file.read_text()),
                                     "temporary": list(folder.glob(".search_state.json.*"))})
            filler.unlink()
            record["done_before"].append(set(_results(state_file)))
        done = set(_results(state_file))
        proc = cli(work, *named, *(["--resume"] if done else []), start_new_session=True)
        _wait_for(proc, state_file, len(done) + 2 if done else 5)
        os.killpg(proc.pid, signal.SIGKILL)  # the whole driver, and the Ray it started
        proc.communicate()
        record["done_before"].append(set(_results(state_file)))
        record["out"] = finish(cli(work, "--resume", *named))
        yield record
    finally:
        if store is not None:
            subprocess.run(["umount", "-l", str(store)], capture_output=True)


@pytest.mark.slow
def test_a_full_disk_stops_the_search_and_resume_finishes_it(interrupted):
    """Storage that fills mid-search ends it with one error line naming the run folder and the
    full disk (exit 2), leaves a search state that parses and names only whole checkpoints, and,
    once space is freed, --resume goes on with every score kept (to the undisturbed winners:
    test_killed_driver_resumes_without_retraining)."""
    if interrupted["store"] is None:
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    full, folder = interrupted["full_disk"], interrupted["folder"]
    out = full["out"]
    assert full["returncode"] == 2, out[-4000:]
    last = out.strip().splitlines()[-1]
    assert last.startswith("error: ") and len(last) < 700, out[-4000:]
    for words in (str(folder), "no space left on device", "free space", "--resume"):
        assert words in last, (words, last)
    rest = out.replace(last, "")
    assert "No space left" not in rest and "OSError" not in rest, rest[-4000:]  # no traceback, no second report
    print(f"error {full['seconds']:.1f} s after the disk was full")
    assert not full["lock_left"] and not full["temporary"], "a lock or a temporary state file was left"
    import torch

    saved = full["state"]  # a whole earlier version, and every checkpoint it names is whole
    assert len(saved["results"]) >= FILLED_AFTER
    for path in saved["checkpoints"].values():
        torch.load(Path(path) / "checkpoint.pt", map_location="cpu", weights_only=True)
    after = json.loads((folder / "search_state.json").read_text())
    for tid, score in saved["results"].items():
        assert after["results"][tid] == score, f"{tid} changed"


@pytest.mark.slow
def test_killed_driver_resumes_without_retraining(interrupted):
    """Killed and resumed (after the full disk, where there was one), the search writes the
    uninterrupted search's results.csv byte for byte and trains nothing again that had finished
    before an attempt began; the run folder mytry, the MLflow experiment my-exp and parent run
    mytry with the override as a param, TensorBoard event files in the trials' folders."""
    work, run, plain, out = interrupted["work"], interrupted["folder"], interrupted["plain"], interrupted["out"]
    killed = interrupted["done_before"][-1]
    assert not all(k in killed for k in state_of(plain)["results"]), "killed too late to test a resume"
    assert "resuming:" in out and "MLflow: experiment my-exp, run" in out
    after = json.loads((run / "search_state.json").read_text())
    assert after["results"] == state_of(plain)["results"], "same scores and winners as the uninterrupted run"
    # Nothing that had finished before an attempt began was trained in it: attempt k's Tune
    # experiment is search-attempt<k>, and a trial done before it has no folder there or later.
    attempts = ["search", *(f"search-attempt{k}" for k in range(2, len(interrupted["done_before"]) + 2))]
    assert [d["attempt"] for d in after["drivers"]] == list(range(1, len(attempts) + 1))
    for k, done in enumerate(interrupted["done_before"], start=1):
        again = {tid for tid in done for later in attempts[k:] if (run / later / tid).is_dir()}
        assert not again, (attempts[k], sorted(again))
    resumed_lines = [line for line in out.splitlines() if line.strip().startswith("[")]
    for tid in killed:
        assert not any(f" {tid}:" in line for line in resumed_lines), f"{tid} was retrained"
    parents, kids = children(work, "my-exp")
    assert sorted(k.data.tags["trial_id"] for k in kids) == sorted(after["results"])
    assert [p.info.run_name for p in parents] == ["mytry"] and parents[0].info.status == "FINISHED"
    assert parents[0].data.params["set.train.ece_bins"] == "10"
    assert "Search space changed on the command line: `--set train.ece_bins=10`." in (
        run / "report" / "results.md").read_text()
    assert MlflowClient(f"sqlite:///{work / 'mlflow.db'}").get_experiment_by_name(f"focus-tune/{GAME}") is None
    assert not (run.parent / RUN).exists()
    assert ((run / "report" / "results.csv").read_bytes()
            == (plain / "runs" / RUN / "report" / "results.csv").read_bytes())

    def settings(path: Path) -> list[str]:  # config.yaml but for its comments (where it came from, the --set)
        return [line for line in path.read_text().splitlines() if not line.startswith("#")]

    config = plain / "runs" / RUN / "config.yaml"
    assert settings(run / "config.yaml") == settings(config)
    assert "# With --set train.ece_bins=10" in (run / "config.yaml").read_text()
    # Tune copies its trial logs into the run folder from time to time and at the end: the last
    # driver's trials have theirs (a killed driver's last seconds may be lost).
    events = {d.parent.name for d in run.glob(f"{attempts[-1]}/*/events.out.tfevents.*")}
    assert set(after["results"]) - killed <= events, sorted(set(after["results"]) - killed - events)


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
    assert {"config/trial/stage", "config/trial/family", "config/trial/schedule",
            "config/trial/seed"} <= set(df.columns)
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
