"""The CPU cost of one smoke search, a git revision and this tree side by side in one run.

The test suite is some forty real searches on the smoke profile and is CPU-bound on 2 cores
from start to end, so what one smoke search costs in CPU-seconds, over every process it
starts (the driver, Ray's processes, the trial workers), is what the suite's time is made of.
A search's wall time says less: it waits on the disk and on Ray.

Each side runs `python -m focus_tune.search --game hero --profile smoke` in a new folder, the
sides alternating, the same dataset for both; the base revision is checked out into a
temporary git worktree and imported from there (PYTHONPATH, inherited by Ray's workers), with
this environment's packages, both trees compiled to bytecode first. CPU-seconds are the whole
machine's busy time (/proc/stat) while the search runs: run it on an otherwise idle machine.
Medians of --repeats. ``--flags`` are added to this tree's searches only (e.g.
``--tensorboard``). At the end it says whether every search wrote the same results.csv, byte
for byte. On a machine that runs other work, ``--cgroup``
counts the search's own processes only (a cgroup-v1 cpuacct group that the search and every
process it starts, Ray's included, belong to; root), not the whole machine.

    python benchmarks/bench_smoke_search.py --base 3f714e9 [--repeats 3] [--flags=--tensorboard] [--cgroup]
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def busy_seconds() -> float:
    """CPU-seconds the machine has been busy (user, nice, system, irq, softirq) since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class Counted:
    """The CPU-seconds of the processes started in it (a cpuacct cgroup made for them)."""

    def __init__(self, name: str):
        self.path = CPUACCT / name
        self.path.mkdir()

    def join(self) -> None:
        """Called in the child before it runs the search (``preexec_fn``): it and its descendants count."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def seconds(self) -> float:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def remove(self) -> None:
        for _ in range(100):  # Ray's last processes may take a moment to go
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def one_search(tree: Path, folder: Path, data: Path, flags: tuple[str, ...] = (),
               cgroup: bool = False) -> tuple[float, float]:
    """(CPU-seconds, wall seconds) of one smoke search importing focus_tune from ``tree``: the
    machine's busy time, or with ``cgroup`` its own processes'."""
    folder.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(tree))
    where = subprocess.run([sys.executable, "-c", "import focus_tune; print(focus_tune.__file__)"], env=env,
                           cwd=folder, capture_output=True, text=True, check=True).stdout.strip()
    if not Path(where).is_relative_to(tree):
        raise SystemExit(f"focus_tune is imported from {where}, not from {tree}")
    counted = Counted(f"bench-smoke-{os.getpid()}-{folder.name}") if cgroup else None
    cpu0, t0 = busy_seconds(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "focus_tune.search", "--game", "hero", "--profile", "smoke",
                           "--data-root", str(data), *flags], cwd=folder, env=env, capture_output=True, text=True,
                          preexec_fn=counted.join if counted else None)
    wall = time.perf_counter() - t0
    if counted:
        time.sleep(1.0)  # what Ray's processes still do as they stop counts too
        cpu = counted.seconds()
        counted.remove()
    else:
        cpu = busy_seconds() - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"the search of {tree} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return cpu, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the git revision to compare with (e.g. a commit)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--flags", default="", help="flags added to this tree's searches, e.g. --flags=--tensorboard")
    ap.add_argument("--cgroup", action="store_true", help="count the searches' own processes, not the machine")
    args = ap.parse_args()
    flags = tuple(args.flags.split())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = tmp / "base"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), args.base], check=True,
                       capture_output=True)
        try:
            sides = {f"base {args.base}": base, " ".join(("this tree", *flags)): REPO}
            for tree in sides.values():  # both from bytecode, whatever PYTHONDONTWRITEBYTECODE says
                compileall.compile_dir(str(tree / "focus_tune"), quiet=1)
            data = tmp / "data"
            # builds the dataset and the store template; not counted
            one_search(REPO, tmp / "warm", data, cgroup=args.cgroup)
            runs: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
            reports = set()
            for r in range(args.repeats):
                for side, tree in sides.items():
                    folder = tmp / f"{side.split()[0]}-{r}"
                    runs[side].append(one_search(tree, folder, data, flags if tree == REPO else (), args.cgroup))
                    reports.add((folder / "runs" / "hero-smoke-seed0" / "report" / "results.csv").read_bytes())
                    print(f"  {side:<16} run {r + 1}: {runs[side][-1][0]:6.1f} CPU-s  {runs[side][-1][1]:5.1f} s wall",
                          flush=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], capture_output=True)
    counted = "its own processes" if args.cgroup else "whole machine"
    print(f"one hero smoke search, {counted}, median of {args.repeats}, the sides alternating:")
    med = {side: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for side, v in runs.items()}
    for side, (cpu, wall) in med.items():
        print(f"  {side:<16} {cpu:6.1f} CPU-s  {wall:5.1f} s wall")
    (b_cpu, b_wall), (n_cpu, n_wall) = med.values()
    print(f"  ratio (this tree / base): CPU {n_cpu / b_cpu:.2f}, wall {n_wall / b_wall:.2f}")
    print(f"  results.csv: {'the same in every search' if len(reports) == 1 else f'{len(reports)} different files'}")


if __name__ == "__main__":
    main()
