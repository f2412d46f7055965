"""benchmarks/bench_isa.py: the capped side really runs AVX2 kernels, and the ratio is printed."""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_capped_side_runs_avx2_kernels(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_isa.py"), "--epochs", "2", "--repeats", "1",
                           "--game", "facemed", "--profile", "smoke", "--data-root", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sides = dict(re.findall(r"^  (default|AVX2 only)\s+kernels (\S+)\s+epoch [\d.]+ s", proc.stdout, re.M))
    assert sides["AVX2 only"] == "AVX2", proc.stdout
    assert sides["default"] in {"AVX2", "AVX512", "DEFAULT"}, proc.stdout
    assert re.search(r"ratio AVX2 only / default: [\d.]+x", proc.stdout), proc.stdout
