"""The trial layer (focus_tune.trial), without Ray: a search trial's training yields what the
plain loop computes (train_one_epoch, then the validation with its fresh generator), a
resumed training goes on as the uninterrupted one, a non-finite loss ends it marked failed,
a pack member equals its trial alone, and a final is scored in a process that cannot import
Ray or MLflow. Tiny synthetic data (the three-state chain of tests/chain.py, random images,
right-censored where a test says so), on the CPU: bit for bit."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from chain import draw_chain
from focus_tune.config.space import load_search_config, space_path
from focus_tune.data import Split
from focus_tune.data.sequences import time_to_event
from focus_tune.procedure.job import INFLUENCE_KEY, PackJob, Splits, TrialJob
from focus_tune.procedure.trials import TrialSpec
from focus_tune.scoring.evaluation import Scoring, evaluation_generator
from focus_tune.sim.model_io import DataInfo, build_model
from focus_tune.sim.regularization import LambdaSchedule
from focus_tune.sim.train import LearningRate, seed_everything, train_one_epoch
from focus_tune.trial import TrialSplits, read_checkpoint, score_final, train_pack, train_trial, write_checkpoint

L, EVENT = 12, 2
CPU = torch.device("cpu")
INFO = DataInfo(num_classes=3, event=EVENT, condition_class=0, in_channels=3)
TRAIN = dataclasses.replace(load_search_config(space_path("hero"), "smoke").train, epochs=3, eval_every=2,
                            num_samples=8, val_items=None, test_items=None, batch_size=8)


def _split(name: str, n: int, seed: int, censored: bool) -> Split:
    rng = np.random.default_rng(seed)
    seq = draw_chain(n, 1, L, rng)[:, 0]
    # A third of the items censored early, the rest observed to the end: G(t) > 0 at every entry.
    lengths = np.where(rng.random(n) < 1 / 3, rng.integers(2, L // 2, n), L) if censored else None
    images = rng.integers(0, 256, (n, 3, 16, 16), dtype=np.uint8)
    return Split(name, images, seq, time_to_event(seq, EVENT, lengths), None, observed_length=lengths,
                 event_class=EVENT)


def _data(censored: bool = False) -> Splits:
    return Splits(_split("train", 20, 1, censored), _split("val", 16, 2, censored), _split("test", 16, 3, censored))


def _job(trial_id: str = "stage1-l0.05-s0", stage: str = "stage1", family: str = "time-dependent", seed: int = 0,
         schedule: LambdaSchedule | None = None, train=TRAIN) -> TrialJob:
    schedule = schedule or LambdaSchedule([0.05] + [0.0] * (L - 1))
    spec = TrialSpec(trial_id, stage, family, schedule, seed, params={"seed": seed})
    return TrialJob(spec, train, INFO)


def _splits(data: Splits, train=TRAIN) -> TrialSplits:
    return TrialSplits(data, train, INFO, CPU)


def _plain(result: dict) -> dict:
    """A result without its wall-clock keys."""
    return {k: v for k, v in result.items() if not k.startswith("time/") and k != "train/samples_per_s"}


def _same(a: dict, b: dict) -> bool:
    """The same keys and values, a NaN equal to a NaN (an AUC of a split without a positive)."""
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (isinstance(a[k], float) and math.isnan(a[k]) and math.isnan(b[k])) for k in a)


@pytest.mark.parametrize("censored", [False, True])
def test_a_trial_yields_what_the_plain_loop_computes(censored):
    """Each epoch's result is train_one_epoch's loss at the schedule's learning rate, and at an
    evaluation epoch (2 of eval_every 2; 3, the last) the validation of evaluation_generator(seed,
    epoch); its checkpoint holds the weights, the optimizer until the last epoch and the RNG."""
    data, job = _data(censored), _job()
    yielded = list(train_trial(job, _splits(data), CPU))

    gen = seed_everything(0)
    model = build_model(TRAIN, INFO)
    opt = torch.optim.Adam(model.parameters(), lr=TRAIN.lr)
    train, val = _splits(data).train, _splits(data).val
    lr = LearningRate.of(TRAIN.lr, TRAIN.lr_schedule, TRAIN.epochs, len(train), TRAIN.batch_size)
    steps = math.ceil(len(train) / TRAIN.batch_size)
    assert [e.result["epoch"] for e in yielded] == [1, 2, 3]
    for epoch, got in enumerate(yielded, start=1):
        loss = train_one_epoch(model, opt, train, job.spec.schedule.tensor(), TRAIN.batch_size, gen, lr=lr,
                               step=(epoch - 1) * steps)["train/loss"]
        assert got.result["train/loss"] == loss
        if epoch == 1:
            assert got.state is None and not got.saves and "val/ece" not in got.result
            continue
        out = Scoring.of(TRAIN, "val").evaluate(model, val, EVENT, evaluation_generator(0, epoch), per_entry=True)
        assert got.result["val/ece"] == out["marginal/ece"] and got.result["score"] == out["marginal/ece"]
        assert got.result["val/ce"] == out["marginal/ce"]
        assert got.state["epoch"] == epoch and torch.equal(got.state["generator"], gen.get_state())
        assert all(torch.equal(got.state["model"][k], v) for k, v in model.state_dict().items())
        assert (got.state["optimizer"] is None) == (epoch == TRAIN.epochs)
        assert (INFLUENCE_KEY in got.result) == (epoch == TRAIN.epochs)  # the stage decides by the last one


def test_a_resumed_training_goes_on_as_the_uninterrupted_one(tmp_path):
    """Resumed from its epoch-2 checkpoint (written and read back), the training's epoch 3 is
    the uninterrupted one's: the same result, the same weights."""
    data, job = _data(), _job()
    whole = list(train_trial(job, _splits(data), CPU))
    write_checkpoint(str(tmp_path), whole[1].state)
    again = list(train_trial(job, _splits(data), CPU, resume=read_checkpoint(tmp_path)))
    assert [e.result["epoch"] for e in again] == [3]
    assert _same(_plain(again[0].result), _plain(whole[2].result))
    assert all(torch.equal(again[0].state["model"][k], v) for k, v in whole[2].state["model"].items())


def test_a_non_finite_loss_ends_the_training_marked_failed():
    """A loss that turns NaN in epoch 2: epoch 1 as usual, then one result marked failed with
    the reason, and nothing after it."""

    def poison(job, epoch, model, resumed):
        if epoch == 2:
            with torch.no_grad():
                next(model.parameters()).fill_(math.nan)

    yielded = list(train_trial(_job(), _splits(_data()), CPU, on_epoch=poison))
    assert [e.result["epoch"] for e in yielded] == [1, 2]
    failed = yielded[1]
    assert failed.result["failed"] == 1 and "nan" in failed.result["error"]
    assert not failed.saves


def test_a_pack_member_equals_its_trial_alone():
    """Two members of a pack, each against its solo training: every result and checkpoint the
    same (on a CPU a pack runs the solo model's own calls)."""
    data = _data(censored=True)
    jobs = (_job(), _job("constant-0.01-s1", "constant", "constant", 1, LambdaSchedule.constant(0.01, L)))
    packed = list(train_pack(PackJob(jobs), _splits(data), CPU))
    assert [p.epoch for p in packed] == [1, 2, 3] and [p.saves for p in packed] == [False, True, True]
    for job in jobs:
        alone = list(train_trial(job, _splits(data), CPU))
        member = [p.members[job.trial_id] for p in packed]
        assert all(_same(_plain(m.result), _plain(a.result)) for m, a in zip(member, alone))
        assert len(member) == len(alone)
        for m, a in zip(member[1:], alone[1:]):
            assert all(torch.equal(m.state["model"][k], v) for k, v in a.state["model"].items())


def _final(censored: bool) -> dict:
    """A 'none' final through the trial layer: its last epoch's result and per-entry arrays."""
    job = _job("final-none-s0", "final", "none", schedule=LambdaSchedule.none(L))
    last = list(train_trial(job, _splits(_data(censored)), CPU))[-1]
    return {"result": _plain(last.result), "per_entry": last.per_entry}


def test_a_final_is_scored_without_ray_or_mlflow():
    """A 'none' final trained and scored in a process where importing Ray or MLflow fails: its
    last epoch carries the test metrics, the +conformal rows and the temperature baseline, and
    the per-entry arrays its checkpoint keeps; what score_final gives for its weights."""
    code = ("import sys; sys.modules.update(ray=None, mlflow=None); sys.path.insert(0, 'tests'); "
            "import json, test_trial; out = test_trial._final(True); "
            "print(json.dumps({'keys': sorted(out['result']), 'files': sorted(out['per_entry'])}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("test/marginal/ece", "test/data/censored_items", "conformal/test/interval/coverage",
                "temperature-scaled/test/marginal/ece", "temperature-scaled/test/temperature_pooled",
                "temperature-scaled/conformal/test/interval/coverage", "val/ece", "score"):
        assert key in out["keys"], key
    assert INFLUENCE_KEY not in out["keys"]  # a final decides nothing
    assert out["files"] == ["temperature-scaled/test/per_entry", "test_per_entry"]


def test_score_final_is_the_last_epochs_test_scoring():
    """score_final on the final's trained weights gives the test keys its last epoch reported."""
    data = _data()
    job = _job("final-time-dependent-s0", "final", "time-dependent")
    *_, last = train_trial(job, _splits(data), CPU)
    model = build_model(TRAIN, INFO)
    model.load_state_dict(last.state["model"])
    scores, per_entry = score_final(model, _splits(data), TRAIN, INFO, seed=0)
    assert _same(_plain(scores), {k: v for k, v in _plain(last.result).items() if k in scores})
    assert not any(k.startswith("temperature-scaled/") for k in scores)  # only a 'none' final has the baseline
    assert json.dumps(per_entry) == json.dumps(last.per_entry)
