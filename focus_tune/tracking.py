"""MLflow tracking: the only module that imports mlflow.

One experiment per scenario, one parent run per search, and one nested child run per
trial, written from the driver by a Ray Tune callback: workers never need the tracking
URI, which is what makes the same code work on a cluster.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import mlflow
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient
from ray.tune import Callback

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


class Tracker:
    """The search's parent run and its children."""

    def __init__(self, uri: str | None, experiment: str, run_name: str, parent_run_id: str | None = None):
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "1")
        self.uri = tracking_uri(uri)
        mlflow.set_tracking_uri(self.uri)
        self.client = MlflowClient(self.uri)
        exp = self.client.get_experiment_by_name(experiment)
        self.experiment_id = exp.experiment_id if exp else self.client.create_experiment(experiment)
        if parent_run_id is None:
            run = self.client.create_run(self.experiment_id, run_name=run_name, tags={"kind": "search"})
            parent_run_id = run.info.run_id
        self.parent_run_id = parent_run_id
        self._children: dict[str, str] = {r.data.tags["trial_id"]: r.info.run_id for r in self._child_runs()}

    def _child_runs(self):
        return self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{self.parent_run_id}'", max_results=5000
        )

    # -- children -----------------------------------------------------------------------
    def start_trial(self, config: dict) -> str:
        """Create (or, on a resumed search, reopen) the child run of a trial."""
        trial = config["trial"]
        run_id = self._children.get(trial["trial_id"])
        if run_id is None:
            tags = {
                "mlflow.parentRunId": self.parent_run_id, "trial_id": trial["trial_id"],
                "stage": trial["stage"], "family": trial["family"],
            }
            if trial["source_trial"]:
                tags["source_trial"] = trial["source_trial"]
            run_id = self.client.create_run(self.experiment_id, run_name=trial["trial_id"], tags=tags).info.run_id
            params = {"schedule": trial["summary"], **trial["params"]}
            params.update({f"train.{k}": v for k, v in config["train"].items()})
            self.client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()])
            self._children[trial["trial_id"]] = run_id
        else:
            self.client.update_run(run_id, status="RUNNING")
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

    def log_model(self, folder: Path, name: str) -> str:
        """A final model folder (``model_io.save_model``: numpy weights + JSON, no pickle) as a
        logged model of the parent run; returns its id (load with ``model_io.load_model("models:/<id>")``)."""
        model = self.client.create_logged_model(self.experiment_id, name=name, source_run_id=self.parent_run_id,
                                                tags={"format": "focus-tune-state-dict-npz"})
        try:
            self.client.log_model_artifacts(model.model_id, str(folder))
        except BaseException:
            self.client.finalize_logged_model(model.model_id, "FAILED")
            raise
        self.client.finalize_logged_model(model.model_id, "READY")
        return model.model_id

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


class MLflowTrialCallback(Callback):
    """Driver-side Tune callback: every trial becomes a nested MLflow run."""

    def __init__(self, tracker: Tracker):
        self.tracker = tracker

    def on_trial_start(self, iteration, trials, trial, **info):
        self.tracker.start_trial(trial.config["trial_config"])

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.tracker.log_result(trial.config["trial_config"]["trial"]["trial_id"], result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        result = trial.last_result or {}
        self.tracker.end_trial(trial.config["trial_config"]["trial"]["trial_id"], failed=bool(result.get("failed")),
                               reason=result.get("error"))

    def on_trial_error(self, iteration, trials, trial, **info):
        self.tracker.end_trial(trial.config["trial_config"]["trial"]["trial_id"], failed=True, reason=str(trial.error_file))
