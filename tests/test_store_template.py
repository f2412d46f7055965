"""A new local MLflow store starts as a copy of an empty, migrated one (tracking.backend): it
must be the store MLflow would have made, and it must never replace a store that exists."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from focus_tune.tracking.backend import create_local_store, store_template


def _contents(db: Path) -> tuple[list, dict]:
    """The schema (every CREATE statement, its clauses as a set: MLflow's own migrations write a
    table's CHECK constraints in an order that differs from one store to the next) and every
    table's rows, experiment 0's times left out."""
    con = sqlite3.connect(db)
    try:
        schema = sorted(((kind, name, sorted(line.strip().rstrip(",") for line in (sql or "").splitlines()))
                         for kind, name, sql in con.execute("SELECT type, name, sql FROM sqlite_master")), key=str)
        rows = {}
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            cols = [c[1] for c in con.execute(f'PRAGMA table_info("{table}")')]
            keep = [c for c in cols if not (table == "experiments" and c in ("creation_time", "last_update_time"))]
            rows[table] = sorted(con.execute(f'SELECT {", ".join(keep)} FROM "{table}"').fetchall(), key=str)
        return schema, rows
    finally:
        con.close()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "focus-tune"


def _open(db: Path) -> None:
    client = MlflowClient(f"sqlite:///{db}")
    client.search_experiments()
    client._tracking_client.store.engine.dispose()


def test_a_store_from_the_template_is_the_store_mlflow_makes(tmp_path, cache, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MLflow puts the default experiment's artifacts under ./mlruns
    by_mlflow, by_template = tmp_path / "mlflow-made.db", tmp_path / "from-template.db"
    _open(by_mlflow)
    assert create_local_store(f"sqlite:///{by_template}")
    assert list(cache.glob("mlflow-*-empty-store.db")) and not list(cache.glob(".*tmp"))
    assert not list(tmp_path.glob(".*tmp"))
    _open(by_template)  # MLflow adds its default experiment, for this store
    assert _contents(by_template) == _contents(by_mlflow)
    schema, rows = _contents(by_template)
    assert rows["experiments"] == [(0, "Default", str(tmp_path / "mlruns" / "0"), "active", "default")]
    # and it is a working store: an experiment and a run go in and come back
    client = MlflowClient(f"sqlite:///{by_template}")
    exp = client.create_experiment("focus-tune/hero")
    run = client.create_run(exp)
    client.log_metric(run.info.run_id, "val/ece", 0.5)
    assert client.get_run(run.info.run_id).data.metrics == {"val/ece": 0.5}


def test_the_template_is_made_once_and_reused(tmp_path, cache):
    first = store_template()
    stamp = first.stat().st_mtime_ns
    assert create_local_store(f"sqlite:///{tmp_path / 'a.db'}")
    assert store_template() == first and first.stat().st_mtime_ns == stamp
    assert (tmp_path / "a.db").read_bytes() == first.read_bytes()


def test_an_existing_store_and_other_uris_are_left_to_mlflow(tmp_path, cache):
    existing = tmp_path / "mine.db"
    existing.write_bytes(b"a store of someone's")
    assert not create_local_store(f"sqlite:///{existing}")
    assert existing.read_bytes() == b"a store of someone's"
    assert not create_local_store(f"sqlite:///{tmp_path / 'no-such-folder' / 'm.db'}")
    assert not (tmp_path / "no-such-folder").exists()
    assert not create_local_store("http://127.0.0.1:5000")
    assert not create_local_store("sqlite:///:memory:")
    assert not list(cache.glob("*.db"))  # nothing to copy: no template was made


def test_a_store_that_appears_meanwhile_is_kept(tmp_path, cache, monkeypatch):
    """Two processes creating the same new store: the one that links second keeps the first's."""
    import focus_tune.tracking.backend as store

    target = tmp_path / "m.db"
    real = store.store_template

    def racing_template():
        path = real()
        target.write_bytes(b"made by the other process")
        return path

    monkeypatch.setattr(store, "store_template", racing_template)
    assert not create_local_store(f"sqlite:///{target}")
    assert target.read_bytes() == b"made by the other process"
    assert not list(tmp_path.glob(".*tmp"))


def test_no_usable_cache_leaves_the_store_to_mlflow(tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert not create_local_store(f"sqlite:///{tmp_path / 'm.db'}")
    assert not (tmp_path / "m.db").exists()
    assert os.listdir(tmp_path) == ["not-a-folder"]
