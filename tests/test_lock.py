"""One search per run folder (focus_tune/search/lock.py): the lock file, its stale-lock
takeovers and their races, and the CLI refusing a second search on a folder in use."""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from focus_tune.errors import LockBusy
from focus_tune.search.lock import LOCK_FILE, STALE_AFTER_S, Holder, SearchLock


def _write(folder: Path, holder: Holder, age_s: float = 0.0) -> Path:
    path = folder / LOCK_FILE
    path.write_text(json.dumps(dataclasses.asdict(holder)))
    if age_s:
        os.utime(path, (time.time() - age_s, time.time() - age_s))
    return path


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_acquire_refuse_release(tmp_path):
    first = SearchLock(tmp_path, command="first").acquire()
    assert first.notice is None
    record = json.loads((tmp_path / LOCK_FILE).read_text())
    assert record["pid"] == os.getpid() and record["command"] == "first" and record["pid_start"]
    with pytest.raises(LockBusy) as busy:
        SearchLock(tmp_path).acquire()
    message = str(busy.value)
    for word in (str(tmp_path), f"pid {os.getpid()}", f"host {record['host']}", record["started"], "--resume"):
        assert word in message, (word, message)
    first.release()
    assert not (tmp_path / LOCK_FILE).exists()
    with SearchLock(tmp_path) as again:
        assert again.holder is not None
    assert not (tmp_path / LOCK_FILE).exists() and list(tmp_path.iterdir()) == []  # no temporary file left


def test_a_dead_holder_on_this_machine_is_taken_over(tmp_path):
    _write(tmp_path, dataclasses.replace(Holder.me("old"), pid=_dead_pid()))
    lock = SearchLock(tmp_path).acquire()
    assert lock.notice and "has ended" in lock.notice and str(tmp_path / LOCK_FILE) in lock.notice
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()


def test_a_reused_pid_is_told_apart_by_its_start_time(tmp_path):
    _write(tmp_path, dataclasses.replace(Holder.me("old"), pid_start="1"))  # this pid, another process
    with SearchLock(tmp_path) as lock:
        assert lock.notice and "has ended" in lock.notice


def test_another_hosts_lock_is_refused_while_fresh_and_taken_over_when_its_heartbeat_stops(tmp_path):
    other = dataclasses.replace(Holder.me("elsewhere"), host="node-7", boot="b", pid=_dead_pid())
    _write(tmp_path, other, age_s=STALE_AFTER_S / 2)  # its pid means nothing here: only the heartbeat counts
    with pytest.raises(LockBusy, match="pid .* on host node-7"):
        SearchLock(tmp_path).acquire()
    _write(tmp_path, other, age_s=STALE_AFTER_S + 5)
    with SearchLock(tmp_path) as lock:
        assert lock.notice and "no heartbeat for" in lock.notice and "node-7" in lock.notice


def test_an_unreadable_lock_is_held_until_its_heartbeat_is_old(tmp_path):
    (tmp_path / LOCK_FILE).write_text("")
    with pytest.raises(LockBusy, match="unreadable"):
        SearchLock(tmp_path).acquire()
    os.utime(tmp_path / LOCK_FILE, (time.time() - STALE_AFTER_S - 5,) * 2)
    with SearchLock(tmp_path) as lock:
        assert lock.notice and "unreadable" in lock.notice


def test_the_holder_keeps_its_heartbeat(tmp_path):
    with SearchLock(tmp_path, heartbeat_s=0.05) as lock:
        os.utime(lock.path, (time.time() - 1000,) * 2)
        time.sleep(0.5)
        assert time.time() - lock.path.stat().st_mtime < 5
        # a stale_after shorter than a heartbeat's age would take it over; a live holder's never is
        with pytest.raises(LockBusy):
            SearchLock(tmp_path, stale_after_s=60).acquire()


def _contend(folder: str, start, results, done) -> None:
    start.wait()
    try:
        lock = SearchLock(Path(folder)).acquire()
    except LockBusy:
        results.put("busy")
        return
    results.put("won")
    done.wait(timeout=120)  # hold it until every contender has tried (the test's signal, not a time)
    lock.release()


@pytest.mark.parametrize("stale", [False, True], ids=["fresh folder", "stale lock"])
def test_of_concurrent_acquirers_exactly_one_wins(tmp_path, stale):
    ctx = multiprocessing.get_context("fork")
    for round_ in range(3):
        folder = tmp_path / f"round{round_}"
        folder.mkdir()
        if stale:
            _write(folder, dataclasses.replace(Holder.me("crashed"), pid=_dead_pid()))
        n = 8
        start, results, done = ctx.Barrier(n), ctx.Queue(), ctx.Event()
        procs = [ctx.Process(target=_contend, args=(str(folder), start, results, done)) for _ in range(n)]
        for p in procs:
            p.start()
        outcome = sorted(results.get(timeout=120) for _ in range(n))
        done.set()
        for p in procs:
            p.join(timeout=60)
        assert outcome == ["busy"] * (n - 1) + ["won"], outcome
        assert not (folder / LOCK_FILE).exists() and list(folder.iterdir()) == []


# -- the CLI ---------------------------------------------------------------------------------------

def _search(work: Path, data_root: Path, *extra: str, **popen) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "focus_tune.search", "--game", "facemed", "--profile", "smoke",
           "--storage", str(work / "runs"), "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}",
           "--data-root", str(data_root), *extra]
    return subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"), **popen)


def test_a_second_search_on_the_same_folder_is_refused_at_once(tmp_path):
    """The CLI against a run folder whose lock a live process holds (this test; a running
    search holds it the same way: test_reliability's Ctrl-C test sees it there): refused at
    once, with or without --resume, before the dataset, Ray or MLflow; a dry run goes through."""
    data_root = tmp_path / "data"
    folder = tmp_path / "runs" / "facemed-smoke-seed0"
    folder.mkdir(parents=True)
    held = SearchLock(folder, command="the first search").acquire()
    try:
        holder = json.loads((folder / LOCK_FILE).read_text())
        t0 = time.time()
        seconds_of = {}
        seconds = [_search(tmp_path, data_root, *extra) for extra in ([], ["--resume"])]
        for extra, second in zip(([], ["--resume"]), seconds):
            out, err = second.communicate(timeout=120)
            seconds_of[" ".join(extra) or "plain"] = time.time() - t0
            assert second.returncode == 2, (out, err)
            err = err.strip()
            assert len(err.splitlines()) == 1 and err.startswith("error: another search is running in "), err
            for word in (str(folder), f"pid {holder['pid']}", f"host {holder['host']}", holder["started"], "--resume"):
                assert word in err, (word, err)
            assert "already exists" not in err
        assert max(seconds_of.values()) < 15, seconds_of  # a Python start and the imports; no Ray, no MLflow
        assert not data_root.exists() and not (tmp_path / "mlflow.db").exists()
        print(f"refused in {seconds_of}")
        dry = _search(tmp_path, data_root, "--dry-run")  # a dry run takes no lock
        assert dry.wait(timeout=120) == 0, dry.communicate()
    finally:
        held.release()
    assert not (folder / LOCK_FILE).exists()
