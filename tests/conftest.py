"""Fixtures shared across test files, and the order the files run in.

The suite runs its files in parallel processes (``pytest -n 3 --dist loadfile``, the README's
test command): most of a test that runs a search waits on subprocesses, Ray and servers,
so one process left the two cores two-thirds idle. A file stays in one process (its module
fixtures are built once), the files that cost most go out first (so none starts last and runs
alone: :data:`LONG_FILES`), and the session's smoke search is run once for all the processes
(:func:`smoke_search`).
"""

import compileall
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

# One intra-op thread for torch in every process of the suite (this one, its xdist workers and
# every subprocess they start; trial workers still set theirs from --cpus-per-trial): three
# test processes share two cores, and a torch pool of two threads per process spins on a core
# another process holds. test_packed, test_temperature and test_train together took 90-127
# user-seconds with the default pool and 16-17 with one thread, beside a search on the same
# two cores (docs/BENCHMARKS.md, "Where the suite's CPU goes"). Set before torch is imported;
# a value already set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from smoke_search import cli, finish  # noqa: E402


@dataclass
class SmokeSearch:
    """A finished smoke search: its working folder (runs/, mlflow.db), output, wall time and
    the driver's process id (the name of its Ray session folder ends with it)."""

    work: Path
    out: str
    seconds: float
    pid: int


def _run_smoke_search(root: Path) -> SmokeSearch:
    work = root / "e2e" / "plain"
    work.mkdir(parents=True)
    t0 = time.time()
    proc = cli(work)
    out = finish(proc)
    return SmokeSearch(work, out, time.time() - t0, proc.pid)


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
            record.write_text(json.dumps({"work": str(done.work), "out": done.out, "seconds": done.seconds,
                                          "pid": done.pid}))
        saved = json.loads(record.read_text())
    return SmokeSearch(Path(saved["work"]), saved["out"], saved["seconds"], saved["pid"])


# Files that run searches, Ray clusters or servers, in the order they go out: most CPU-seconds
# first, so that short files fill the gaps at the end and no long one starts last and runs
# alone. The numbers: the whole suite serial on 2 cores at 926fa24, each file's CPU-seconds
# with every process it started, the session's smoke search counted in the first file that
# asked for it; test_multinode ran two searches then, one since b6b5a0a
# (docs/results/suite/suite_cpu-926fa24.txt, from `pytest -n 0 -p benchmarks.suite_cpu`).
# Two go earlier than their CPU says: test_tracking_outage mostly waits (119 s of wall time),
# so it starts while the cores are shared; test_search_e2e asks for the session's smoke
# search early, which four other files wait for. The order holds only with
# `--no-loadscope-reorder` (pyproject's addopts): by default xdist sends the files with the
# most tests first.
LONG_FILES = (
    "test_multinode.py",  # 77.6 CPU-s
    "test_tracking_outage.py",  # 45.3, 119 s wall
    "test_search_e2e.py",  # 73.0: the full-disk and the killed-driver searches
    "test_replicate.py",  # 54.7
    "test_reliability.py",  # 37.8
    "test_pack_search.py",  # 36.0
    "test_autoscaler.py",  # 27.9
    "test_own_data_e2e.py",  # 25.9: import, a smoke search, predict, pyfunc
    "test_gpu_check.py",  # 20.8
    "test_racing.py",  # 18.6
    "test_packed.py",  # 16.2
    "test_api.py",  # 12.7
)


def pytest_configure(config):
    """With PYTHONDONTWRITEBYTECODE set (some machines set it), no process writes bytecode, so
    each of the few hundred Python processes the suite starts (search drivers, trial workers,
    CLIs) would compile the package from source again (~0.4 CPU-s each): compile it once, in
    the process that hands out the tests."""
    if sys.dont_write_bytecode and not hasattr(config, "workerinput"):
        compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "focus_tune"), quiet=1)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))  # stable: the rest keep their order
