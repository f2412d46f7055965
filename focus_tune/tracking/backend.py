"""Where the MLflow store is and how a user opens it."""

from __future__ import annotations

import logging
import math
import os
import shutil
import sqlite3
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


def cache_dir() -> Path:
    """Where focus-tune keeps what it can rebuild: ``$XDG_CACHE_HOME/focus-tune`` (default ~/.cache)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "focus-tune"


def store_template() -> Path:
    """An empty MLflow SQLite store at the installed MLflow's schema head, made once per MLflow
    version by MLflow itself (``SqlAlchemyStore``: its 60-odd migrations, ~3.5 s) and without
    its default experiment, which MLflow adds on opening a store that lacks it (with the
    artifact location and time of that store). Written to a temporary file and renamed."""
    import mlflow
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    template = cache_dir() / f"mlflow-{mlflow.__version__}-empty-store.db"
    if template.is_file():
        return template
    template.parent.mkdir(parents=True, exist_ok=True)
    tmp = template.with_name(f".{template.name}.{os.getpid()}.tmp")
    try:
        store = SqlAlchemyStore(f"sqlite:///{tmp}", str(template.parent / "artifacts-unused"))
        store.engine.dispose()
        con = sqlite3.connect(tmp)
        with con:
            con.execute("DELETE FROM experiments WHERE experiment_id = 0")
        con.close()
        os.replace(tmp, template)
    finally:
        tmp.unlink(missing_ok=True)
    return template


def create_local_store(uri: str) -> bool:
    """A local SQLite store that does not exist yet starts as a copy of :func:`store_template`,
    so that only the first store of an MLflow version pays for the migrations (a replication
    makes one store per search; the tests make dozens). The copy is linked into place only if
    nothing is there yet, so a store another process just made is never replaced. Anything
    unusual (another URI, an existing file, a missing folder, no cache) leaves the store to
    MLflow, which creates it as it always does. True when a copy was put in place."""
    path = _sqlite_file(uri)
    if path is None or str(path) in ("", ":memory:") or path.exists() or not path.parent.is_dir():
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(store_template(), tmp)
        os.link(tmp, path)  # fails if a store appeared meanwhile: that one is kept
        return True
    except Exception:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def _is_metric(key: str, value) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        and "/" in key  # our namespaced keys (val/ece, train/loss, test/marginal/ece, time/...)
    )
