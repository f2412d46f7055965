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

from .lineage import DATASET_CONTEXT, WINNER_TAG, context_tags, dataset_entity, manifest_digest
from .models import ModelNotFound, default_input_example, download_model, fetch_model, model_signature
from .outage import PATIENCE_ENV, TrackingUnavailable
from .runs import Tracker
from .store import tracking_uri, ui_command

__all__ = ["DATASET_CONTEXT", "PATIENCE_ENV", "WINNER_TAG", "ModelNotFound", "Tracker", "TrackingUnavailable", "context_tags",
           "dataset_entity", "default_input_example", "download_model", "fetch_model", "manifest_digest",
           "model_signature", "tracking_uri", "ui_command"]
