"""scripts/local_cluster.py uses only a root it creates (or an empty one of ours), never a
folder, token or link someone else prepared, and never writes through a symbolic link.
These refusals happen before any Ray process starts."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "local_cluster.py"


def cluster(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=120)


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.read_text() if p.is_file() and not p.is_symlink() else None)
            for p in folder.rglob("*")}


@pytest.fixture
def short_tmp():
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="ftr-", dir="/tmp"))  # short: Ray's socket paths are limited
    yield d
    import shutil

    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("prepare, words", [
    (lambda r: (r.mkdir(), (r / "auth_token").write_text("a token someone else chose")), "not empty"),
    (lambda r: (r.mkdir(), (r / "notes.txt").write_text("mine")), "not empty"),
    (lambda r: (r.mkdir(), os.chmod(r, 0o777)), "writable by other users"),
])
def test_up_refuses_a_root_it_did_not_create(short_tmp, prepare, words):
    root = short_tmp / "c"
    prepare(root)
    before = snapshot(root)
    for cmd in ("up", "run"):
        extra = ["--", "true"] if cmd == "run" else []
        result = cluster(cmd, "--root", str(root), *extra)
        assert result.returncode == 2 and words in result.stderr, result.stderr[-2000:]
        assert len(result.stderr.strip().splitlines()) == 1
    assert snapshot(root) == before


def test_up_refuses_a_symlinked_root_and_writes_nothing_through_it(short_tmp):
    target = short_tmp / "target"
    target.mkdir(mode=0o700)
    (short_tmp / "link").symlink_to(target)
    result = cluster("up", "--root", str(short_tmp / "link"))
    assert result.returncode == 2 and "symbolic link" in result.stderr, result.stderr[-2000:]
    assert list(target.iterdir()) == []


def test_down_refuses_a_state_file_that_is_a_link_or_names_another_root(short_tmp):
    root = short_tmp / "c"
    root.mkdir(mode=0o700)
    elsewhere = short_tmp / "elsewhere.json"
    elsewhere.write_text(json.dumps({"root": "/tmp/someone-else", "nodes": []}))
    (root / "cluster.json").symlink_to(elsewhere)
    result = cluster("down", "--root", str(root))
    assert result.returncode == 2 and "cluster.json" in result.stderr, result.stderr[-2000:]
    (root / "cluster.json").unlink()
    (root / "cluster.json").write_text(elsewhere.read_text())
    result = cluster("down", "--root", str(root))
    assert result.returncode == 2 and "not a cluster of ours" in result.stderr, result.stderr[-2000:]


def _local_cluster_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("local_cluster", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    module = sys.modules.setdefault("local_cluster", module)  # its dataclasses look their module up
    if not hasattr(module, "trial_results"):
        spec.loader.exec_module(module)
    return module


def _state_with(trial_id: str, pid: int) -> str:
    trial = json.dumps({"custom_trial_name": trial_id})
    metadata = json.dumps({"last_result": {"pid": pid, "node_id": "n1"}})
    return json.dumps({"trial_data": [[trial, metadata]]})


def test_a_killed_drivers_cut_off_experiment_state_is_skipped_for_the_resumed_one(tmp_path):
    """Tune writes ``experiment_state-<session>.json`` in place, so a driver killed with kill -9
    while writing leaves it empty; the resumed driver's later file holds every trial. Reading
    the search skips the cut-off file; a search whose newest file is cut off is an error that
    names it."""
    lc = _local_cluster_module()
    search = tmp_path / "runs" / "search"
    search.mkdir(parents=True)
    killed = search / "experiment_state-2026-01-01_00-00-00.json"
    resumed = search / "experiment_state-2026-01-01_00-05-00.json"
    killed.write_text("")
    resumed.write_text(_state_with("stage2-a", 42))
    os.utime(killed, (1_000, 1_000))
    os.utime(resumed, (2_000, 2_000))
    assert lc.trial_results(tmp_path / "runs") == {"stage2-a": {"pid": 42, "node_id": "n1"}}

    os.utime(killed, (3_000, 3_000))  # now the cut-off file is the search's newest
    with pytest.raises(ValueError, match="experiment_state-2026-01-01_00-00-00.json"):
        lc.trial_results(tmp_path / "runs")

    other = tmp_path / "runs" / "other"  # another search's file does not excuse this one's
    other.mkdir()
    (other / "experiment_state-x.json").write_text(_state_with("stage1-b", 7))
    os.utime(other / "experiment_state-x.json", (4_000, 4_000))
    with pytest.raises(ValueError, match="newest Tune experiment state of its search"):
        lc.trial_results(tmp_path / "runs")
