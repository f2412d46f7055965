"""benchmarks/suite_processes.py: every process a command starts is counted once, under its kind,
with the CPU it spent."""

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("suite_processes", REPO / "benchmarks" / "suite_processes.py")
suite_processes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite_processes)

SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"


def test_a_parent_its_child_and_grandchild_are_each_counted_with_their_cpu(tmp_path):
    """Three processes (each spins 0.3 CPU-s, then runs the next and waits), as a test that
    starts a search that starts Ray."""
    grandchild = tmp_path / "grandchild.py"
    grandchild.write_text(SPIN)
    child = tmp_path / "child.py"
    child.write_text(f"import subprocess, sys\n{SPIN}subprocess.run([sys.executable, {str(grandchild)!r}])\n")
    parent = f"import subprocess, sys\n{SPIN}subprocess.run([sys.executable, {str(child)!r}])\n"
    seen, status, wall = suite_processes.follow([sys.executable, "-c", parent], every=0.05)
    assert status == 0
    spent = sorted(cpu for cpu, _ in seen.values())
    assert len(spent) == 3, seen
    assert all(0.25 <= cpu < 1.5 for cpu in spent), spent  # each spun 0.3 s; none counted twice
    kinds = {suite_processes.kind(cmdline) for _, cmdline in seen.values()}
    assert kinds == {"python -c (tests' helper processes)", "other"}, kinds
    table = suite_processes.table(seen, wall)
    assert table.splitlines()[-2].split()[:4] == ["all", "(seen)", "3", f"{sum(spent):.1f}"], table


@pytest.mark.parametrize("cmdline, kind", [
    ("ray::ImplicitFunc.train", "Ray trial worker (a Tune trial actor)"),
    ("ray::IDLE", "Ray worker, idle (no task given)"),
    ("/venv/bin/python -u /venv/lib/python3.11/site-packages/ray/dashboard/dashboard.py --host=127.0.0.1",
     "Ray daemon: dashboard head"),
    ("/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet --raylet_socket_name=x", "Ray daemon: raylet"),
    ("/venv/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server --log_dir=/tmp/ray", "Ray daemon: GCS"),
    ("/venv/bin/python -c import sys;exec(eval(sys.stdin.readline()))", "test process (pytest, its xdist workers)"),
    ("/venv/bin/python -m focus_tune.search --game hero --data-root /tmp/pytest-of-root/x",
     "search driver (focus_tune.search, tests/fault_search.py)"),
    ("/venv/bin/python /repo/tests/fault_search.py --game facemed",
     "search driver (focus_tune.search, tests/fault_search.py)"),
    ("/venv/bin/python -m focus_tune.predict --model runs:/abc/model-none", "CLI: focus_tune.predict"),
    ("/venv/bin/python -m mlflow server --host 127.0.0.1 --workers 1", "MLflow server"),
    ("/venv/bin/python /repo/benchmarks/gpu_check.py --dry", "benchmarks/gpu_check.py"),
])
def test_kinds(cmdline, kind):
    assert suite_processes.kind(cmdline) == kind
