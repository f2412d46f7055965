"""Training in plain PyTorch: no Ray, no MLflow (evaluation: ``evaluation.py``).

``train_one_epoch`` takes its dependencies as arguments (torchvision-references style).
"""

from __future__ import annotations

import random
import time

import numpy as np
import torch

from .device_split import DeviceSplit
from .model import Simulator
from .regularization import regularized_loss


class NonFiniteLoss(FloatingPointError):
    """The training loss became NaN or infinite: the trial cannot continue."""


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
) -> dict[str, float]:
    """One pass over ``data`` in shuffled batches with the loss of eq. 2.

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
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(x, y)  # (B, L, c)
        loss = regularized_loss(logits, y, lambdas)
        if not torch.isfinite(loss):
            raise NonFiniteLoss(f"training loss became {loss.item()} after {seen} samples")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(idx)
        seen += len(idx)
    return {"train/loss": total / seen, "train/samples_per_s": seen / (time.perf_counter() - t0)}
