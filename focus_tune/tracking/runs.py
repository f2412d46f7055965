"""The search's parent run and one nested child run per trial."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

import mlflow
from mlflow.entities import Dataset, DatasetInput, InputTag, LoggedModelOutput, Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from ..durable import write_atomic
from ..errors import TrackingUnavailable
from ..names import MODEL_JSON, MODEL_WEIGHTS
from .backend import _is_metric, create_local_store, tracking_uri
from .lineage import (
    CHECKPOINT_TAG,
    DATASET_CONTEXT,
    MODEL_TAG,
    STOPPED_TAG,
    WINNER_TAG,
    context_tags,
    dataset_entity,
    experiment_tags,
)
from .models import _save_example, default_input_example, model_signature, write_environment
from .outage import HTTP_DEFAULTS, PatientClient, is_server


class Tracker:
    """The search's parent run and its children.

    With a tracking server, every call after the opening waits out an outage of the server
    (``outage.PatientClient``; the opening itself fails at once, before the search starts).
    ``unsent``: a file where the trial records that could not be sent when the patience ran
    out are kept; :meth:`send_unsent` (a resumed search) sends them."""

    def __init__(self, uri: str | None, experiment: str, run_name: str, parent_run_id: str | None = None,
                 unsent: Path | None = None):
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "1")
        self.uri = tracking_uri(uri)
        if is_server(self.uri):
            for key, value in HTTP_DEFAULTS.items():
                os.environ.setdefault(key, value)
        create_local_store(self.uri)
        mlflow.set_tracking_uri(self.uri)
        self.unsent = Path(unsent) if unsent is not None else None
        self.client = MlflowClient(self.uri)
        exp = self.client.get_experiment_by_name(experiment)
        self.experiment_id = exp.experiment_id if exp else self.client.create_experiment(experiment)
        for key, value in experiment_tags(experiment).items():  # a user's own choice stays
            if exp is None or key not in exp.tags:
                self.client.set_experiment_tag(self.experiment_id, key, value)
        self.context = context_tags()  # resolved once: the same for the parent and its children
        if parent_run_id is None:
            run = self.client.create_run(self.experiment_id, run_name=run_name, tags={**self.context, "kind": "search"})
            parent_run_id = run.info.run_id
        self.parent_run_id = parent_run_id
        self.dataset: Dataset | None = None  # set by log_dataset; an input of every child run
        self._children: dict[str, str] = {r.data.tags["trial_id"]: r.info.run_id for r in self._child_runs()}
        self.client = PatientClient(self.client, self.uri, enabled=is_server(self.uri))

    @property
    def unavailable(self) -> bool:
        """The server stayed away longer than the patience: every MLflow call now fails at once."""
        return self.client.failure is not None

    def _child_runs(self, trial_id: str | None = None):
        query = f"tags.mlflow.parentRunId = '{self.parent_run_id}'"
        if trial_id is not None:
            query += f" and tags.trial_id = '{trial_id}'"
        return self.client.search_runs([self.experiment_id], filter_string=query, max_results=5000)

    def _child(self, trial_id: str) -> str:
        """The run id of a trial's child run, also one another Tracker of this search created
        (a resumed one); KeyError when it has none."""
        if trial_id not in self._children:
            self._children.update({r.data.tags["trial_id"]: r.info.run_id for r in self._child_runs()})
        if trial_id not in self._children:
            raise KeyError(f"no MLflow run of trial {trial_id!r} under run {self.parent_run_id}")
        return self._children[trial_id]

    # -- what the patience did not get through -----------------------------------------------
    def _keep_unsent(self, op: str, *args) -> None:
        """Record a trial's record that the server never received (the patience ran out)."""
        if self.unsent is None:
            return
        kept = json.loads(self.unsent.read_text()) if self.unsent.exists() else []
        write_atomic(self.unsent, json.dumps([*kept, [op, *args]]))

    def send_unsent(self) -> int:
        """Send what :meth:`_keep_unsent` kept (a resumed search, the server back); returns how many."""
        if self.unsent is None or not self.unsent.exists():
            return 0
        kept = json.loads(self.unsent.read_text())
        for op, trial_id, *args in kept:
            if trial_id in self._children:  # else its run was never created: the trial runs again
                {"log_result": self.log_result, "end_trial": self.end_trial}[op](trial_id, *args)
        self.unsent.unlink()
        return len(kept)

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
        (``focus_tune.procedure.job.TrialJob``); returns its run id. A new run gets MLflow's context
        tags, the trial's tags, params (schedule summary, ``spec.params``, ``train.<field>``)
        and the dataset input of :meth:`log_dataset`."""
        spec = job.spec
        return self.start_child(spec.trial_id, spec.stage, spec.family, {"schedule": str(spec.schedule), **spec.params},
                                job.train, spec.source_trial)

    def start_child(self, trial_id: str, stage: str, family: str, params: dict, train,
                    source_trial: str | None = None) -> str:
        """:meth:`start_trial` from plain values (the recipe stage's trials, which are no
        ``TrialJob``): the child run ``trial_id`` with the tags ``stage`` and ``family``, the
        params ``params`` and ``train.<field>`` of the ``TrainConfig`` ``train``; returns its run id."""
        run_id = self._children.get(trial_id)
        if run_id is None:
            tags = {
                **self.context, "mlflow.parentRunId": self.parent_run_id, "trial_id": trial_id,
                "stage": stage, "family": family,
            }
            source_run = self._children.get(source_trial) if source_trial else None
            if source_trial:
                tags["source_trial"] = source_trial
            if source_run:
                tags["source_run"] = source_run
            # a retry must not make a second run: one that reached the server before its answer was lost counts
            run_id = self.client.call(self.client.raw.create_run, self.experiment_id, run_name=trial_id, tags=tags,
                                      found=lambda: next(iter(self._child_runs(trial_id)), None)).info.run_id
            params = {**params, **{f"train.{k}": v for k, v in dataclasses.asdict(train).items()}}
            self.client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()])
            if source_run:  # a final that reuses a search trial's checkpoint: that training is its own
                self._copy_history(source_run, run_id)
            self._children[trial_id] = run_id
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
        if metrics:  # explicit timestamps and steps: a retry that reached the server twice adds nothing
            try:
                self.client.log_batch(run_id, metrics=metrics)
            except TrackingUnavailable:
                self._keep_unsent("log_result", trial_id, {"epoch": step, "timestamp": ts / 1000,
                                                           **{m.key: m.value for m in metrics}})
                raise

    def _copy_history(self, source: str, run_id: str) -> None:
        """Every metric entry of run ``source`` into run ``run_id``, with its step and
        timestamp (a retried copy adds nothing)."""
        entries = [m for key in self.client.get_run(source).data.metrics
                   for m in self.client.get_metric_history(source, key)]
        for start in range(0, len(entries), 1000):  # MLflow's batch limit
            self.client.log_batch(run_id, metrics=[Metric(m.key, m.value, m.timestamp, m.step)
                                                   for m in entries[start:start + 1000]])

    def note_checkpoint(self, trial_id: str, uri: str) -> None:
        """Tag a trial's run with the URI of its latest checkpoint (``checkpoint``): what
        ``--resume`` restarts it from, and where its final weights are."""
        self.client.set_tag(self._children[trial_id], CHECKPOINT_TAG, uri)

    def link_model(self, trial_id: str, model_id: str) -> None:
        """The run of the trial whose weights became the logged model ``model_id``: the model
        is an output of that run too (the UI lists it under the run's logged models), and its
        ``model`` tag holds the model's URI."""
        run_id = self._child(trial_id)
        self.client.log_outputs(run_id, [LoggedModelOutput(model_id, step=0)])
        self.client.set_tag(run_id, MODEL_TAG, f"models:/{model_id}")

    def tag_trial(self, trial_id: str, key: str, value: str) -> None:
        """Set the tag ``key`` on the run of ``trial_id`` (e.g. the recipe stage's ``stopped_by``)."""
        self.client.set_tag(self._children[trial_id], key, value)

    def note_retry(self, trial_id: str, failures: int, reason: str) -> None:
        """A trial that crashed and restarts from its last checkpoint stays one child run: its
        ``retries`` tag counts the restarts and ``retry.<n>`` keeps why each happened."""
        run_id = self._children[trial_id]
        self.client.log_batch(run_id, tags=[RunTag("retries", str(failures)),
                                            RunTag(f"retry.{failures}", reason[:4000])])

    def note_crash(self, trial_id: str, crashes: int, reason: str) -> None:
        """A trial that crashed past its retries and is handed out again (a new Ray Tune trial
        from its last checkpoint) stays one child run: its ``crashes`` tag counts those hand-outs
        and ``crash.<n>`` keeps why each happened."""
        run_id = self._children[trial_id]
        self.client.log_batch(run_id, tags=[RunTag("crashes", str(crashes)), RunTag(f"crash.{crashes}", reason[:4000])])

    def end_trial(self, trial_id: str, failed: bool, reason: str | None = None, stopped: str | None = None) -> None:
        """End a trial's run: FINISHED, FAILED (``reason``: why) or, stopped by racing, KILLED
        with the tag ``stopped_by`` saying why (``stopped``)."""
        run_id = self._children[trial_id]
        try:
            if stopped:
                self.client.set_tag(run_id, STOPPED_TAG, f"racing: {stopped}"[:4000])
            elif reason:
                self.client.set_tag(run_id, "failure_reason", reason[:4000])
            status = "KILLED" if stopped else "FAILED" if failed else "FINISHED"
            self.client.set_terminated(run_id, status=status)
        except TrackingUnavailable:
            self._keep_unsent("end_trial", trial_id, failed, reason, stopped)
            raise

    def tag_winner(self, trial_id: str, stage: str) -> None:
        """Mark the run of ``trial_id`` as the winner of ``stage``: tag ``winner_of`` on the
        child run (stages joined by commas when a trial wins several) and ``winner.<stage>``
        = trial id on the parent run. Idempotent."""
        run_id = self._child(trial_id)
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
            metrics=[Metric(k, float(v), now_ms(), 0) for k, v in (metrics or {}).items() if _is_metric(k, v)],
        )

    def log_artifacts(self, folder: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifacts(self.parent_run_id, str(folder), artifact_path)

    def log_table(self, rows: list[dict], artifact_file: str) -> None:
        """A table (one dict per row) as an MLflow table artifact of the parent run."""
        import pandas as pd

        self.client.log_table(self.parent_run_id, data=pd.DataFrame(rows), artifact_file=artifact_file)

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

    def log_model(self, folder: Path, name: str, metrics: dict | None = None) -> str:
        """A final model folder (``model_io.save_model``: numpy weights + JSON, no pickle) as a
        logged model of the parent run; returns its id (load with ``model_io.load_model("models:/<id>")``,
        or as MLflow's ``python_function``: ``mlflow.pyfunc.load_model``, ``mlflow models serve``;
        see ``focus_tune.pyfunc``).

        Next to the folder's files it writes an ``MLmodel`` file with the model's signature
        (:func:`model_signature`, from model.json) and an input example (one mid-grey uint8
        image, saved as ``{"images": ...}`` like the signature's input), which the MLflow UI
        shows, and what
        rebuilds its environment (:func:`~focus_tune.tracking.models.write_environment`: the
        project's code, requirements.txt, python_env.yaml, conda.yaml). A model.json without the
        image shape and length (an early model) is logged without signature or example.
        The logged model carries MLflow's context tags, model.json's train config as params,
        and is an output of the parent run. ``metrics`` (e.g. ``{"test/marginal/ece": ...}``)
        are logged on the parent run linked to the model and, after :meth:`log_dataset`, to the
        dataset; ``client.get_logged_model(id).metrics`` lists them."""
        from mlflow.models import Model
        from mlflow.pyfunc import add_to_model

        folder = Path(folder)
        meta = json.loads((folder / MODEL_JSON).read_text())
        params = {f"train.{k}": v for k, v in (meta.get("train") or {}).items()}
        params.update({k: meta[k] for k in ("family", "trial_id", "scenario") if meta.get(k) is not None})
        model = self.client.create_logged_model(
            self.experiment_id, name=name, source_run_id=self.parent_run_id,
            tags={**self.context, "format": str(meta.get("format"))},
            params={k: str(v) for k, v in params.items()}, model_type="focus-tune-simulator")
        try:
            self.client.log_model_artifacts(model.model_id, str(folder))
            with tempfile.TemporaryDirectory() as tmp:
                mlmodel = Model(artifact_path=model.artifact_location, run_id=self.parent_run_id,
                                model_uuid=model.model_id, model_id=model.model_id, signature=model_signature(meta),
                                flavors={"focus_tune": {"format": meta.get("format"), "weights": MODEL_WEIGHTS,
                                                        "config": MODEL_JSON,
                                                        "loader": "focus_tune.sim.model_io.load_model"}})
                # mlflow.pyfunc.load_model / mlflow models serve, through focus_tune.pyfunc (no
                # pickle), with the code and the pinned requirements that rebuild its environment
                add_to_model(mlmodel, loader_module="focus_tune.pyfunc", **write_environment(Path(tmp)))
                example = default_input_example(meta)
                if example is not None:  # saved under the signature's input name, as it reads back
                    _save_example(mlmodel, {"images": example}, tmp)
                mlmodel.save(os.path.join(tmp, "MLmodel"))
                self.client.log_model_artifacts(model.model_id, tmp)
            self.client.log_outputs(self.parent_run_id, [LoggedModelOutput(model.model_id, step=0)])
            self._log_model_metrics(model.model_id, metrics or {})
        except BaseException:
            if not self.unavailable:
                self.client.finalize_logged_model(model.model_id, "FAILED")
            raise
        self.client.finalize_logged_model(model.model_id, "READY")
        return model.model_id

    def register_model(self, model_id: str, name: str, alias: str) -> int:
        """A new version of the registered model ``name`` (created if missing) from the logged
        model ``model_id``, tagged with its source run, and ``alias`` (e.g. the family) pointed
        at it: ``models:/<name>@<alias>`` then loads it. Returns the version."""
        from mlflow.exceptions import MlflowException

        try:
            self.client.create_registered_model(name, description="focus-tune final models, one version per family")
        except MlflowException as err:
            if err.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        source = self.client.get_logged_model(model_id)
        version = self.client.create_model_version(name, source=f"models:/{model_id}", run_id=self.parent_run_id,
                                                   model_id=model_id, tags={"family": alias,
                                                                             "model_type": str(source.model_type)})
        self.client.set_registered_model_alias(name, alias, version.version)
        return int(version.version)

    def _log_model_metrics(self, model_id: str, metrics: dict) -> None:
        ts = now_ms()
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


def now_ms() -> int:
    """MLflow's timestamp of a metric logged now (milliseconds since the epoch)."""
    return int(time.time() * 1000)
