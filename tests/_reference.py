"""Slow, obviously correct implementations that the fast paths are checked against.

Tests assert that the vectorized code gives the same numbers; ``benchmarks/`` prints how
much faster it is. Nothing in the training or search path calls these.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.metrics import brier_score_loss, roc_auc_score

from focus_tune.sim.model import Simulator


@torch.no_grad()
def naive_sample(
    model: Simulator,
    images: torch.Tensor,
    num_samples: int,
    length: int,
    generator: torch.Generator | None = None,
    forced_event: int | None = None,
    method: str = "inverse_cdf",
    temperature: torch.Tensor | None = None,
) -> torch.Tensor:
    """Step every row through an ``LSTMCell`` for all L entries, no shortcut.

    method="inverse_cdf" consumes the generator exactly as :meth:`Simulator.sample` does
    (one uniform per row and entry), so the two must agree draw for draw; rows that drew
    ``forced_event`` are forced to keep it (None: nothing is forced). ``temperature`` [L]
    divides the logits of entry i by temperature[i]. method="multinomial" is the textbook
    sampler (``torch.multinomial``), used as the speed baseline.
    """
    model.eval()
    B, M, L, c = images.shape[0], num_samples, length, model.num_classes
    cell = torch.nn.LSTMCell(model.hidden, model.hidden).to(images.device, model.head.weight.dtype)
    cell.weight_ih.copy_(model.lstm.weight_ih_l0)
    cell.weight_hh.copy_(model.lstm.weight_hh_l0)
    cell.bias_ih.copy_(model.lstm.bias_ih_l0)
    cell.bias_hh.copy_(model.lstm.bias_hh_l0)
    if method == "inverse_cdf":
        u = torch.rand(B * M, L, generator=generator, dtype=torch.float64).to(images.device)
    h = model.encode(images).repeat_interleave(M, dim=0)
    state = (h, torch.zeros_like(h))
    prev = torch.full((B * M,), model.start_token, dtype=torch.long, device=images.device)
    out = torch.empty(B * M, L, dtype=torch.long, device=images.device)
    for i in range(L):
        state = cell(model.token(prev), state)
        z = model.head(state[0]).double()
        if temperature is not None:
            z = z / float(temperature[i])
        p = torch.softmax(z, dim=-1)
        if method == "inverse_cdf":
            draw = torch.searchsorted(p.cumsum(-1), u[:, i : i + 1].contiguous()).squeeze(1).clamp(max=c - 1)
        else:
            draw = torch.multinomial(p, 1, generator=generator).squeeze(1)
        if forced_event is not None and i > 0:
            draw = torch.where(out[:, i - 1] == forced_event, forced_event, draw)
        out[:, i] = draw
        prev = draw
    return out.view(B, M, L)


def naive_ece(probs: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> float:
    """Confidence ECE, one bin at a time, with the binning rule of :mod:`focus_tune.scoring.metrics`."""
    conf = probs.max(axis=1)
    correct = probs.argmax(axis=1) == labels
    edges = np.quantile(conf, np.arange(1, n_bins) / n_bins)
    bins = np.searchsorted(edges, conf, side="left")  # (Q_{b-1}, Q_b] -> b
    gaps = [abs(correct[bins == b].mean() - conf[bins == b].mean()) for b in range(n_bins) if (bins == b).any()]
    return float(np.mean(gaps))


def naive_ece_debiased_squared(probs: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> float:
    """Debiased squared ECE, one bin at a time, with the bins of :func:`naive_ece`."""
    conf = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    edges = np.quantile(conf, np.arange(1, n_bins) / n_bins)
    bins = np.searchsorted(edges, conf, side="left")
    values = []
    for b in range(n_bins):
        c, y = conf[bins == b], correct[bins == b]
        n = len(c)
        if n == 0:
            continue
        acc, m = y.mean(), c.mean()
        var_acc = (acc * (1 - acc) - c.var()) / (n - 1) if n > 1 else m * (1 - m)
        values.append((acc - m) ** 2 - var_acc)
    return float(np.mean(values))


def naive_overconfidence(probs: np.ndarray, labels: np.ndarray) -> float:
    """Mean over items of (top-class confidence - 1[top class is right]), item by item."""
    total = 0.0
    for p, y in zip(probs, labels):
        total += max(p) - float(int(np.argmax(p)) == int(y))
    return total / len(probs)


def naive_interval_score(lo, hi, true_times, alpha: float = 0.9) -> float:
    """Mean interval score (Gneiting & Raftery 2007, eq. 43) / mean T, item by item."""
    scores = []
    for low, u, t in zip(lo, hi, true_times):
        s = u - low
        if t < low:
            s += 2 / (1 - alpha) * (low - t)
        elif t > u:
            s += 2 / (1 - alpha) * (t - u)
        scores.append(s)
    return float(np.mean(scores) / np.mean(true_times))


def naive_crps(times: np.ndarray, true_times: np.ndarray) -> float:
    """CRPS of the sampled times [N, M] as E|X - T| - E|X - X'| / 2 over the samples, / mean T.

    X, X' range over all M x M pairs (a sample with itself included): the CRPS of the
    samples' empirical distribution, which is what :func:`focus_tune.scoring.metrics.crps` scores
    after :func:`focus_tune.scoring.montecarlo.time_pmf`.
    """
    per_item = []
    for x, t in zip(np.asarray(times, dtype=np.float64), np.asarray(true_times, dtype=np.float64)):
        per_item.append(np.abs(x - t).mean() - np.abs(x[:, None] - x[None, :]).mean() / 2)
    return float(np.mean(per_item) / np.mean(true_times))


def naive_sequence_metrics(probs: np.ndarray, labels: np.ndarray, n_bins: int = 10, ce_eps: float = 1e-3) -> dict:
    """Entry by entry, class by class, with scikit-learn where it has the metric."""
    N, L, c = probs.shape
    per = {k: np.full(L, np.nan) for k in ("ece", "ece_debiased_sq", "overconfidence", "auc", "brier", "ce")}
    for i in range(L):
        p, y = probs[:, i], labels[:, i]
        per["ece"][i] = naive_ece(p, y, n_bins)
        per["ece_debiased_sq"][i] = naive_ece_debiased_squared(p, y, n_bins)
        per["overconfidence"][i] = naive_overconfidence(p, y)
        aucs = [roc_auc_score(y == a, p[:, a]) for a in range(c) if 0 < (y == a).sum() < N]
        per["auc"][i] = np.mean(aucs) if aucs else np.nan
        per["brier"][i] = np.sum([brier_score_loss(y == a, p[:, a]) for a in range(c)])  # summed over classes
        per["ce"][i] = -np.mean(np.log(np.maximum(p[np.arange(N), y], ce_eps)))
    return {
        "ece": per["ece"].mean(), "auc": np.nanmean(per["auc"]), "brier": per["brier"].mean(),
        "ce": per["ce"].mean(), "ece_debiased_sq": per["ece_debiased_sq"].mean(),
        "overconfidence": per["overconfidence"].mean(), "per_entry": per,
    }
