"""Fixed points of the fault soak (benchmarks/fault_soak.py, docs/RELIABILITY.md "The soak"):
each test is a violation the soak found, at the seed and moment that found it, reduced to
what it needs to happen again."""

from __future__ import annotations

import types

from focus_tune.procedure.job import CONFIG_KEY
from focus_tune.search.callbacks import MLflowCallback
from test_tracking import dataset, job, manifest, tracker  # noqa: F401  (fixtures and a trial job)


def test_a_worker_killed_while_its_actor_starts_is_retried_as_one_run(tracker, manifest, tmp_path):  # noqa: F811
    """Soak seed 2 (FaceMed, smoke), attempt 2: a trial worker SIGKILLed 0.3 s into the resumed
    search's first trial, while Ray was starting its actor. Tune called ``on_trial_recover``
    before any ``on_trial_start`` of that trial, so it had no child run; ``Tracker.note_retry``
    raised ``KeyError: 'stage1-l0.05-s0'`` inside Tune's loop and the search ended with a
    traceback (exit 1). Now the retry makes the run, and the start that follows reopens it:
    one child run, tagged with the retry and why."""
    j = job(manifest)
    errors = tmp_path / "error.txt"
    errors.write_text("Failure # 1 (occurred at 2026-12-05)\nThe actor died unexpectedly before finishing this task.\n"
                      "\tclass_name: ImplicitFunc\nThe actor is dead because its worker process has died. "
                      "Worker exit type: SYSTEM_ERROR\n")
    trial = types.SimpleNamespace(config={CONFIG_KEY: j}, error_file=str(errors),
                                  run_metadata=types.SimpleNamespace(num_failures=1))
    callback = MLflowCallback(tracker, state=None)
    callback.on_trial_recover(0, [trial], trial)  # before the trial ever started
    callback.on_trial_start(1, [trial], trial)  # Tune starts it again
    runs = tracker._child_runs()
    assert [r.data.tags["trial_id"] for r in runs] == [j.trial_id]
    tags = tracker.client.get_run(runs[0].info.run_id).data.tags
    assert tags["retries"] == "1"
    assert tags["retry.1"].startswith("The actor is dead because its worker process has died")


def test_a_data_command_killed_mid_write_leaves_nothing_behind_its_rerun(tmp_path):
    """Soak seed 3 (an imported table), `import-table` SIGKILLed 0.22 s in: its hidden
    `.alarms-data.tmp-PID-*` folder (the splits written so far) stayed beside the dataset after
    the same command ran again to the end. Nothing read it, but it held the partial data for
    good. Now a write removes the temporary folders of its destination whose process is gone on
    this host, and only those."""
    import os
    import socket
    import subprocess
    import sys

    from focus_tune.data.folder_guard import remove_abandoned, temporary_folder

    out = tmp_path / "alarms-data"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)  # a process that has exited
    host = socket.gethostname()
    killed = tmp_path / f".alarms-data.tmp-{host}-{dead_pid}-5142ad5b"
    older = tmp_path / f".alarms-data.tmp-{dead_pid}-0123abcd"  # named before the host was
    live = tmp_path / f".alarms-data.tmp-{host}-{os.getpid()}-89abcdef"  # a write going on now
    elsewhere = tmp_path / f".alarms-data.tmp-another-host-{dead_pid}-00aa11bb"  # shared storage
    other = tmp_path / f".alarms-other.tmp-{host}-{dead_pid}-22cc33dd"  # another destination's
    for folder in (killed, older, live, elsewhere, other):
        folder.mkdir()
        (folder / "train.parquet").write_bytes(b"partial")
    assert sorted(remove_abandoned(out)) == sorted([killed, older])
    assert not killed.exists() and not older.exists() and live.exists() and elsewhere.exists() and other.exists()
    assert temporary_folder(out).name.startswith(f".alarms-data.tmp-{host}-{os.getpid()}-")


def test_a_disk_full_at_the_first_save_ends_the_parent_run(monkeypatch, tmp_path):
    """Soak seed 9 (an imported table, an MLflow server, storage on a tmpfs), the disk filled
    2.2 s into the first attempt: the search stopped with its one error line (exit 2), but the
    state file could not be written, so the parent run it had just made was left RUNNING for
    good (the rerun, with no state, made a new one). The first save of the state now happens
    where every error ends the parent run (FAILED, with why)."""
    import pytest

    from focus_tune.errors import DiskFull
    from focus_tune.procedure.state import SearchState
    from focus_tune.search import driver
    from focus_tune.search.cli import SearchOptions

    ended = []

    class Tracker:  # the parent run as the driver sees it
        parent_run_id, uri, experiment_id, unavailable = "p1", "sqlite:///x.db", "1", False

        def end_running_children(self, status, reason):
            ended.append(("children", status))

        def finish(self, status=None, reason=None, failed=False):
            ended.append(("parent", status, reason))

    def full(self):
        raise DiskFull(f"{tmp_path}: no space left on device")

    monkeypatch.setattr(driver, "open_tracker", lambda opts, parent, folder: Tracker())
    monkeypatch.setattr(driver.ray_runtime, "driver_record", lambda attempt: {"attempt": attempt})
    monkeypatch.setattr(SearchState, "save", full)
    prep = types.SimpleNamespace(cfg=None, dataset=types.SimpleNamespace(manifest=None), run_dir=tmp_path,
                                 fingerprint={})
    with pytest.raises(DiskFull):
        driver.search(SearchOptions(scenario="hero"), prep, 0.0)
    assert ended == [("children", "FAILED"), ("parent", "FAILED", f"DiskFull: {tmp_path}: no space left on device")]


def test_a_worker_death_counted_twice_is_handed_out_again_and_a_resume_runs_a_crashed_trial(
        tracker, manifest, tmp_path):  # noqa: F811
    """Soak seed 5 at 51383e3 (an imported table, smoke, storage on a tmpfs), a trial worker
    SIGKILLed 14.55 s into attempt 1: Ray Tune 2.60 counted the one death twice (the dead
    actor's two pending tasks failed 26 ms apart; the second came while the trial waited for its
    retry, and that branch ends a trial without looking at ``--max-retries``), so
    ``constant-0.01-s0`` failed for good, its stage had no other candidate, the search stopped
    with ``every trial of stage 'constant' failed ... fix the cause and resume``, and every
    --resume stopped the same way (the failure was in the state). Now a Tune trial that crashed
    past its retries is handed out once more, from its last checkpoint, as the same MLflow child
    run (tagged ``crashes``/``crash.1``), and a resume runs a trial that failed by crashing again."""
    from focus_tune.procedure.state import SearchState
    from focus_tune.search.callbacks import StateCallback
    from focus_tune.search.searcher import PlanSearcher

    j = job(manifest, "constant-0.01-s0", "constant", "constant")
    state = SearchState(path=tmp_path / "search_state.json")
    plan = types.SimpleNamespace(next_batch=lambda results: None)  # the searcher's plan is not asked here
    searcher = PlanSearcher(plan, state, lambda spec: j, None, j.train.epochs)
    searcher.live["tune-1"] = j
    lines = []
    progress = types.SimpleNamespace(started=lambda tid: None, line=lines.append, failed=lambda *a: lines.append(a),
                                     trial_done=lambda *a, **k: lines.append(("done", *a)))
    mlflow, states = MLflowCallback(tracker, state), StateCallback(state, progress)
    errors = tmp_path / "error.txt"
    errors.write_text("Failure # 2 (occurred at 2026-12-05)\nThe actor died unexpectedly before finishing this task.\n"
                      "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR\n")
    trial = types.SimpleNamespace(config={CONFIG_KEY: j}, error_file=str(errors), num_failures=2, last_result={},
                                  run_metadata=types.SimpleNamespace(num_failures=2))
    mlflow.on_trial_start(0, [trial], trial)
    states.on_trial_start(0, [trial], trial)
    # Tune's order on a trial that errors: the searcher first, then the callbacks
    searcher.on_trial_complete("tune-1", None, error=True)
    mlflow.on_trial_error(1, [trial], trial)
    states.on_trial_error(1, [trial], trial)
    assert j.trial_id not in state.results and state.crashed == {j.trial_id: 1}
    assert any("handed out again from its last checkpoint" in str(x) for x in lines)
    assert not any(isinstance(x, tuple) and x[0] == "done" for x in lines), "not counted as done"
    run = tracker.client.get_run(tracker._child_runs()[0].info.run_id)
    assert run.info.status == "RUNNING" and run.data.tags["crashes"] == "1"
    assert run.data.tags["crash.1"].startswith("The actor is dead because its worker process has died")

    # the new Tune trial finishes: the same child run, FINISHED
    searcher.live["tune-2"] = j
    mlflow.on_trial_start(2, [trial], trial)
    searcher.on_trial_complete("tune-2", {"score": 0.3, "epoch": j.train.epochs, "time_total_s": 1.0})
    mlflow.on_trial_complete(3, [trial], trial)
    runs = tracker._child_runs()
    assert len(runs) == 1 and tracker.client.get_run(runs[0].info.run_id).info.status == "FINISHED"
    assert state.results == {j.trial_id: 0.3}

    # a state from before (the trial failed by crashing): --resume runs it again
    old = SearchState(path=tmp_path / "old.json", results={j.trial_id: None}, crashed={j.trial_id: 2})
    assert old.retry_crashed() == [j.trial_id] and old.results == {}
