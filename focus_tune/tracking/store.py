"""Where the MLflow store is and how a user opens it."""

from __future__ import annotations

import logging
import math
from pathlib import Path


# mlflow configures its logger on import; its INFO lines (database migrations) are noise here.
logging.getLogger("mlflow").setLevel(logging.WARNING)


def tracking_uri(uri: str | None) -> str:
    """The given URI, or ``sqlite:///<cwd>/mlflow.db``."""
    if uri:
        return uri
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


UI_ADDRESS = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default


def trials_page(experiment_id: str) -> str:
    """The UI's route to an experiment's runs table (the trials), after the server's address:
    MLflow 3 opens an experiment on its GenAI overview unless asked for its runs."""
    return f"/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def ui_command(uri: str, experiment_id: str | None = None) -> str:
    """How to look at a store: the ``mlflow ui`` command for a local one, the address of a
    server; with ``experiment_id``, the link that opens that experiment's trials table."""
    page = trials_page(experiment_id) if experiment_id is not None else ""
    if uri.startswith(("http://", "https://")):
        return f"open {uri.rstrip('/')}{page}"
    return f"mlflow ui --backend-store-uri {uri} --workers 1  (then open {UI_ADDRESS}{page})"


def _sqlite_file(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///"):].split("?")[0])


def _is_metric(key: str, value) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        and "/" in key  # our namespaced keys (val/ece, train/loss, test/marginal/ece, time/...)
    )
