"""Fixtures shared across test files, and the order the files run in.

The suite runs its files in parallel processes (``pytest -n 3 --dist loadfile``, the README's
test command): most of a test that runs a search waits on subprocesses, Ray and servers,
so one process left the two cores two-thirds idle. A file stays in one process (its module
fixtures are built once), the files that start Ray go out first (the longest come first, so
none starts last and runs alone), and the session's smoke search is run once for all the
processes (:func:`smoke_search`).
"""

import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

from smoke_search import cli, finish


@dataclass
class SmokeSearch:
    """A finished smoke search: its working folder (runs/, mlflow.db), output and wall time."""

    work: Path
    out: str
    seconds: float


def _run_smoke_search(root: Path) -> SmokeSearch:
    work = root / "e2e" / "plain"
    work.mkdir(parents=True)
    t0 = time.time()
    out = finish(cli(work))
    return SmokeSearch(work, out, time.time() - t0)


@pytest.fixture(scope="session")
def smoke_search(tmp_path_factory, request) -> SmokeSearch:
    """One real smoke-profile search for the whole session (about 1-2 minutes on 2 cores):
    every test that needs a finished search reads this one instead of running its own.
    Tests must not change what it wrote. With parallel test processes, the first process
    that asks runs it under a file lock in the session's shared temporary folder and writes
    where it is; the others wait on the lock and read that."""
    if not hasattr(request.config, "workerinput"):  # one process (-n 0): no one to share with
        return _run_smoke_search(tmp_path_factory.mktemp("smoke"))
    shared = tmp_path_factory.getbasetemp().parent  # the same folder for every worker of this session
    record = shared / "smoke_search.json"
    with FileLock(str(shared / "smoke_search.lock")):
        if not record.exists():
            done = _run_smoke_search(shared / "smoke")
            record.write_text(json.dumps({"work": str(done.work), "out": done.out, "seconds": done.seconds}))
        saved = json.loads(record.read_text())
    return SmokeSearch(Path(saved["work"]), saved["out"], saved["seconds"])


# Files that run searches, Ray clusters or servers, longest first (seconds on 2 cores, alone):
# handed out first so the short files fill the gaps at the end.
LONG_FILES = (
    "test_reliability.py", "test_tracking_outage.py", "test_multinode.py", "test_disk_full.py",
    "test_replicate.py", "test_pack_search.py", "test_search_e2e.py", "test_autoscaler.py",
    "test_racing.py", "test_wheel.py", "test_gpu_check.py", "test_packed.py", "test_pyfunc.py",
    "test_tracking.py", "test_mlflow_ui.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))  # stable: the rest keep their order
