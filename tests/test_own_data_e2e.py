"""A dataset of one's own, end to end, as a user runs it: PNG files and a CSV written here
(grayscale, non-square, some sequences cut short), `python -m focus_tune.data import-table`,
`python -m focus_tune.search --data DIR --profile smoke` without --game, then
`python -m focus_tune.predict` on one of its images. No built-in scenario is involved."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

NAME = "alarms"
CLASSES = ["ok", "warn", "fail"]
H, W, L = 12, 20, 8
REPO = Path(__file__).resolve().parents[1]


def _write_table(root: Path, n: int = 160, seed: int = 0) -> Path:
    """n grey H x W PNGs whose brightness sets how fast a chain reaches `fail`; a quarter of
    the sequences stop early without failing (right-censored): the fault soak's table
    (benchmarks/fault_soak.py writes it, so the soak and this test import the same data)."""
    spec = importlib.util.spec_from_file_location("fault_soak", REPO / "benchmarks" / "fault_soak.py")
    soak = sys.modules.setdefault("fault_soak", importlib.util.module_from_spec(spec))  # dataclasses ask for it
    spec.loader.exec_module(soak)
    soak.write_table(root, n, seed, height=H, width=W, length=L)
    return root / "alarms.csv"


def _run(args: list[str], cwd: Path, timeout: float = 600) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc.stdout


def test_import_search_and_predict_a_dataset_of_ones_own(tmp_path):
    table = _write_table(tmp_path / "raw")
    data = tmp_path / "alarms-data"
    out = _run(["-m", "focus_tune.data", "import-table", str(table), "--out", str(data), "--event", "fail",
                "--classes", *CLASSES, "--length", str(L), "--name", NAME, "--group-column", "site"], tmp_path)
    assert "censored" in out
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["game"] is None and manifest["name"] == NAME and manifest["censored"] is True
    assert manifest["image_shape"] == [1, H, W]

    work = tmp_path / "work"
    work.mkdir()
    out = _run(["-m", "focus_tune.search", "--data", str(data), "--profile", "smoke"], work)
    run = work / "runs" / f"{NAME}-smoke-seed0"
    assert f"experiment focus-tune/{NAME}" in out
    report = (run / "report" / "results.md").read_text()
    rows = {line.split("|")[1].strip() for line in report.splitlines() if line.startswith("| ")}
    assert {"none", "constant", "time-dependent", "image-blind"} <= rows
    assert not rows & {"oracle", "exact", "image-Bayes"}
    assert "Row `oracle` is absent" in report and "Row `exact` is absent" in report
    assert "right-censored" in report

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{work / 'mlflow.db'}")
    experiment = mlflow.get_experiment_by_name(f"focus-tune/{NAME}")
    assert experiment is not None
    parent = mlflow.search_runs([experiment.experiment_id], filter_string="tags.mlflow.runName = 'search-smoke-seed0'")
    assert len(parent) == 1
    models = mlflow.search_logged_models(experiment_ids=[experiment.experiment_id], output_format="list")
    model = mlflow.pyfunc.load_model(f"models:/{next(m.model_id for m in models if m.name == 'model-time-dependent')}")
    got = model.predict({"images": np.full((2, 1, H, W), 200, np.uint8)}, params={"num_samples": 8})
    assert got["marginals"].shape == (2, L, len(CLASSES)) and got["class_names"] == CLASSES

    image = tmp_path / "raw" / "img" / "3.png"
    out = _run(["-m", "focus_tune.predict", "--model", str(run), str(image), "--num-samples", "8"], work)
    assert "3.png" in out and "truth" not in out
    out = _run(["-m", "focus_tune.predict", "--model", str(run), str(data), "--items", "all", "--num-samples", "8"],
               work)
    assert "(censored) (" in out and "dataset items: " in out  # a censored item's T is a lower bound
