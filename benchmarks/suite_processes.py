"""CPU-seconds of a command by the kind of process that spent them: the test processes, search
drivers, Ray's trial workers, each of Ray's daemons, MLflow servers, other command lines.

    python benchmarks/suite_processes.py [--out TABLE] [--every 0.25] -- python -m pytest -q

The command and every process it starts are followed through /proc (parent ids, read every
``--every`` seconds): each process's CPU (user + system) is the last value seen before it
ended, and its kind comes from its last command line (Ray's workers and agents name
themselves ``ray::...`` once started). A process that starts and ends between two reads is
missed, so the total is a little below a cgroup's counter (benchmarks/cpu_seconds.sh); what
this adds is where the CPU went. Prints the table, and writes it to ``--out`` if given.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")

# Ray's processes, by a word of their command line or process title, most specific first.
RAY_KINDS = (
    ("ray::ImplicitFunc", "Ray trial worker (a Tune trial actor)"),
    ("ray::IDLE", "Ray worker, idle (no task given)"),
    ("ray::DashboardAgent", "Ray daemon: dashboard agent"),
    ("ray::RuntimeEnvAgent", "Ray daemon: runtime-env agent"),
    ("ray::", "Ray worker, other task"),
    ("gcs_server", "Ray daemon: GCS"),
    ("log_monitor", "Ray daemon: log monitor"),
    ("autoscaler/_private/monitor", "Ray daemon: autoscaler monitor"),
    ("dashboard/dashboard.py", "Ray daemon: dashboard head"),
    ("raylet", "Ray daemon: raylet"),
)


def kind(cmdline: str) -> str:
    """The kind of a process, from its command line (or Ray's process title)."""
    for word, name in RAY_KINDS:
        if word in cmdline:
            return name
    if "exec(eval(sys.stdin.readline()))" in cmdline or re.search(r"-m (pytest|xdist)\b", cmdline):
        return "test process (pytest, its xdist workers)"
    if "mlflow" in cmdline and re.search(r"\b(server|serve)\b", cmdline):
        return "MLflow server"
    if "tests/fault_search.py" in cmdline or re.search(r"-m focus_tune\.search\b", cmdline):
        return "search driver (focus_tune.search, tests/fault_search.py)"
    m = re.search(r"-m (focus_tune\.[\w.]+)", cmdline)
    if m:
        return f"CLI: {m.group(1)}"
    if re.search(r"\bray start\b|/bin/ray start", cmdline):
        return "ray start (the command)"
    m = re.search(r"(benchmarks|scripts)/(\w+)\.py", cmdline)
    if m:
        return f"{m.group(1)}/{m.group(2)}.py"
    if " -c " in cmdline:
        return "python -c (tests' helper processes)"
    return "other"


def _read(pid: str) -> tuple[int, float, int, str] | None:
    """(parent pid, CPU-seconds, start time in ticks, command line) of a live process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / HZ, int(fields[19]), cmdline


def follow(argv: list[str], every: float = 0.25) -> tuple[dict[tuple[int, int], tuple[float, str]], int, float]:
    """Run ``argv``; {(pid, start): (CPU-s, last command line)} of it and its descendants, its
    exit status and wall seconds."""
    t0 = time.time()
    proc = subprocess.Popen(argv)
    ours = {proc.pid}
    seen: dict[tuple[int, int], tuple[float, str]] = {}
    while True:
        done = proc.poll() is not None
        rows = {pid: r for pid in os.listdir("/proc") if pid.isdigit() and (r := _read(pid)) is not None}
        # A child is ours if its parent is: walk until no new one joins (parents listed after children).
        grew = True
        while grew:
            grew = False
            for pid, (ppid, _, _, _) in rows.items():
                if int(pid) not in ours and ppid in ours:
                    ours.add(int(pid))
                    grew = True
        for pid, (_, cpu, start, cmdline) in rows.items():
            if int(pid) in ours:
                key = (int(pid), start)
                last = seen.get(key, (0.0, ""))[1]
                seen[key] = (cpu, cmdline or last)
        if done:
            return seen, proc.returncode, time.time() - t0
        time.sleep(every)


def table(seen: dict[tuple[int, int], tuple[float, str]], wall: float) -> str:
    cpu: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for seconds, cmdline in seen.values():
        name = kind(cmdline)
        cpu[name] += seconds
        count[name] += 1
    total = sum(cpu.values())
    lines = [f"{'kind of process':<58} {'count':>6} {'CPU-s':>8} {'each':>6} {'share':>6}"]
    for name in sorted(cpu, key=cpu.get, reverse=True):
        lines.append(f"{name:<58} {count[name]:6d} {cpu[name]:8.1f} {cpu[name] / count[name]:6.2f} "
                     f"{cpu[name] / total:6.1%}")
    lines.append(f"{'all (seen)':<58} {sum(count.values()):6d} {total:8.1f} {'':>6} {'':>6}")
    lines.append(f"wall {wall:.0f} s")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="also write the table here")
    ap.add_argument("--every", type=float, default=0.25, help="seconds between two reads of /proc")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="after --: the command to run")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command after --")
    seen, status, wall = follow(command, args.every)
    text = table(seen, wall)
    print(text, end="", file=sys.stderr)
    if args.out:
        args.out.write_text(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
