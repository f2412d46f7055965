"""``--pack 4`` against ``--pack 1``: the real search CLI on the smoke profile, twice.

A pack trains its members as one program (focus_tune.sim.packed); on a CPU a member is bit for
bit the trial it replaces, so the two searches must record the same scores, make the same
decisions and report the same test metrics. Every member keeps its own MLflow run (FINISHED,
with its metrics and a checkpoint of its own), and a member whose loss becomes infinite (a
constant of 1e38) fails alone in its pack, as it fails alone without packing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN = "hero-smoke-seed0"
DIVERGES = "constant-1e+38-s0"


def _space(folder: Path) -> Path:
    """hero.yaml with a second smoke constant so large that its training loss overflows."""
    text = (REPO / "focus_tune" / "search_spaces" / "hero.yaml").read_text()
    assert text.count("constants: [0.01]\n") == 1
    path = folder / "hero-diverging.yaml"
    path.write_text(text.replace("constants: [0.01]\n", "constants: [0.01, 1.0e+38]\n"))
    return path


@pytest.fixture(scope="module")
def searches(tmp_path_factory):
    root = tmp_path_factory.mktemp("pack")
    space = _space(root)
    out = {}
    for pack in (1, 4):
        work = root / f"pack{pack}"
        work.mkdir()
        # One trial at a time for the packs: with trials free the searcher gives each training its own.
        cmd = [sys.executable, "-m", "focus_tune.search", "--game", "hero", "--profile", "smoke", "--space",
               str(space), "--data-root", str(root / "data"), "--pack", str(pack),
               *(["--max-concurrent", "1"] if pack > 1 else [])]
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=900,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"))
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
        out[pack] = work
    return out


def _state(work: Path) -> dict:
    return json.loads((work / "runs" / RUN / "search_state.json").read_text())


def _packs(work: Path) -> list[str]:
    """The trials that were packs: named after their first member, + how many more."""
    return [p.name for p in (work / "runs" / RUN / "search").iterdir() if p.is_dir() and PACK.search(p.name)]


PACK = re.compile(r"-s\d+\+\d+$")


def test_packs_were_formed(searches):
    packs = _packs(searches[4])
    assert any(t.startswith("stage1-") and t.endswith("+3") for t in packs), packs
    assert not _packs(searches[1])


def test_same_scores_decisions_and_test_metrics(searches):
    one, four = _state(searches[1]), _state(searches[4])
    assert four["results"] == one["results"]
    assert one["results"][DIVERGES] is None  # failed alone, in both
    assert sum(v is None for v in one["results"].values()) == 1
    assert four["finals"] == one["finals"]
    for name in ("results.md", "search.json"):
        assert (searches[4] / "runs" / RUN / "report" / name).read_text() == \
            (searches[1] / "runs" / RUN / "report" / name).read_text()


def test_every_member_has_its_own_finished_run(searches):
    from mlflow.tracking import MlflowClient

    work = searches[4]
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    exp = client.get_experiment_by_name("focus-tune/hero")
    runs = {r.data.tags.get("trial_id"): r for r in client.search_runs([exp.experiment_id], max_results=200)}
    state = _state(work)
    for tid, score in state["results"].items():
        run = runs[tid]
        if score is None:
            assert run.info.status == "FAILED", tid
            continue
        assert run.info.status == "FINISHED", tid
        assert run.data.metrics["val/ece"] == pytest.approx(score) or tid.startswith("final"), tid
        assert "train/loss" in run.data.metrics, tid
        checkpoint = run.data.tags["checkpoint"]
        assert checkpoint == state["checkpoints"][tid]
        assert Path(checkpoint).is_dir(), checkpoint
        if PACK.search(Path(checkpoint).parent.parent.name):  # a member: its own folder in its pack's checkpoint
            assert Path(checkpoint).name == tid and (Path(checkpoint) / "checkpoint.pt").is_file(), checkpoint
