"""The trainable resumed from the checkpoint of its last epoch (saved, but the driver stopped
before it recorded the result) reports that final result again, with the same numbers,
instead of reporting nothing (which left the trial to be handed out again and again)."""

import json
import shutil
import types

import pytest
import ray
from ray import tune

from focus_tune.config.space import load_search_config, space_path
from focus_tune.data import ensure_dataset, load_dataset
from focus_tune.procedure.job import INFLUENCE_KEY, MEMBERS_KEY, PackJob, TrialJob
from focus_tune.procedure.plan import SearchPlan
from focus_tune.search import trainable
from focus_tune.search.checks import load_splits
from focus_tune.sim.model_io import DataInfo


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
    plan = SearchPlan(cfg.grid, length=dataset.manifest.length, seed=0, final_seeds=cfg.final_seeds)
    spec = plan.next_batch({}).trials[0]
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


def _pack_setup(tmp_path, members: int = 3):
    cfg = load_search_config(space_path("facemed"), "smoke")
    dataset = load_dataset(ensure_dataset("facemed", "smoke", tmp_path / "data", seed=0))
    splits = load_splits(dataset)
    specs = SearchPlan(cfg.grid, length=dataset.manifest.length, seed=0,
                       final_seeds=cfg.final_seeds).next_batch({}).trials[:members]
    jobs = tuple(TrialJob(spec, cfg.train, DataInfo.of(dataset.manifest), threads=1) for spec in specs)
    return cfg, splits, jobs


def _members(report: dict) -> dict:
    return {tid: {k: v for k, v in r.items() if not k.startswith("time/") and k != "train/samples_per_s"}
            for tid, r in json.loads(report[MEMBERS_KEY]).items()}


def test_a_pack_retried_from_its_checkpoint_goes_on_as_uninterrupted(fake_tune, tmp_path):
    """A retry continues every member from the pack's last checkpoint: the later epochs
    report what the uninterrupted pack reported (on a CPU, bit for bit)."""
    cfg, splits, jobs = _pack_setup(tmp_path)
    config = {"job": PackJob(jobs)}
    trainable.run_trial(config, splits)
    whole = fake_tune["reports"]
    assert [r["epoch"] for r, _ in whole] == list(range(1, cfg.train.epochs + 1))
    assert all(set(json.loads(r[MEMBERS_KEY])) == {j.trial_id for j in jobs} for r, _ in whole)
    _, after_first = whole[0]
    assert sorted(p.name for p in after_first.iterdir()) == sorted(j.trial_id for j in jobs)

    fake_tune["reports"] = []
    fake_tune["checkpoint"] = tune.Checkpoint.from_directory(str(after_first))
    trainable.run_trial(config, splits)
    again = fake_tune["reports"]
    assert [r["epoch"] for r, _ in again] == list(range(2, cfg.train.epochs + 1))
    for (a, _), (b, _) in zip(again, whole[1:]):
        assert _members(a) == _members(b)


def test_a_member_resumes_alone_from_its_folder(fake_tune, tmp_path):
    """A resumed search runs a member that has a checkpoint alone (``resume_from``: its folder
    in the pack's checkpoint); it goes on as it would have in its pack."""
    cfg, splits, jobs = _pack_setup(tmp_path)
    trainable.run_trial({"job": PackJob(jobs)}, splits)
    whole = fake_tune["reports"]
    _, after_first = whole[0]
    member = jobs[1]
    fake_tune["reports"] = []
    resumed = TrialJob(member.spec, member.train, member.data, resume_from=str(after_first / member.trial_id),
                       threads=1)
    trainable.run_trial({"job": resumed}, splits)
    alone = fake_tune["reports"]
    assert [r["epoch"] for r, _ in alone] == list(range(2, cfg.train.epochs + 1))
    for (a, _), (b, _) in zip(alone, whole[1:]):
        packed = _members(b)[member.trial_id]
        assert {k: v for k, v in a.items() if k in packed} == packed


def test_each_split_goes_to_the_device_once_per_trial(fake_tune, tmp_path, monkeypatch):
    """A 'none' final (validation every epoch, the test, the temperature's validation grid) and
    a pack of two: the train, val and test splits are each moved to the device once."""
    import dataclasses

    from focus_tune.sim.device_split import DeviceSplit

    cfg, splits, jobs = _pack_setup(tmp_path, members=2)
    finals = tuple(TrialJob(dataclasses.replace(j.spec, stage="final", family="none", trial_id=f"final-{k}"), j.train,
                            j.data, threads=1) for k, j in enumerate(jobs))
    moved = []
    to_device = DeviceSplit.from_arrays.__func__

    def counted(cls, split, *args, **kwargs):
        moved.append(split.name)
        return to_device(cls, split, *args, **kwargs)

    monkeypatch.setattr(DeviceSplit, "from_arrays", classmethod(counted))
    for job in (finals[0], PackJob(finals)):
        moved.clear()
        trainable.run_trial({"job": job}, splits)
        assert sorted(moved) == ["test", "train", "val"], job
    assert all("temperature-scaled/test/marginal/ece" in json.loads(r[MEMBERS_KEY])[f.trial_id]
               for r, _ in fake_tune["reports"][-1:] for f in finals)
