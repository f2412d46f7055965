"""Training and evaluation in plain PyTorch: no Ray, no MLflow.

``train_one_epoch`` takes its dependencies as arguments (torchvision-references style);
``evaluate`` draws M Monte Carlo sequences per item and returns the paper's metrics under
the keys used everywhere else (Tune results, MLflow, reports): ``marginal/ece``,
``conditional/auc``, ``interval/coverage``, ...
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import numpy as np
import torch

from . import metrics, montecarlo
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


@dataclass
class Split:
    """Tensors of one split, already on the training device.

    images: uint8 [N, C, H, W]; sequences: long [N, L]; time_to_event: long [N];
    exact_marginals: float [N, L, c] or None (only where the data has ground truth).
    """

    images: torch.Tensor
    sequences: torch.Tensor
    time_to_event: torch.Tensor
    exact_marginals: np.ndarray | None = None

    @classmethod
    def from_arrays(cls, split, device="cpu", items: int | None = None) -> "Split":
        """From a data split with numpy arrays; moved to ``device`` once. ``items`` keeps the first n."""
        n = len(split.sequences) if items is None else min(items, len(split.sequences))
        exact = None if split.exact_marginals is None else np.asarray(split.exact_marginals[:n])
        return cls(
            images=torch.as_tensor(np.asarray(split.images[:n])).to(device),
            sequences=torch.as_tensor(np.asarray(split.sequences[:n]), dtype=torch.long).to(device),
            time_to_event=torch.as_tensor(np.asarray(split.time_to_event[:n]), dtype=torch.long),
            exact_marginals=exact,
        )

    def __len__(self) -> int:
        return len(self.sequences)


def train_one_epoch(
    model: Simulator,
    optimizer: torch.optim.Optimizer,
    data: Split,
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


def draw_samples(
    model: Simulator,
    images: torch.Tensor,
    num_samples: int,
    length: int,
    generator: torch.Generator,
    absorbing: int | None,
    prefix: list[int] | None = None,
    chunk: int = 64,
) -> torch.Tensor:
    """Monte Carlo sequences for every image, ``chunk`` images at a time: [N, M, L] on CPU."""
    out = [
        model.sample(images[i : i + chunk], num_samples, length, generator, prefix=prefix, absorbing=absorbing).cpu()
        for i in range(0, len(images), chunk)
    ]
    return torch.cat(out)


def _prefixed(stats: dict, prefix: str) -> dict[str, float]:
    return {f"{prefix}/{k}": v for k, v in stats.items() if k != "per_entry"}


def evaluate(
    model: Simulator,
    data: Split,
    num_samples: int,
    event: int,
    generator: torch.Generator,
    n_bins: int = 10,
    alpha: float = 0.9,
    condition_class: int | None = None,
    per_entry: bool = False,
) -> dict:
    """Monte Carlo evaluation: marginal metrics, interval metrics and, if asked, conditional ones.

    Marginal P(Y_i | x) and the time-to-event interval come from one set of M samples per
    item. With ``condition_class`` = b, a second set is drawn with Y_1 forced to b (exact
    conditioning) and scored on the items whose true Y_1 is b. Where the data has exact
    marginals, ``marginal/rmse`` (to the truth) and ``marginal/ece_floor`` (the ECE that the
    exact probabilities score on the same labels) are added. With ``per_entry`` the
    entry-level arrays are returned under ``"per_entry"`` (for reports and plots).
    """
    model.eval()
    c, L = model.num_classes, data.sequences.shape[1]
    labels = data.sequences.cpu().numpy()
    samples = draw_samples(model, data.images, num_samples, L, generator, absorbing=event)
    probs = montecarlo.marginal_probs(samples, c)  # (N, L, c)
    marginal = metrics.sequence_metrics(probs, labels, n_bins)
    out = _prefixed(marginal, "marginal")
    extras: dict[str, np.ndarray] = {"marginal": marginal["per_entry"]}

    times = montecarlo.time_to_event(samples, event)  # (N, M)
    lo, hi = montecarlo.interval(times, alpha)
    true_t = data.time_to_event.cpu().numpy()
    out.update(_prefixed(metrics.interval_metrics(lo, hi, times.mean(axis=1), true_t), "interval"))
    extras["interval"] = {"lo": lo, "hi": hi, "point": times.mean(axis=1), "true": true_t}

    if data.exact_marginals is not None:
        out["marginal/rmse"] = metrics.rmse_to_truth(probs, data.exact_marginals)
        floor = metrics.sequence_metrics(data.exact_marginals, labels, n_bins)
        out["marginal/ece_floor"] = floor["ece"]
        extras["floor"] = floor["per_entry"]

    if condition_class is not None:
        keep = np.flatnonzero(labels[:, 0] == condition_class)
        out["conditional/items"] = float(len(keep))
        if len(keep) > 1:
            idx = torch.as_tensor(keep, device=data.images.device)
            cond = draw_samples(model, data.images[idx], num_samples, L, generator, event, prefix=[condition_class])
            # Entry 1 is forced (certain) for every item: score entries 2..L only.
            cprobs = montecarlo.marginal_probs(cond, c)[:, 1:]
            conditional = metrics.sequence_metrics(cprobs, labels[keep, 1:], n_bins)
            out.update(_prefixed(conditional, "conditional"))
            extras["conditional"] = conditional["per_entry"]
    if per_entry:
        out["per_entry"] = extras
        out["probs"] = probs
    return out
