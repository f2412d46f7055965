"""A training in plain PyTorch: the one loop over epochs, a trial's validation and checkpoints.

torchvision's references keep ``train_one_epoch`` and ``evaluate`` plain and a thin ``main``
wires them; here :func:`epochs` is that loop (the only caller of
:func:`~focus_tune.sim.train.train_one_epoch`), :func:`validate` the validation, and
:func:`train_trial` a search trial: it yields each epoch's :class:`Epoch` (its result and, at an
evaluation, its checkpoint state), which the Ray adapter (``search.trainable``) reports. The
recipe stage drives :func:`epochs` and :func:`validate` itself.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from ..config.space import TrainConfig
from ..errors import NonFiniteLoss
from ..names import SELECT_KEYS
from ..procedure.job import INFLUENCE_KEY, TrialJob, encode_influence
from ..scoring.evaluation import Scoring, evaluation_generator
from ..scoring.metrics import item_influence
from ..sim.device_split import DeviceSplit
from ..sim.model import Simulator
from ..sim.model_io import DataInfo, build_model
from ..sim.train import LearningRate, seed_everything, train_one_epoch
from .checkpoint import checkpoint_state
from .final import score_final, split_weights
from .on_device import TrialSplits


@dataclass
class Epoch:
    """What a training yields after an epoch: its result (the metric keys: ``train/loss``,
    ``val/ece``, ``test/marginal/ece`` ...) and, where it checkpoints, what the checkpoint holds:
    the state (:func:`~focus_tune.trial.checkpoint.checkpoint_state`) and a final's per-entry
    test arrays (:func:`~focus_tune.trial.final.score_final`)."""

    result: dict
    state: dict | None = None
    per_entry: dict | None = None

    @property
    def saves(self) -> bool:
        """Whether this epoch has a checkpoint to write."""
        return self.state is not None or self.per_entry is not None


def new_model(train: TrainConfig, info: DataInfo, device: torch.device) -> Simulator:
    """The untrained simulator on ``device`` (channels_last on a GPU, with ``model.encode``'s
    channels_last inputs); its initial weights come from the global RNG (seed it first)."""
    model = build_model(train, info).to(device)
    return model.to(memory_format=torch.channels_last) if device.type == "cuda" else model


@dataclass
class Training:
    """What one training carries from epoch to epoch: the model, its Adam, its batch-order generator."""

    model: Simulator
    optimizer: torch.optim.Optimizer
    generator: torch.Generator

    @classmethod
    def start(cls, train: TrainConfig, info: DataInfo, seed: int,
              device: torch.device = torch.device("cpu")) -> "Training":
        """A fresh training: everything seeded by ``seed`` first, so the initial weights and the
        batch order are the seed's."""
        generator = seed_everything(seed)
        model = new_model(train, info, device)
        return cls(model, torch.optim.Adam(model.parameters(), lr=train.lr), generator)  # no weight decay (paper)

    def resume(self, state: dict) -> int:
        """Continue from a checkpoint state (model, optimizer where kept, RNG); returns its epoch."""
        self.model.load_state_dict(state["model"])
        if state["optimizer"] is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        return state["epoch"]


def epochs(training: Training, split: DeviceSplit, lambdas: torch.Tensor, train: TrainConfig, start: int = 0,
           before: Callable[[int], None] | None = None) -> Iterator[dict]:
    """Train epochs ``start + 1`` .. ``train.epochs`` on ``split`` with eq. 2's ``lambdas`` [L];
    yield each one's result: ``train/loss``, ``train/samples_per_s``, ``time/train_s``, ``epoch``.

    The learning rate is ``train.lr_schedule``'s at each step of the whole training (a pure
    function of the step: a resumed training needs nothing more); bf16 autocast on a GPU where
    ``train.precision`` asks for it. ``before(epoch)`` runs before each epoch's training (a test
    seam: fault injection). Raises :class:`~focus_tune.errors.NonFiniteLoss` as
    ``train_one_epoch`` does.
    """
    lr = LearningRate.of(train.lr, train.lr_schedule, train.epochs, len(split), train.batch_size)
    batches = math.ceil(len(split) / train.batch_size)
    autocast = split.images.device.type == "cuda" and train.precision == "bf16"
    for epoch in range(start + 1, train.epochs + 1):
        if before is not None:
            before(epoch)
        t0 = time.perf_counter()
        result = train_one_epoch(training.model, training.optimizer, split, lambdas, train.batch_size,
                                 training.generator, autocast=autocast, lr=lr, step=(epoch - 1) * batches)
        result["time/train_s"] = time.perf_counter() - t0
        result["epoch"] = epoch
        yield result


def validate(model: Simulator, split: DeviceSplit, train: TrainConfig, info: DataInfo, seed: int, epoch: int) -> dict:
    """The validation after ``epoch``: :func:`~focus_tune.scoring.evaluation.evaluate` with
    ``Scoring.of(train, "val")`` and its per-entry arrays and probabilities; deterministic, a
    fresh generator per epoch (``evaluation_generator(seed, epoch)``)."""
    return Scoring.of(train, "val").evaluate(model, split, info.event, evaluation_generator(seed, epoch),
                                             per_entry=True)


def train_trial(job: TrialJob, splits: TrialSplits, device: torch.device, resume: dict | None = None,
                on_epoch: Callable | None = None) -> Iterator[Epoch]:
    """A search trial's training (``job``: its schedule, seed, ``TrainConfig``): yields every
    epoch's :class:`Epoch`, validated and checkpointed every ``eval_every`` epochs, at the last
    and (a racing search's candidate) at the race epoch; a final's last epoch adds its test
    metrics (:func:`validation_step`).

    ``resume``: a checkpoint state to continue from. One of the last epoch (saved, its result
    never recorded: the driver stopped in between) yields that final evaluation again, which
    gives the same numbers. A loss that turns non-finite ends the training with a result marked
    ``failed`` (retrying would meet the same NaN). ``on_epoch(job, epoch, model, resumed)`` runs
    before each epoch's training (a test seam: fault injection).
    """
    train, info, seed = job.train, job.data, job.spec.seed
    training = Training.start(train, info, seed, device)
    lambdas = job.spec.schedule.tensor()
    start = 0 if resume is None else training.resume(resume)
    # A search trial of a racing search validates at the race epoch too (focus_tune.procedure.racing).
    race_at = train.race_at if train.racing != "off" and not job.evaluate_test else None

    def evaluate(epoch: int, result: dict) -> Epoch:
        t0 = time.perf_counter()
        val = validate(training.model, splits.val, train, info, seed, epoch)
        return validation_step(result, val, time.perf_counter() - t0, epoch, job, splits, training.model,
                               training.optimizer, training.generator, race_at)

    if start >= train.epochs:
        yield evaluate(train.epochs, {"epoch": train.epochs})
        return
    before = None if on_epoch is None else (lambda epoch: on_epoch(job, epoch, training.model, resume is not None))
    done = start
    try:
        for result in epochs(training, splits.train, lambdas, train, start, before):
            done = result["epoch"]
            if done % train.eval_every == 0 or done == train.epochs or done == race_at:
                yield evaluate(done, result)
            else:
                yield Epoch(result)
    except NonFiniteLoss as err:  # in the epoch after the last one yielded
        yield Epoch({"epoch": done + 1, "failed": 1, "error": str(err)})


def score_trained(job: TrialJob, splits: TrialSplits, device: torch.device, state: dict) -> Epoch:
    """A final that reuses the search trial trained with the same schedule and seed (``state``:
    that trial's last checkpoint): its test metrics only, with the trial's epoch and score (its
    training and validation metrics are that trial's; MLflow copies them into the final's run)."""
    train = job.train
    training = Training.start(train, job.data, job.spec.seed, device)
    training.model.load_state_dict(state["model"])
    result = {"epoch": state["epoch"], "score": float(state["metrics"][f"val/{SELECT_KEYS[train.select_by]}"])}
    metrics, per_entry = final_scores(training.model, splits, job)
    result.update(metrics)
    return Epoch(result, per_entry=per_entry)


def final_scores(model: Simulator, splits: TrialSplits, job: TrialJob) -> tuple[dict, dict]:
    """A final's test scoring (:func:`~focus_tune.trial.final.score_final`): a ``none`` final's
    with its temperature rows (the time-dependent one over the schedule's ``k1``)."""
    return score_final(model, splits, job.train, job.data, job.spec.seed, with_temperature=job.spec.family == "none",
                       k1=job.k1)


def validation_step(result: dict, val: dict, eval_s: float, epoch: int, job: TrialJob, splits: TrialSplits,
                    model: Simulator, optimizer: torch.optim.Optimizer | dict, generator: torch.Generator,
                    race_at: int | None) -> Epoch:
    """One training's validation after ``epoch`` into its result and its checkpoint: the solo
    trial's step and each pack member's.

    ``val``: :func:`validate`'s result (with its per-entry arrays and probabilities). ``result``
    gains the ``val/`` metrics, the score and, where a stage decides by this evaluation (the
    last epoch's, the race epoch's; finals decide nothing), the validation items' influences;
    the checkpoint keeps the optimizer until the last epoch, and a final's last epoch adds its
    test metrics and per-entry arrays (:func:`~focus_tune.trial.final.score_final`).
    """
    train = job.train
    val.pop("per_entry")
    val.pop("time_pmf", None)
    probs = val.pop("probs")
    last_val = {f"val/{k.removeprefix('marginal/')}": v for k, v in val.items() if k.startswith("marginal/")}
    result.update(last_val)
    result["score"] = float(last_val[f"val/{SELECT_KEYS[train.select_by]}"])
    final = epoch == train.epochs
    if (final or epoch == race_at) and not job.evaluate_test:
        result[INFLUENCE_KEY] = encode_influence(item_influence(
            probs, splits.val.sequences.cpu().numpy(), train.select_by, train.ece_bins,
            weights=split_weights(splits.val)))
    result["time/eval_s"] = eval_s
    state = checkpoint_state(model, optimizer, epoch, generator, last_val, with_optimizer=not final)
    if not (final and job.evaluate_test):
        return Epoch(result, state)
    metrics, per_entry = final_scores(model, splits, job)
    result.update(metrics)
    return Epoch(result, state, per_entry)
