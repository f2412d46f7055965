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
    # A CPU without bf16 kernels (oneDNN has no bf16 LSTM without AVX-512) skips bf16, saying why.
    skipped = report.get("skipped", {})
    assert set(skipped) <= {"bf16"}
    if "bf16" in skipped:
        assert "bf16 autocast of the model fails on cpu: " in skipped["bf16"]
        assert f"bf16 skipped in every section: {skipped['bf16']}" in proc.stdout
        precisions = ["fp32"]
    else:
        precisions = ["bf16", "fp32"]
    assert sorted(r["precision"] for r in report["train"]) == sorted(precisions)
    rates = json.loads((tmp_path / "gpu_rates.json").read_text())
    assert report["mc"]["num_samples"] == 100 and report["mc"]["full_s"] > 0
    # the dry Tune section runs the rates' precision alone (the default bf16, fp32 where skipped)
    assert [(r["precision"], r["trials"]) for r in report["tune"]] == [(rates["precision"], n) for n in (1, 2)]
    assert all(r["aggregate_samples_per_s"] > 0 for r in report["tune"])
    assert report["search"]["returncode"] == 0
    assert report["paper"]["best_gpus_per_trial"] in (1.0, 0.5)
    assert set(rates["sharing_slowdown"]) == {"1", "0.5"} and rates["val_s_per_item_entry"] > 0
    assert rates["precision"] == ("fp32" if "bf16" in skipped else "bf16")
    assert "best --gpus-per-trial on 8 GPUs" in proc.stdout
    # the paper cost again from the saved measurements, without measuring
    again = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--from-json",
                            str(tmp_path / "gpu_check.json")], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "best --gpus-per-trial on 8 GPUs" in again.stdout, again.stderr[-2000:]


def test_rates_out_writes_the_file_the_dry_run_reads(tmp_path, capsys, monkeypatch):
    """--rates-out from the saved H200 run 2 writes the packaged rates (they were made so), and
    the search's dry run reads it with --rates and names its card."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "FOCUS_TUNE_GPU_RATES"))}
    out = tmp_path / "mine" / "rates.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--from-json",
                           str(REPO / "docs" / "results" / "gpu" / "h200-run2.json"), "--rates-out", str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"rates of NVIDIA H200 written to {out}" in proc.stdout
    assert json.loads(out.read_text()) == json.loads((REPO / "focus_tune" / "procedure" / "gpu_rates.json").read_text())
    from focus_tune import search

    monkeypatch.delenv("FOCUS_TUNE_GPU_RATES", raising=False)
    assert search.main(["--game", "hero", "--profile", "paper", "--dry-run", "--cluster-gpus", "8",
                        "--gpus-per-trial", "0.5", "--rates", str(out), "--storage", str(tmp_path / "runs")]) == 0
    printed = capsys.readouterr().out
    assert "time per training: rates measured on one NVIDIA H200" in printed and "24.8 billed" in printed
