"""What a user meets in MLflow after a search, checked through MLflow's API on the session's
smoke search: a link that opens the trials, one metric naming scheme with real timestamps
and no step logged twice, a parent run whose metrics are the headline, trials that point to
their checkpoint and to the model they became, and logged models that carry their
environment (code, pinned requirements) and take the images a user has."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections import Counter
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

import mlflow
import pytest
import yaml
from mlflow.tracking import MlflowClient

from focus_tune.names import CONFORMAL_PREFIX, FAMILIES, FINAL_ROW_PREFIXES, HEADLINE_METRICS
from focus_tune.tracking.lineage import CHECKPOINT_TAG, MODEL_TAG
from focus_tune.tracking.models import MODEL_REQUIREMENTS
from smoke_search import GAME

pytestmark = pytest.mark.slow

PARENT_METRICS_MAX = 40
# <row>/ only where the metric is not the run's own model's (the parent's rows, a none final's
# temperature rows, a final's +conformal rows: conformal/, temperature-scaled/conformal/,
# time-dependent temperature/conformal/), then the split, then the metric's path
KEY = re.compile(r"^(?:(?P<row>[A-Za-z-]+(?: [a-z]+)?(?:/conformal)?)/)?"
                 r"(?P<split>train|val|test|time|decision|search)/[a-z0-9_/]+$")


@pytest.fixture(scope="module")
def store(smoke_search):
    uri = f"sqlite:///{smoke_search.work / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(f"focus-tune/{GAME}")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parent = next(r for r in runs if r.data.tags.get("kind") == "search")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return uri, client, experiment, parent, children


def test_the_search_prints_the_link_that_opens_the_trials_table(smoke_search, store):
    _, _, experiment, _, _ = store
    link = f"http://127.0.0.1:5000/#/experiments/{experiment.experiment_id}/runs?workflowType=machine_learning"
    lines = [line for line in smoke_search.out.splitlines() if line.startswith(("MLflow: ", "report: "))]
    assert len(lines) == 2 and all(link in line for line in lines), lines
    # the experiment's description says what its runs are
    description = experiment.tags["mlflow.note.content"]
    assert "report/results.md" in description and "val/ece_debiased_sq" in description
    # and the parent run's, what this search chose and where its report is
    parent = store[3].data.tags["mlflow.note.content"]
    assert "time-dependent: `l1" in parent and str(smoke_search.work / "runs") in parent


def test_no_metric_entry_at_timestamp_zero_and_no_step_logged_twice(store):
    _, client, _, parent, children = store
    for run in [parent, *children]:
        for key in run.data.metrics:
            history = client.get_metric_history(run.info.run_id, key)
            assert all(m.timestamp > 0 for m in history), (run.info.run_name, key)
            twice = [step for step, n in Counter(m.step for m in history).items() if n > 1]
            assert not twice, f"{run.info.run_name}: {key} logged twice at steps {twice}"


def test_one_naming_scheme_and_a_headline_parent(store):
    _, _, _, parent, children = store
    for run in [parent, *children]:
        for key in run.data.metrics:
            match = KEY.match(key)
            assert match, f"{run.info.run_name}: {key!r} is outside the naming scheme"
            if run is not parent:  # a trial's metrics are its own model's, but a none final's temperature-scaled
                # row and a final's +conformal rows (its own model's intervals recalibrated)
                assert match["row"] is None or key.startswith((CONFORMAL_PREFIX, *FINAL_ROW_PREFIXES)), \
                    (run.info.run_name, key)
                assert match["split"] in ("train", "val", "test", "time"), (run.info.run_name, key)
    metrics = parent.data.metrics
    assert len(metrics) <= PARENT_METRICS_MAX, sorted(metrics)
    for family in FAMILIES:
        assert {f"{family}/test/{k}" for k in HEADLINE_METRICS} <= set(metrics), family
    assert "image-blind/test/marginal/ece" in metrics and "exact/test/marginal/ece" in metrics
    assert not any(k.endswith("_p_vs_none") for k in metrics), "p-values are in the report's table"
    # trials of one kind name their metrics alike: the compare view lines them up
    stage_keys = {frozenset(r.data.metrics) for r in children if r.data.tags["stage"].startswith("stage")
                  and r.info.status == "FINISHED"}
    assert len(stage_keys) == 1


def test_the_rest_of_the_report_is_a_table_of_the_parent(store):
    _, client, _, parent, _ = store
    path = mlflow.artifacts.download_artifacts(run_id=parent.info.run_id, tracking_uri=store[0],
                                               artifact_path="report/tables/test_metrics.json")
    table = json.loads(Path(path).read_text())
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    keyed = {(r["row"], r["metric"]): r for r in rows}
    assert keyed[("time-dependent", "test/marginal/ece")]["mean"] == pytest.approx(
        parent.data.metrics["time-dependent/test/marginal/ece"])
    assert keyed[("time-dependent", "test/marginal/ece")]["holm_p_vs_none"] is not None
    assert ("oracle", "test/marginal/brier") in keyed or ("image-Bayes", "test/marginal/brier") in keyed


def test_trials_point_to_their_checkpoint_and_winners_to_their_model(store):
    _, client, _, parent, children = store
    finished = [r for r in children if r.info.status == "FINISHED"]
    for run in finished:
        assert Path(run.data.tags[CHECKPOINT_TAG]).is_dir(), run.info.run_name
    models = {o.model_id for o in parent.outputs.model_outputs}
    assert len(models) == len(FAMILIES)
    linked = {r.info.run_name: r for r in finished if MODEL_TAG in r.data.tags}
    for run in linked.values():
        (output,) = run.outputs.model_outputs
        assert run.data.tags[MODEL_TAG] == f"models:/{output.model_id}" and output.model_id in models
    by_name = {r.info.run_name: r for r in finished}
    for family in FAMILIES:
        final = by_name[f"final-{family}-s0"]
        source = final.data.tags["source_trial"]
        assert source in linked and f"final-{family}-s0" in linked, family
        assert linked[source].data.tags[MODEL_TAG] == final.data.tags[MODEL_TAG]
        # the reused training is the final's own: its curves are there, step by step
        trained = [(m.step, m.value) for m in client.get_metric_history(by_name[source].info.run_id, "train/loss")]
        assert trained and trained == [(m.step, m.value) for m in
                                       client.get_metric_history(final.info.run_id, "train/loss")]


def _closure(names) -> set[str]:
    """The distributions ``names`` install: themselves and their dependencies, transitively."""
    seen, todo = set(), [n.lower() for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = requires(name) or []
        except PackageNotFoundError:  # a dependency of another platform (waitress on Windows)
            continue
        for req in reqs:
            if "extra ==" not in req:
                todo.append(re.split(r"[ ;<>=!~\[(]", req, 1)[0].lower().replace("_", "-"))
    return seen


def test_a_logged_model_carries_its_environment_and_takes_uint8_images(store, tmp_path, monkeypatch):
    uri, client, _, parent, _ = store
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    model_id = next(o.model_id for o in parent.outputs.model_outputs)
    mlflow.set_tracking_uri(uri)  # models:/ URIs resolve through the current tracking URI
    folder = Path(mlflow.artifacts.download_artifacts(f"models:/{model_id}", dst_path=str(tmp_path / "model")))
    flavor = yaml.safe_load((folder / "MLmodel").read_text())["flavors"]["python_function"]
    assert flavor["env"] == {"conda": "conda.yaml", "virtualenv": "python_env.yaml"} and flavor["code"] == "code"
    requirements = (folder / "requirements.txt").read_text().split()
    assert [r.split("==")[0] for r in requirements] == list(MODEL_REQUIREMENTS) and all("==" in r for r in requirements)
    assert "-r requirements.txt" in yaml.safe_load((folder / "python_env.yaml").read_text())["dependencies"]
    assert (folder / "code" / "focus_tune" / "pyfunc.py").is_file()

    # A fresh interpreter loads it the MLflow way, from the code shipped with it, and predicts
    # on uint8 images; what it imported is what requirements.txt installs.
    script = f"""
import json, sys, numpy as np, mlflow
mlflow.set_tracking_uri({uri!r})
model = mlflow.pyfunc.load_model("models:/{model_id}")
shape = mlflow.models.get_model_info("models:/{model_id}").signature.inputs.inputs[0].shape
images = np.random.default_rng(0).integers(0, 256, (2, *shape[1:]), dtype=np.uint8)
out = model.predict({{"images": images}}, params={{"num_samples": 4}})
assert out["marginals"].shape[0] == 2 and np.allclose(out["marginals"].sum(-1), 1, atol=1e-4)
print(json.dumps(sorted(m.__file__ for name, m in sys.modules.items()
                        if name.split(".")[0] == "focus_tune" and getattr(m, "__file__", None))))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    files = [Path(f) for f in json.loads(done.stdout.strip().splitlines()[-1])]
    shipped = Path("artifacts", "code", "focus_tune")  # in the store's copy of the model
    assert files and all(str(shipped) in str(f) for f in files), "the model ran the code shipped with it"
    # every third-party import in the project's modules that ran is installed by requirements.txt
    stdlib, dists = sys.stdlib_module_names, packages_distributions()
    imported = {alias.name.split(".")[0] for f in files for node in ast.walk(ast.parse(f.read_text()))
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for f in files for node in ast.walk(ast.parse(f.read_text()))
                 if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module}
    needed = {d.lower() for m in imported - stdlib - {"focus_tune"} for d in dists.get(m, [m])}
    allowed = _closure(MODEL_REQUIREMENTS)
    assert needed <= allowed, f"imported but not required: {sorted(needed - allowed)}"
