"""Training in plain PyTorch: no Ray, no MLflow (evaluation: ``evaluation.py``).

``train_one_epoch`` takes its dependencies as arguments (torchvision-references style).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import NonFiniteLoss
from ..names import LR_SCHEDULES
from .device_split import DeviceSplit
from .model import Simulator
from .regularization import regularized_loss


@dataclass(frozen=True)
class LearningRate:
    """The learning rate of every optimizer step, a pure function of the step's index (so a
    resumed trial needs nothing saved to continue it).

    ``constant``: ``peak`` throughout (the paper's Adam). ``onecycle``: PyTorch's
    ``OneCycleLR`` with cosine annealing and no momentum cycling: from ``peak / 25`` up to
    ``peak`` over the first 30 % of the steps, then down to ``peak / 25e4`` at the last one
    (``tests/test_train.py`` checks it against ``torch.optim.lr_scheduler.OneCycleLR``).
    ``decay``: ``peak`` as the constant schedule, then the same cosine down to ``peak / 25e4``
    over the last 20 % of the steps, rounded (none in a training of under three steps): the
    constant rate's progress with a steady end (checked against ``CosineAnnealingLR``
    started at the decay's first step).
    """

    peak: float
    total_steps: int
    kind: str = "constant"
    pct_start: float = 0.3
    div_factor: float = 25.0
    final_div_factor: float = 1e4
    pct_decay: float = 0.2

    @classmethod
    def of(cls, lr: float, schedule: str, epochs: int, items: int, batch_size: int) -> "LearningRate":
        """The schedule of a training of ``epochs`` passes over ``items`` in batches of ``batch_size``."""
        if schedule not in LR_SCHEDULES:
            raise ValueError(f"unknown lr schedule {schedule!r}; choose one of {', '.join(LR_SCHEDULES)}")
        return cls(lr, epochs * math.ceil(items / batch_size), schedule)

    def __call__(self, step: int) -> float:
        if self.kind == "constant":
            return self.peak
        initial = self.peak / self.div_factor
        final = initial / self.final_div_factor
        if self.kind == "decay":
            decay_steps = round(self.pct_decay * self.total_steps)
            done = step - (self.total_steps - decay_steps) + 1  # decay steps taken, this one included
            if decay_steps == 0 or done <= 0:
                return self.peak
            start, end, pct = self.peak, final, done / decay_steps
        else:
            warm_end = float(self.pct_start * self.total_steps) - 1
            if step <= warm_end:
                start, end, pct = initial, self.peak, step / warm_end
            else:
                start, end, pct = self.peak, final, (step - warm_end) / (self.total_steps - 1 - warm_end)
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set every parameter group's learning rate (a tensor one in place: a CUDA graph reads it)."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


def seed_everything(seed: int) -> torch.Generator:
    """Seed python, numpy and torch; return a torch.Generator for explicit sampling."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def train_one_epoch(
    model: Simulator,
    optimizer: torch.optim.Optimizer,
    data: DeviceSplit,
    lambdas: torch.Tensor,
    batch_size: int,
    generator: torch.Generator,
    autocast: bool = False,
    lr: LearningRate | None = None,
    step: int = 0,
) -> dict[str, float]:
    """One pass over ``data`` in shuffled batches with the loss of eq. 2.

    ``lr``: the learning rate of each step (None: the optimizer's own, unchanged); ``step``:
    the index of this epoch's first step in the training (``(epoch - 1) * batches``).
    On right-censored data (``data.observed``) only the observed entries enter the loss.

    Returns ``{"train/loss", "train/samples_per_s"}``. Raises :class:`NonFiniteLoss` when
    the loss turns NaN or infinite, rather than training on garbage.
    """
    model.train()
    device = data.images.device
    lambdas = lambdas.to(device)
    order = torch.randperm(len(data), generator=generator).to(device)
    total, seen, t0 = 0.0, 0, time.perf_counter()
    for start in range(0, len(data), batch_size):
        idx = order[start : start + batch_size]
        x, y = data.images[idx], data.sequences[idx]
        observed = None if data.observed is None else data.observed[idx]  # (B, L) on right-censored data
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(x, y)  # (B, L, c)
        loss = regularized_loss(logits, y, lambdas, observed)
        if not torch.isfinite(loss):
            raise NonFiniteLoss(f"training loss became {loss.item()} after {seen} samples")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if lr is not None:
            set_lr(optimizer, lr(step))
        optimizer.step()
        step += 1
        total += loss.item() * len(idx)
        seen += len(idx)
    return {"train/loss": total / seen, "train/samples_per_s": seen / (time.perf_counter() - t0)}
