"""MLflow tracking: the only module that imports mlflow (and it imports no Ray).

One experiment per scenario, one parent run per search, and one nested child run per
trial, written from the driver (the search's Ray Tune callback calls :class:`Tracker`):
workers never need the tracking URI, which is what makes the same code work on a cluster.

Lineage: every run carries MLflow's own context tags (git commit, source, user), resolved
by MLflow's context registry as ``mlflow.start_run`` would; the dataset is an input of the
parent run and of every trial's run, named with a digest of its manifest; a final model
is a logged model with a signature, an input example and its test metrics; the run of
each stage's winner is tagged ``winner_of``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

import mlflow
from mlflow.entities import Dataset, DatasetInput, InputTag, LoggedModelOutput, Metric, Param, RunTag
from mlflow.tracking import MlflowClient

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
# mlflow configures its logger on import; its INFO lines (database migrations) are noise here.
logging.getLogger("mlflow").setLevel(logging.WARNING)


def tracking_uri(uri: str | None) -> str:
    """The given URI, or ``sqlite:///<cwd>/mlflow.db``."""
    if uri:
        return uri
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def ui_command(uri: str) -> str:
    """How to look at a store: the ``mlflow ui`` command for a local one, the address of a server."""
    if uri.startswith(("http://", "https://")):
        return f"open {uri}"
    return f"mlflow ui --backend-store-uri {uri} --workers 1  (then open http://127.0.0.1:5000)"


class ModelNotFound(LookupError):
    """A model URI that names nothing in the store; the message says what the store has."""


def _sqlite_file(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///"):].split("?")[0])


def fetch_model(uri: str, tracking: str | None = None) -> tuple[Path, dict[str, str]]:
    """Download the model folder at an MLflow URI (``runs:/<run>/model-<family>``,
    ``models:/<model_id>``, ``models:/<name>/<version>``) and return it with the params of
    the run that logged it ({} when unknown). Raises :class:`ModelNotFound` with a
    readable message when the store, the run or the model does not exist; a missing
    SQLite store is not created."""
    from mlflow.artifacts import download_artifacts
    from mlflow.exceptions import MlflowException

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    store = tracking_uri(tracking)
    db = _sqlite_file(store)
    if db is not None and not db.is_file():
        raise ModelNotFound(f"no MLflow store at {db} (--tracking-uri {store}); run this where the search ran, "
                            "or pass the --tracking-uri it printed")
    mlflow.set_tracking_uri(store)
    client = MlflowClient(store)
    run_id = None
    try:
        if uri.startswith("runs:/"):
            run_id, _, path = uri[len("runs:/"):].partition("/")
            run = _get(client.get_run, run_id, f"no MLflow run {run_id!r} in {store}")
            if path.strip("/") and not _run_has(client, run, path.strip("/")):
                names = sorted(m.name for m in _run_models(client, run))
                raise ModelNotFound(f"run {run_id} has no model {path.strip('/')!r}"
                                    + (f"; it has: {', '.join(names)}" if names else "; it logged no model"))
        elif uri.startswith("models:/"):
            ref = uri[len("models:/"):].strip("/")
            if "/" in ref or "@" in ref:  # a registered model: name/version or name@alias
                name, version = (ref.split("@", 1) if "@" in ref else ref.rsplit("/", 1))
                get = client.get_model_version_by_alias if "@" in ref else client.get_model_version
                run_id = _get(lambda: get(name, version), None, f"no registered model {ref!r} in {store}").run_id
            else:
                run_id = _get(client.get_logged_model, ref, f"no logged model {ref!r} in {store}").source_run_id
        folder = Path(download_artifacts(uri))
    except MlflowException as err:
        raise ModelNotFound(f"{uri}: {' '.join(str(err.message).split())[:300]}") from None
    params = dict(client.get_run(run_id).data.params) if run_id else {}
    return folder, params


def download_model(uri: str) -> Path:
    """The local folder of an MLflow artifact URI (``models:/<id>``, ``runs:/<run>/<path>``),
    downloaded from the current tracking URI (``mlflow.set_tracking_uri``, MLFLOW_TRACKING_URI):
    what ``model_io.load_model`` calls, so that model_io does not import mlflow."""
    from mlflow.artifacts import download_artifacts

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    return Path(download_artifacts(uri))


def _get(fetch, arg, missing: str):
    from mlflow.exceptions import MlflowException

    try:
        return fetch(arg) if arg is not None else fetch()
    except MlflowException as err:
        if "RESOURCE_DOES_NOT_EXIST" in str(err.error_code) or "not found" in str(err).lower():
            raise ModelNotFound(missing) from None
        raise


def _run_models(client, run):
    return client.search_logged_models([run.info.experiment_id],
                                       filter_string=f"source_run_id = '{run.info.run_id}'")


def _run_has(client, run, path: str) -> bool:
    """Whether a run holds ``path``: a logged model of that name, or an artifact."""
    if any(m.name == path for m in _run_models(client, run)):
        return True
    parent, _, leaf = path.rpartition("/")
    return any(a.path == path for a in client.list_artifacts(run.info.run_id, parent or None))


WINNER_TAG = "winner_of"  # on a trial's run: the stages it won, comma separated
DATASET_CONTEXT = "training"  # the mlflow.data.context of the dataset input


def context_tags() -> dict[str, str]:
    """MLflow's own run context tags (``mlflow.source.git.commit``, ``mlflow.source.name``,
    ``mlflow.source.type``, ``mlflow.user``, ...), resolved by MLflow's context registry as
    ``mlflow.start_run`` resolves them: ``MlflowClient.create_run`` alone sets none. The git
    commit is that of the repository holding the program that runs (``sys.argv[0]``)."""
    from mlflow.tracking.context.registry import resolve_tags

    return {k: str(v) for k, v in resolve_tags().items() if v is not None}


def manifest_digest(manifest) -> str:
    """A digest of a dataset: SHA-256 over its manifest's split-file checksums (``files``),
    truncated to the 32 hex digits an MLflow dataset digest holds (at most 36 characters).
    The same split files give the same digest wherever the folder lies."""
    canonical = json.dumps(sorted(dict(manifest.files).items()), separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def dataset_entity(manifest, path) -> Dataset:
    """The MLflow dataset of a dataset folder (``focus_tune.data.store.Manifest`` + its folder):
    name ``manifest.name``, the manifest digest, the folder as a local source, a tensor schema
    (images uint8 [-1, C, H, W], sequences int8 [-1, L]) and a profile (split sizes, L,
    classes, image shape, generator)."""
    import numpy as np
    from mlflow.data.schema import TensorDatasetSchema
    from mlflow.types import Schema, TensorSpec

    c, h, w = (int(x) for x in manifest.image_shape)
    length = int(manifest.length)
    schema = TensorDatasetSchema(
        features=Schema([TensorSpec(np.dtype("uint8"), (-1, c, h, w), "image")]),
        targets=Schema([TensorSpec(np.dtype("int8"), (-1, length), "sequence")]),
    )
    profile = {
        "game": manifest.game, "profile": manifest.profile, "splits": dict(manifest.splits),
        "length": length, "num_classes": manifest.num_classes, "class_names": list(manifest.class_names),
        "image_shape": [c, h, w], "event_class": manifest.class_names[manifest.event_class],
        "generator": manifest.generator, "generator_version": manifest.generator_version, "seed": manifest.seed,
        "files": dict(manifest.files), "digest": "sha256 of the files' checksums, first 32 hex digits",
    }
    name = manifest.name or f"{manifest.game}-{manifest.profile}"
    return Dataset(name=name, digest=manifest_digest(manifest), source_type="local",
                   source=json.dumps({"uri": str(Path(path).resolve())}),
                   schema=json.dumps(schema.to_dict()), profile=json.dumps(profile))


def model_signature(meta: dict):
    """The signature of a saved model (its model.json as a dict): images float32
    [-1, C, H, W] (pixel values 0..255) in, marginal probabilities float32 [-1, L, classes]
    out; None when model.json does not record the image shape and length."""
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    shape, length = meta.get("image_shape"), meta.get("length")
    classes = meta.get("class_names") or []
    num_classes = (meta.get("data") or {}).get("num_classes", len(classes))
    if not shape or not length or not num_classes:
        return None
    c, h, w = (int(x) for x in shape)
    return ModelSignature(
        inputs=Schema([TensorSpec(np.dtype("float32"), (-1, c, h, w), "images")]),
        outputs=Schema([TensorSpec(np.dtype("float32"), (-1, int(length), int(num_classes)), "marginals")]),
    )


def default_input_example(meta: dict):
    """One mid-grey image of the model's shape, float32 [1, C, H, W] (None if unknown)."""
    import numpy as np

    shape = meta.get("image_shape")
    return None if not shape else np.full((1, *(int(x) for x in shape)), 128.0, dtype=np.float32)


class Tracker:
    """The search's parent run and its children."""

    def __init__(self, uri: str | None, experiment: str, run_name: str, parent_run_id: str | None = None):
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "1")
        self.uri = tracking_uri(uri)
        mlflow.set_tracking_uri(self.uri)
        self.client = MlflowClient(self.uri)
        exp = self.client.get_experiment_by_name(experiment)
        self.experiment_id = exp.experiment_id if exp else self.client.create_experiment(experiment)
        self.context = context_tags()  # resolved once: the same for the parent and its children
        if parent_run_id is None:
            run = self.client.create_run(self.experiment_id, run_name=run_name, tags={**self.context, "kind": "search"})
            parent_run_id = run.info.run_id
        self.parent_run_id = parent_run_id
        self.dataset: Dataset | None = None  # set by log_dataset; an input of every child run
        self._children: dict[str, str] = {r.data.tags["trial_id"]: r.info.run_id for r in self._child_runs()}

    def _child_runs(self):
        return self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{self.parent_run_id}'", max_results=5000
        )

    # -- dataset ---------------------------------------------------------------------------
    def log_dataset(self, manifest, path: str | os.PathLike) -> Dataset:
        """Log the search's dataset (a ``Manifest`` and its folder) as an input of the parent
        run, and remember it: every child run that :meth:`start_trial` creates or reopens
        afterwards gets it as its input too (context ``training``). Idempotent (a resumed
        search calls it again). Returns the MLflow dataset (``.name``, ``.digest``)."""
        self.dataset = dataset_entity(manifest, path)
        self._log_input(self.parent_run_id)
        return self.dataset

    def _log_input(self, run_id: str) -> None:
        if self.dataset is not None:
            tag = InputTag(key="mlflow.data.context", value=DATASET_CONTEXT)
            self.client.log_inputs(run_id, datasets=[DatasetInput(self.dataset, [tag])])

    # -- children -----------------------------------------------------------------------
    def start_trial(self, job) -> str:
        """Create (or, on a resumed search, reopen) the child run of a trial
        (``focus_tune.job.TrialJob``); returns its run id. A new run gets MLflow's context
        tags, the trial's tags, params (schedule summary, ``spec.params``, ``train.<field>``)
        and the dataset input of :meth:`log_dataset`."""
        spec = job.spec
        run_id = self._children.get(spec.trial_id)
        if run_id is None:
            tags = {
                **self.context, "mlflow.parentRunId": self.parent_run_id, "trial_id": spec.trial_id,
                "stage": spec.stage, "family": spec.family,
            }
            if spec.source_trial:
                tags["source_trial"] = spec.source_trial
            run_id = self.client.create_run(self.experiment_id, run_name=spec.trial_id, tags=tags).info.run_id
            params = {"schedule": str(spec.schedule), **spec.params}
            params.update({f"train.{k}": v for k, v in dataclasses.asdict(job.train).items()})
            self.client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()])
            self._children[spec.trial_id] = run_id
        else:
            self.client.update_run(run_id, status="RUNNING")
        self._log_input(run_id)
        return run_id

    def log_result(self, trial_id: str, result: dict) -> None:
        """Per-epoch metrics, under the same keys as the Tune result (``val/ece``, ``train/loss``)."""
        run_id = self._children[trial_id]
        step = int(result.get("epoch", 0))
        ts = int(result.get("timestamp", 0) * 1000)
        metrics = [Metric(k, float(v), ts, step) for k, v in result.items() if _is_metric(k, v)]
        if metrics:
            self.client.log_batch(run_id, metrics=metrics)

    def end_trial(self, trial_id: str, failed: bool, reason: str | None = None) -> None:
        run_id = self._children[trial_id]
        if reason:
            self.client.set_tag(run_id, "failure_reason", reason[:4000])
        self.client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")

    def tag_winner(self, trial_id: str, stage: str) -> None:
        """Mark the run of ``trial_id`` as the winner of ``stage``: tag ``winner_of`` on the
        child run (stages joined by commas when a trial wins several) and ``winner.<stage>``
        = trial id on the parent run. Idempotent."""
        run_id = self._children.get(trial_id)
        if run_id is None:  # created by another Tracker of this search (a resumed one)
            self._children.update({r.data.tags["trial_id"]: r.info.run_id for r in self._child_runs()})
            run_id = self._children.get(trial_id)
        if run_id is None:
            raise KeyError(f"no MLflow run of trial {trial_id!r} under run {self.parent_run_id}")
        current = self.client.get_run(run_id).data.tags.get(WINNER_TAG, "")
        stages = [s for s in current.split(",") if s]
        if stage not in stages:
            self.client.set_tag(run_id, WINNER_TAG, ",".join([*stages, stage]))
        self.client.set_tag(self.parent_run_id, f"winner.{stage}", trial_id)

    # -- parent ---------------------------------------------------------------------------
    def log_search(self, params: dict | None = None, tags: dict | None = None, metrics: dict | None = None) -> None:
        self.client.log_batch(
            self.parent_run_id,
            params=[Param(k, str(v)) for k, v in (params or {}).items()],
            tags=[RunTag(k, str(v)) for k, v in (tags or {}).items()],
            metrics=[Metric(k, float(v), 0, 0) for k, v in (metrics or {}).items() if _is_metric(k, v)],
        )

    def log_artifacts(self, folder: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifacts(self.parent_run_id, str(folder), artifact_path)

    def metric_histories(self, key: str, trial_ids=None) -> dict[str, list[tuple[int, float]]]:
        """{trial id: [(step, value), ...]} of one metric of the trials' child runs, by step;
        where a step was logged twice (a trial retried from an earlier checkpoint) the
        later value counts."""
        out = {}
        for tid, run_id in self._children.items():
            if trial_ids is not None and tid not in trial_ids:
                continue
            latest: dict[int, float] = {}
            for m in sorted(self.client.get_metric_history(run_id, key), key=lambda m: m.timestamp):
                latest[int(m.step)] = float(m.value)
            out[tid] = sorted(latest.items())
        return out

    def log_model(self, folder: Path, name: str, metrics: dict | None = None, input_example=None) -> str:
        """A final model folder (``model_io.save_model``: numpy weights + JSON, no pickle) as a
        logged model of the parent run; returns its id (load with ``model_io.load_model("models:/<id>")``).

        Next to the folder's files it writes an ``MLmodel`` file with the model's signature
        (:func:`model_signature`, from model.json) and an input example (``input_example``,
        float32 images [n, C, H, W], saved as ``{"images": ...}`` like the signature's input;
        default: one mid-grey image), which the MLflow UI shows. A model.json without the
        image shape and length (an early model) is logged without signature or example.
        The logged model carries MLflow's context tags, model.json's train config as params,
        and is an output of the parent run. ``metrics`` (e.g. ``{"test/marginal/ece": ...}``)
        are logged on the parent run linked to the model and, after :meth:`log_dataset`, to the
        dataset; ``client.get_logged_model(id).metrics`` lists them."""
        import numpy as np
        from mlflow.models import Model

        folder = Path(folder)
        meta = json.loads((folder / "model.json").read_text())
        params = {f"train.{k}": v for k, v in (meta.get("train") or {}).items()}
        params.update({k: meta[k] for k in ("family", "trial_id", "game") if meta.get(k) is not None})
        model = self.client.create_logged_model(
            self.experiment_id, name=name, source_run_id=self.parent_run_id,
            tags={**self.context, "format": str(meta.get("format"))},
            params={k: str(v) for k, v in params.items()}, model_type="focus-tune-simulator")
        try:
            self.client.log_model_artifacts(model.model_id, str(folder))
            with tempfile.TemporaryDirectory() as tmp:
                mlmodel = Model(artifact_path=model.artifact_location, run_id=self.parent_run_id,
                                model_uuid=model.model_id, model_id=model.model_id, signature=model_signature(meta),
                                flavors={"focus_tune": {"format": meta.get("format"), "weights": "weights.npz",
                                                        "config": "model.json",
                                                        "loader": "focus_tune.model_io.load_model"}})
                example = input_example if input_example is not None else default_input_example(meta)
                if example is not None:  # saved under the signature's input name, as it reads back
                    _save_example(mlmodel, {"images": np.asarray(example, dtype=np.float32)}, tmp)
                mlmodel.save(os.path.join(tmp, "MLmodel"))
                self.client.log_model_artifacts(model.model_id, tmp)
            self.client.log_outputs(self.parent_run_id, [LoggedModelOutput(model.model_id, step=0)])
            self._log_model_metrics(model.model_id, metrics or {})
        except BaseException:
            self.client.finalize_logged_model(model.model_id, "FAILED")
            raise
        self.client.finalize_logged_model(model.model_id, "READY")
        return model.model_id

    def _log_model_metrics(self, model_id: str, metrics: dict) -> None:
        ts = int(time.time() * 1000)
        linked = {"dataset_name": self.dataset.name, "dataset_digest": self.dataset.digest} if self.dataset else {}
        batch = [Metric(k, float(v), ts, 0, model_id=model_id, run_id=self.parent_run_id, **linked)
                 for k, v in metrics.items() if _is_metric(k, v)]
        if batch:
            self.client.log_batch(self.parent_run_id, metrics=batch)

    def reopen(self) -> None:
        """A resumed search: its parent run is RUNNING again (it may have ended FAILED or KILLED)."""
        self.client.update_run(self.parent_run_id, status="RUNNING")

    def end_running_children(self, status: str, reason: str) -> None:
        """End the child runs still RUNNING (trials cut by an interrupt or an error)."""
        for run in self._child_runs():
            if run.info.status == "RUNNING":
                self.client.set_tag(run.info.run_id, "stop_reason", reason[:4000])
                self.client.set_terminated(run.info.run_id, status=status)

    def finish(self, failed: bool = False, status: str | None = None, reason: str | None = None) -> None:
        """End the parent run: FINISHED, FAILED or KILLED; ``reason`` is kept as its stop_reason tag."""
        if reason:
            self.client.set_tag(self.parent_run_id, "stop_reason", reason[:4000])
        self.client.set_terminated(self.parent_run_id, status=status or ("FAILED" if failed else "FINISHED"))


def _is_metric(key: str, value) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        and "/" in key  # our namespaced keys (val/ece, train/loss, test/marginal/ece, time/...)
    )


def _save_example(mlmodel, example, folder: str) -> None:
    """Save an input example into a model folder and record it in ``mlmodel``, as MLflow's
    flavors do (``input_example.json`` and ``serving_input_example.json``)."""
    from mlflow.models.utils import _save_example as save

    save(mlmodel, example, folder)
