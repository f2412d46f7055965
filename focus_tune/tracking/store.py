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


def ui_command(uri: str) -> str:
    """How to look at a store: the ``mlflow ui`` command for a local one, the address of a server."""
    if uri.startswith(("http://", "https://")):
        return f"open {uri}"
    return f"mlflow ui --backend-store-uri {uri} --workers 1  (then open http://127.0.0.1:5000)"


def _sqlite_file(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///"):].split("?")[0])


def _is_metric(key: str, value) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        and "/" in key  # our namespaced keys (val/ece, train/loss, test/marginal/ece, time/...)
    )
