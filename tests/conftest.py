"""Fixtures shared across test files."""

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from smoke_search import cli, finish


@dataclass
class SmokeSearch:
    """A finished smoke search: its working folder (runs/, mlflow.db), output and wall time."""

    work: Path
    out: str
    seconds: float


@pytest.fixture(scope="session")
def smoke_search(tmp_path_factory) -> SmokeSearch:
    """One real smoke-profile search for the whole session (about 2 minutes on 2 cores):
    every test that needs a finished search reads this one instead of running its own.
    Tests must not change what it wrote."""
    work = tmp_path_factory.mktemp("e2e") / "plain"
    work.mkdir()
    t0 = time.time()
    out = finish(cli(work))
    return SmokeSearch(work, out, time.time() - t0)
