"""MLflow tracking: the one package that logs to MLflow (and it imports no Ray).

One experiment per scenario, one parent run per search, and one nested child run per
trial, written from the driver (the search's Ray Tune callback calls :class:`Tracker`):
workers never need the tracking URI, which is what makes the same code work on a cluster.

Lineage: every run carries MLflow's own context tags (git commit, source, user), resolved
by MLflow's context registry as ``mlflow.start_run`` would; the dataset is an input of the
parent run and of every trial's run, named with a digest of its manifest; a final model
is a logged model with a signature, an input example and its test metrics; the run of
each stage's winner is tagged ``winner_of``.

Modules: ``runs`` (``Tracker``: the parent run, a run per trial, logged models), ``lineage``
(context tags, the dataset input), ``models`` (signatures, finding and downloading a logged
model), ``outage`` (a tracking server that goes away is waited for), ``backend`` (where the
store is, how to open its UI).

Imports: MLflow, ``interrupt`` and the base modules (``errors`` among them); nothing of the
search, report or predict. Besides it only ``replicate`` (its record and analysis) imports MLflow.
"""

from ..lazy import exports

# Each public name -> the module of this package that defines it (``..errors``: the project's
# errors, focus_tune.errors), imported on first use (PEP 562), so that importing the package
# imports none of them.
_HOME = {
    "DATASET_CONTEXT": "lineage", "WINNER_TAG": "lineage", "context_tags": "lineage", "dataset_entity": "lineage",
    "manifest_digest": "lineage",
    "ModelNotFound": "..errors", "TrackingUnavailable": "..errors",
    "default_input_example": "models", "download_model": "models",
    "fetch_model": "models", "model_signature": "models",
    "PATIENCE_ENV": "outage",
    "Tracker": "runs",
    "tracking_uri": "backend", "ui_command": "backend",
}
__all__ = sorted(_HOME)

__getattr__, __dir__ = exports(__name__, _HOME, globals())
