"""CPU-seconds of each test file, every process it starts counted: a pytest plugin.

Run the suite in one process inside a cgroup of its own (benchmarks/cpu_seconds.sh), with
this plugin; the cgroup's CPU counter is read before and after each test (its fixtures'
setup and teardown included), and each test's share is added to its file:

    sudo benchmarks/cpu_seconds.sh .venv/bin/python -m pytest -q -n 0 -p no:cacheprovider \\
        -p benchmarks.suite_cpu --suite-cpu-out suite_cpu.txt

A module fixture's cost lands on the first test that asks for it, the session's smoke search
on the first file that needs it (named in the table). Ray's daemons that outlive a test are
counted where they end. The counter hardly moves with other work on the machine, so files can
be compared while something else runs; wall times cannot.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest


def _counter() -> Path:
    """The CPU counter of this process's cgroup (v1 cpuacct.usage in ns, or v2 cpu.stat)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            return Path("/sys/fs/cgroup/cpuacct") / path.lstrip("/") / "cpuacct.usage"
        if controllers == "":
            v2 = Path("/sys/fs/cgroup") / path.lstrip("/") / "cpu.stat"
            if v2.exists():
                return v2
    raise pytest.UsageError("suite_cpu: no cgroup CPU counter for this process (run it under cpu_seconds.sh)")


def _seconds(counter: Path) -> float:
    text = counter.read_text()
    if counter.name == "cpuacct.usage":
        return int(text) / 1e9
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("usage_usec")) / 1e6


def pytest_addoption(parser):
    parser.addoption("--suite-cpu-out", default="suite_cpu.txt", help="where the per-file table goes")


class _Recorder:
    def __init__(self, counter: Path, out: Path):
        self.counter, self.out = counter, out
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self.start = _seconds(counter)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        c0, t0 = _seconds(self.counter), time.time()
        yield
        self.cpu[item.path.name] += _seconds(self.counter) - c0
        self.wall[item.path.name] += time.time() - t0

    def pytest_sessionfinish(self, session):
        total = _seconds(self.counter) - self.start
        rows = sorted(self.cpu, key=self.cpu.get, reverse=True)
        lines = [f"{'file':<40} {'CPU-s':>8} {'wall s':>8}"]
        lines += [f"{name:<40} {self.cpu[name]:8.1f} {self.wall[name]:8.1f}" for name in rows]
        lines += [f"{'all tests':<40} {sum(self.cpu.values()):8.1f} {sum(self.wall.values()):8.1f}",
                  f"{'the session (collection, teardown too)':<40} {total:8.1f}"]
        self.out.write_text("\n".join(lines) + "\n")


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        return
    recorder = _Recorder(_counter(), Path(config.getoption("--suite-cpu-out")))
    config.pluginmanager.register(recorder, "suite_cpu_recorder")
