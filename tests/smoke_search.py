"""The real search CLI on the smoke profile, run as a subprocess (shared by the end-to-end tests).

One uninterrupted search of FaceMed with injected faults (tests/fault_search.py): one trial's
loss turns NaN, two raise once mid-training. ``conftest.smoke_search`` runs it once per
test session; test_search_e2e, test_predict, test_progress and test_search_figure read it.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

GAME = "facemed"
FAULTS = {"stage1-l0.05-s0": "nan", "constant-0.01-s0": "raise@2", "stage2-l0.01-s0": "raise@2"}
RUN = f"{GAME}-smoke-seed0"


def cli(workdir: Path, *extra: str, **popen) -> subprocess.Popen:
    env = dict(os.environ, FOCUS_TUNE_TEST_FAULTS=json.dumps(FAULTS), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, str(Path(__file__).with_name("fault_search.py")), "--game", GAME, "--profile", "smoke",
           "--data-root", str(workdir.parent / "data"), *extra]
    return subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, **popen)


def finish(proc: subprocess.Popen, timeout: float = 420) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-4000:]
    return out


def state_of(workdir: Path, run: str = RUN) -> dict:
    return json.loads((workdir / "runs" / run / "search_state.json").read_text())


def search_runs(db: Path, experiment: str = f"focus-tune/{GAME}"):
    """The MLflow client of the sqlite store ``db``, the ``experiment``, its search (parent) runs
    (tag kind "search") and its trials' child runs."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return (client, exp, [r for r in runs if r.data.tags.get("kind") == "search"],
            [r for r in runs if "mlflow.parentRunId" in r.data.tags])
