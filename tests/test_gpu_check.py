"""The GPU check runs end to end on a CPU with --dry, so it cannot rot between GPU sessions."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_gpu_check_dry_runs_every_section(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--dry", "--out", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["errors"] == {}
    assert {r["precision"] for r in report["train"]} == {"fp32", "bf16"}
    assert report["mc"]["num_samples"] == 100 and report["mc"]["full_s"] > 0
    assert [(r["precision"], r["trials"]) for r in report["tune"]] == [("bf16", 1), ("bf16", 2), ("fp32", 1), ("fp32", 2)]
    assert all(r["aggregate_samples_per_s"] > 0 for r in report["tune"])
    assert report["search"]["returncode"] == 0
    assert report["paper"]["best_gpus_per_trial"] in (1.0, 0.5)
    rates = json.loads((tmp_path / "gpu_rates.json").read_text())
    assert set(rates["sharing_slowdown"]) == {"1", "0.5"} and rates["val_s_per_item_entry"] > 0
    assert "best --gpus-per-trial on 8 GPUs" in proc.stdout
    # the paper cost again from the saved measurements, without measuring
    again = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--from-json",
                            str(tmp_path / "gpu_check.json")], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "best --gpus-per-trial on 8 GPUs" in again.stdout, again.stderr[-2000:]
