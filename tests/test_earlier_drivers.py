"""A resumed search waits for the trials of an earlier, dead driver on the same cluster
(``ray_runtime.wait_for_earlier_drivers``); the GCS is replaced by a scripted count here, the
real cluster case is in test_multinode."""

import types

import pytest
import ray

from focus_tune.errors import SearchError
from focus_tune.search import ray_runtime


@pytest.fixture
def cluster(monkeypatch):
    """This driver is job 02000000 of cluster session_a; ``live`` scripts the GCS's answers."""
    ctx = types.SimpleNamespace(get_session_name=lambda: "session_a", get_job_id=lambda: "02000000")
    monkeypatch.setattr(ray, "get_runtime_context", lambda: ctx)
    live = {"answers": [], "asked": []}

    def live_trials_of(jobs):
        live["asked"].append(list(jobs))
        n = live["answers"].pop(0) if len(live["answers"]) > 1 else live["answers"][0]
        return {j: n for j in jobs}

    monkeypatch.setattr(ray_runtime, "live_trials_of", live_trials_of)
    monkeypatch.setattr(ray_runtime.time, "sleep", lambda s: None)
    return live


def earlier(job="01000000", cluster="session_a"):
    return {"attempt": 1, "cluster": cluster, "ray_job": job, "host": "laptop", "pid": 4242}


def test_waits_until_the_earlier_trials_stopped(cluster):
    cluster["answers"] = [2, 2, 1, 0]
    lines = []
    ray_runtime.wait_for_earlier_drivers([earlier()], wait_s=60, log=lambda *a, **k: lines.append(a[0]))
    assert cluster["asked"] == [["01000000"]] * 4
    assert lines[0].startswith("waiting for 2 trial(s) of the earlier driver, Ray job 01000000 (driver pid 4242 "
                               "on laptop)") and lines[-1] == "the earlier driver's trials have stopped"


def test_refuses_when_they_keep_running(cluster, monkeypatch):
    cluster["answers"] = [1]
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(ray_runtime.time, "monotonic", lambda: next(clock))
    with pytest.raises(SearchError, match=r"1 trial\(s\) of an earlier driver of this search, Ray job 01000000 "
                                          r"\(driver pid 4242 on laptop\), still run on the cluster after 30 s"):
        ray_runtime.wait_for_earlier_drivers([earlier()], wait_s=30, log=lambda *a, **k: None)


def test_other_clusters_and_this_driver_are_not_waited_for(cluster):
    cluster["answers"] = [5]
    # A local Ray of an earlier start is another session (its job ids repeat: 01000000 again).
    ray_runtime.wait_for_earlier_drivers([earlier(cluster="session_b"), earlier(job="02000000")], wait_s=1)
    assert cluster["asked"] == []
