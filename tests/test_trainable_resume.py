"""The trainable resumed from the checkpoint of its last epoch (saved, but the driver stopped
before it recorded the result) reports that final result again, with the same numbers,
instead of reporting nothing (which left the trial to be handed out again and again)."""

import shutil
import types

import pytest
import ray
from ray import tune

from focus_tune import trainable
from focus_tune.config import load_search_config, space_path
from focus_tune.data import ensure_dataset, load_dataset
from focus_tune.job import INFLUENCE_KEY, DataInfo, TrialJob
from focus_tune.plan import SearchPlan
from focus_tune.search.checks import load_splits


@pytest.fixture
def fake_tune(monkeypatch, tmp_path):
    """tune.report / tune.get_checkpoint without Ray: reports are kept, with a copy of each
    checkpoint folder (the trainable deletes its own after reporting)."""
    calls = {"reports": [], "checkpoint": None, "kept": 0}

    def report(result, checkpoint=None):
        kept = None
        if checkpoint is not None:
            calls["kept"] += 1
            kept = tmp_path / f"ckpt{calls['kept']}"
            shutil.copytree(checkpoint.path, kept)
        calls["reports"].append((dict(result), kept))

    monkeypatch.setattr(tune, "report", report)
    monkeypatch.setattr(tune, "get_checkpoint", lambda: calls["checkpoint"])
    monkeypatch.setattr(ray, "get_runtime_context", lambda: types.SimpleNamespace(get_node_id=lambda: "node"))
    return calls


def test_a_trial_resumed_at_its_last_epoch_reports_the_same_final_result(fake_tune, tmp_path):
    cfg = load_search_config(space_path("facemed"), "smoke")
    dataset = load_dataset(ensure_dataset("facemed", "smoke", tmp_path / "data", seed=0))
    splits = load_splits(dataset)
    spec = SearchPlan(cfg.grid, length=dataset.manifest.length, seed=0, final_seeds=cfg.final_seeds).next_batch({}).trials[0]
    config = {"job": TrialJob(spec, cfg.train, DataInfo.of(dataset.manifest), threads=1)}

    trainable.run_trial(config, splits)
    reports = fake_tune["reports"]
    assert [r["epoch"] for r, _ in reports] == list(range(1, cfg.train.epochs + 1))
    final, folder = reports[-1]

    fake_tune["reports"] = []
    fake_tune["checkpoint"] = tune.Checkpoint.from_directory(str(folder))
    trainable.run_trial(config, splits)
    (again, _), = fake_tune["reports"]
    assert again["epoch"] == cfg.train.epochs
    assert again["score"] == final["score"] and again[INFLUENCE_KEY] == final[INFLUENCE_KEY]
    assert {k: v for k, v in again.items() if k.startswith("val/")} == {
        k: v for k, v in final.items() if k.startswith("val/")}
