"""MLflow lineage of a search, on a SQLite store: MLflow's context tags (git commit) on the
parent and child runs, the dataset as their input with its manifest digest, a final model
with a signature and an input example that loads back, test metrics linked to the model,
the stage winners' tags, and a resumed search reopening its child runs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import types
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
from mlflow.entities import LoggedModelStatus
from mlflow.tracking import MlflowClient

from focus_tune import predict
from focus_tune.config.space import load_search_config, space_path
from focus_tune.data import ensure_dataset, read_manifest
from focus_tune.procedure.job import TrialJob
from focus_tune.procedure.trials import TrialSpec
from focus_tune.sim import model_io
from focus_tune.sim.model_io import DataInfo
from focus_tune.sim.regularization import LambdaSchedule
from focus_tune.tracking import WINNER_TAG, Tracker, download_model, manifest_digest

REPO = Path(__file__).resolve().parent.parent
GAME = "facemed"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return ensure_dataset(GAME, "smoke", tmp_path_factory.mktemp("data"))


@pytest.fixture
def manifest(dataset):
    return read_manifest(dataset)


@pytest.fixture
def tracker(tmp_path) -> Tracker:
    return Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", experiment=f"focus-tune/{GAME}", run_name="search")


def job(manifest, trial_id: str = "stage1-l0.005-s0", stage: str = "stage1", family: str = "time-dependent",
        source_trial: str | None = None) -> TrialJob:
    length = manifest.length
    spec = TrialSpec(trial_id=trial_id, stage=stage, family=family, seed=0, source_trial=source_trial,
                     schedule=LambdaSchedule.staged([0.005], 0.005, 2, length), params={"lambda_1": 0.005, "seed": 0})
    train = load_search_config(space_path(GAME), "smoke").train
    return TrialJob(spec=spec, train=train, data=DataInfo.of(manifest))


def _reset_git_context(monkeypatch) -> None:
    """Resolve the context as ``python -m focus_tune.search`` does: its main file is in the
    repository (pytest's is in the ignored virtual environment); MLflow caches the git
    info of the first resolution in its provider, so that cache starts empty here."""
    from mlflow.tracking.context import registry

    monkeypatch.setattr(sys, "argv", [str(REPO / "focus_tune" / "__main__.py"), *sys.argv[1:]])
    for provider in registry._run_context_provider_registry:
        if hasattr(provider, "_cache"):
            monkeypatch.setattr(provider, "_cache", {})


def _head() -> str | None:
    if shutil.which("git") is None:
        return None
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def test_parent_and_child_runs_carry_mlflows_context_tags(tmp_path, manifest, monkeypatch):
    _reset_git_context(monkeypatch)
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", experiment=f"focus-tune/{GAME}", run_name="search")
    child = tracker.start_trial(job(manifest))
    client = MlflowClient(tracker.uri)
    for run_id in (tracker.parent_run_id, child):
        tags = client.get_run(run_id).data.tags
        assert tags["mlflow.source.name"] == str(REPO / "focus_tune" / "__main__.py")
        assert tags["mlflow.source.type"] == "LOCAL"
        assert tags["mlflow.user"]
        head = _head()
        if head is not None:
            assert tags["mlflow.source.git.commit"] == head
    parent_tags = client.get_run(tracker.parent_run_id).data.tags
    assert parent_tags["kind"] == "search" and parent_tags["mlflow.runName"] == "search"
    child_tags = client.get_run(child).data.tags
    assert child_tags["mlflow.parentRunId"] == tracker.parent_run_id
    assert (child_tags["trial_id"], child_tags["stage"], child_tags["family"]) == \
        ("stage1-l0.005-s0", "stage1", "time-dependent")


def test_start_trial_logs_the_jobs_typed_params(tracker, manifest):
    j = job(manifest, trial_id="final-time-dependent-s0", stage="final", source_trial="stage1-l0.005-s0")
    params = tracker.client.get_run(tracker.start_trial(j)).data.params
    assert params["schedule"] == str(j.spec.schedule)
    assert params["lambda_1"] == "0.005" and params["seed"] == "0"
    assert params["train.lr"] == str(j.train.lr) and params["train.encoder"] == j.train.encoder
    assert params["train.val_items"] == str(j.train.val_items)
    tags = tracker.client.get_run(tracker._children[j.trial_id]).data.tags
    assert tags["source_trial"] == "stage1-l0.005-s0"


def test_the_dataset_is_an_input_of_the_parent_and_of_every_child(tracker, manifest, dataset):
    logged = tracker.log_dataset(manifest, dataset)
    digest = manifest_digest(manifest)
    assert logged.digest == digest and len(digest) == 32
    children = [tracker.start_trial(job(manifest, f"stage1-l{x}-s0")) for x in ("0.005", "0.05")]
    for run_id in (tracker.parent_run_id, *children):
        inputs = tracker.client.get_run(run_id).inputs.dataset_inputs
        assert len(inputs) == 1
        ds = inputs[0].dataset
        assert (ds.name, ds.digest, ds.source_type) == (manifest.name, digest, "local")
        assert json.loads(ds.source) == {"uri": str(Path(dataset).resolve())}
        profile = json.loads(ds.profile)
        assert profile["splits"] == manifest.splits and profile["length"] == manifest.length
        assert profile["class_names"] == manifest.class_names and profile["image_shape"] == list(manifest.image_shape)
        schema = json.loads(ds.schema)["mlflow_tensorspec"]
        assert json.loads(schema["features"])[0]["tensor-spec"]["shape"] == [-1, *manifest.image_shape]
        assert {t.key: t.value for t in inputs[0].tags} == {"mlflow.data.context": "training"}
    # Logging it again (a resumed search) adds nothing.
    tracker.log_dataset(manifest, dataset)
    assert len(tracker.client.get_run(tracker.parent_run_id).inputs.dataset_inputs) == 1


def test_the_digest_follows_the_split_files_not_the_folder(manifest):
    other = type(manifest)(**{**manifest.__dict__, "files": {**manifest.files, "test.parquet": "0" * 64}})
    assert manifest_digest(other) != manifest_digest(manifest)
    moved = type(manifest)(**{**manifest.__dict__, "source": "elsewhere"})
    assert manifest_digest(moved) == manifest_digest(manifest)


def _saved_model(tmp_path, manifest) -> Path:
    j = job(manifest)
    torch.manual_seed(0)
    model = model_io.build_model(j.train, j.data)
    return model_io.save_model(tmp_path / "models" / "time-dependent", model.eval(), j.train, j.data,
                               extra={"family": "time-dependent", "trial_id": j.trial_id, "game": GAME,
                                      "class_names": list(manifest.class_names), "length": manifest.length,
                                      "image_shape": list(manifest.image_shape)})


def test_a_logged_model_has_a_signature_an_example_and_linked_test_metrics(tracker, manifest, dataset, tmp_path):
    tracker.log_dataset(manifest, dataset)
    folder = _saved_model(tmp_path, manifest)
    metrics = {"test/marginal/ece": 0.125, "test/brier": 0.5, "epoch": 3}
    model_id = tracker.log_model(folder, "model-time-dependent", metrics=metrics)

    uri = f"models:/{model_id}"
    info = mlflow.models.get_model_info(uri)
    c, h, w = manifest.image_shape
    (images,) = info.signature.inputs.inputs
    (marginals,) = info.signature.outputs.inputs
    assert (images.name, images.type, images.shape) == ("images", np.dtype("uint8"), (-1, c, h, w))
    assert (marginals.name, marginals.type, marginals.shape) == \
        ("marginals", np.dtype("float32"), (-1, manifest.length, manifest.num_classes))
    assert info.saved_input_example_info["type"] == "ndarray"
    downloaded = download_model(uri)
    example = mlflow.models.Model.load(str(downloaded)).load_input_example(str(downloaded))
    assert list(example) == ["images"], "the example is named as the signature's input"
    assert example["images"].shape == (1, c, h, w) and example["images"].dtype == np.uint8
    assert info.model_id == model_id and "focus_tune" in info.flavors

    logged = tracker.client.get_logged_model(model_id)
    assert logged.status == LoggedModelStatus.READY and logged.source_run_id == tracker.parent_run_id
    assert logged.params["family"] == "time-dependent" and logged.params["train.encoder"] == job(manifest).train.encoder
    linked = {m.key: m for m in logged.metrics}
    assert set(linked) == {"test/marginal/ece", "test/brier"}, "only namespaced metric keys"
    assert linked["test/marginal/ece"].value == 0.125
    assert linked["test/marginal/ece"].dataset_digest == manifest_digest(manifest)
    assert linked["test/marginal/ece"].dataset_name == manifest.name
    assert tracker.client.get_run(tracker.parent_run_id).data.metrics["test/brier"] == 0.5
    outputs = tracker.client.get_run(tracker.parent_run_id).outputs.model_outputs
    assert [o.model_id for o in outputs] == [model_id]
    assert "mlflow.source.type" in logged.tags

    # It still loads as a focus-tune model, by URI and by focus_tune.predict.
    loaded = model_io.load_model(uri)
    saved = model_io.load_model(folder)
    for (name, a), (_, b) in zip(loaded.state_dict().items(), saved.state_dict().items()):
        assert torch.equal(a, b), name
    assert (downloaded / model_io.WEIGHTS).is_file() and (downloaded / "MLmodel").is_file()
    got = predict.load(uri, tracking_uri=tracker.uri)
    assert got.family == "time-dependent" and got.length == manifest.length
    assert got.class_names == list(manifest.class_names)


def test_a_model_without_its_shape_is_logged_without_a_signature(tracker, tmp_path, manifest):
    j = job(manifest)
    folder = model_io.save_model(tmp_path / "bare", model_io.build_model(j.train, j.data), j.train, j.data)
    model_id = tracker.log_model(folder, "model-none")
    info = mlflow.models.get_model_info(f"models:/{model_id}")
    assert info.signature is None and info.saved_input_example_info is None
    assert tracker.client.get_logged_model(model_id).metrics in (None, [])
    assert isinstance(model_io.load_model(f"models:/{model_id}"), torch.nn.Module)


def test_winner_tags(tracker, manifest):
    a = tracker.start_trial(job(manifest, "stage1-l0.005-s0"))
    b = tracker.start_trial(job(manifest, "stage1-l0.05-s0"))
    tracker.end_trial("stage1-l0.005-s0", failed=False)
    tracker.tag_winner("stage1-l0.005-s0", "stage1")
    tracker.tag_winner("stage1-l0.005-s0", "stage2")  # deduplicated: the same training won stage 2
    tracker.tag_winner("stage1-l0.005-s0", "stage2")
    assert tracker.client.get_run(a).data.tags[WINNER_TAG] == "stage1,stage2"
    assert WINNER_TAG not in tracker.client.get_run(b).data.tags
    parent = tracker.client.get_run(tracker.parent_run_id).data.tags
    assert parent["winner.stage1"] == parent["winner.stage2"] == "stage1-l0.005-s0"
    with pytest.raises(KeyError, match="no MLflow run of trial 'nope'"):
        tracker.tag_winner("nope", "stage1")


def test_a_retried_trial_stays_one_run_and_says_why(tracker, manifest, tmp_path):
    from focus_tune.search.callbacks import last_failure

    j = job(manifest)
    first = tracker.start_trial(j)
    errors = tmp_path / "error.txt"  # Tune's error file: one block per failure
    errors.write_text("Failure # 1 (occurred at 2026-11-27)\nray::ImplicitFunc.train() (pid=1)\n  File x\n"
                      "RuntimeError: injected fault\n"
                      "Failure # 2 (occurred at 2026-11-27)\nThe actor died unexpectedly before finishing this task.\n"
                      "\tclass_name: ImplicitFunc\nThe actor is dead because its node has died.\n")
    trial = types.SimpleNamespace(error_file=str(errors))
    assert last_failure(trial) == "The actor is dead because its node has died."
    errors.write_text(errors.read_text().split("Failure # 2")[0])
    assert last_failure(trial) == "RuntimeError: injected fault"
    assert last_failure(types.SimpleNamespace(error_file=None)) == "unknown error"
    tracker.note_retry(j.trial_id, 1, "RuntimeError: injected fault")
    tracker.note_retry(j.trial_id, 2, "The actor is dead because its node has died.")
    assert tracker.start_trial(j) == first and len(tracker._child_runs()) == 1
    tags = tracker.client.get_run(first).data.tags
    assert (tags["retries"], tags["retry.1"], tags["retry.2"]) == (
        "2", "RuntimeError: injected fault", "The actor is dead because its node has died.")


def test_a_resumed_search_reopens_its_child_runs(tracker, manifest, dataset):
    tracker.log_dataset(manifest, dataset)
    j = job(manifest)
    first = tracker.start_trial(j)
    tracker.log_result(j.trial_id, {"epoch": 1, "val/ece": 0.3, "timestamp": 1.0, "failed": False, "node_id": "x"})
    tracker.end_trial(j.trial_id, failed=True, reason="interrupted")
    tracker.finish(status="KILLED")

    again = Tracker(tracker.uri, experiment=f"focus-tune/{GAME}", run_name="search",
                    parent_run_id=tracker.parent_run_id)
    again.reopen()
    again.log_dataset(manifest, dataset)
    assert again.start_trial(j) == first
    run = again.client.get_run(first)
    assert run.info.status == "RUNNING"
    assert len(run.inputs.dataset_inputs) == 1
    again.log_result(j.trial_id, {"epoch": 2, "val/ece": 0.2, "timestamp": 2.0})
    again.tag_winner(j.trial_id, "stage1")
    again.end_trial(j.trial_id, failed=False)
    assert again.metric_histories("val/ece") == {j.trial_id: [(1, 0.3), (2, 0.2)]}
    assert again.client.get_run(first).info.status == "FINISHED"
    assert len(again._child_runs()) == 1


def test_tracking_imports_no_ray_and_model_io_no_mlflow():
    code = ("import sys; import focus_tune.sim.model_io; "
            "assert 'mlflow' not in sys.modules, 'model_io imports mlflow'; "
            "import focus_tune.tracking; "
            "assert not [m for m in sys.modules if m == 'ray' or m.startswith('ray.')], 'tracking imports ray'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
