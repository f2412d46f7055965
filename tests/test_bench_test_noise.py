"""benchmarks/bench_test_noise.py on the session's smoke search: it re-evaluates the finals'
test split and reproduces the search's own numbers where it uses the search's generator (draw
0 at the search's M), then tabulates the Monte Carlo and training-seed noise per metric and M."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_test_noise_benchmark_reproduces_the_recorded_test_metrics(smoke_search, tmp_path):
    from smoke_search import RUN

    out = tmp_path / "scores.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_test_noise.py"),
                           str(smoke_search.work / "runs" / RUN), "--samples", "16", "8", "--draws", "2",
                           "--threads", "1", "--out", str(out)], capture_output=True, text=True, timeout=300,
                          cwd=smoke_search.work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    checks = re.findall(r"ECE (\S+) \(recorded (\S+)\), coverage (\S+) \(recorded (\S+)\)", proc.stdout)
    assert len(checks) == 9  # three families x three final seeds, at the search's M = 16
    assert all(ece == rec_ece and cov == rec_cov for ece, rec_ece, cov, rec_cov in checks), proc.stdout
    rows = re.findall(r"^(\S+/\S+)\s+(\d+)\s+(-?[\d.]+)\s+(-|[+-][\d.]+ ± [\d.]+)\s+([\d.]+)\s+([\d.]+)\s+"
                      r"([\d.]+|nan)\s+([\d.]+|nan)$", proc.stdout, re.M)
    assert {(k, int(m)) for k, m, *_ in rows} == {(k, m) for k in (
        "marginal/ece", "marginal/ece_debiased", "interval/coverage", "interval/interval_score", "marginal/ce",
        "marginal/auc") for m in (16, 8)}, proc.stdout
    assert [shift for k, m, _, shift, *_ in rows if int(m) == 16] == ["-"] * 6  # the first M is the reference
    one = {(k, int(m)): float(sd) for k, m, _, _, sd, *_ in rows}
    assert one[("marginal/ece", 16)] > 0 and one[("marginal/ce", 8)] > 0  # independent draws differ
    # the saved scores give the same table again, without evaluating
    again = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_test_noise.py"), "--scores",
                            str(out)], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout.strip() == proc.stdout[proc.stdout.index("metric "):].strip()


def test_one_draw_is_refused():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_test_noise.py"), "x", "--draws", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--draws must be at least 2" in proc.stderr
