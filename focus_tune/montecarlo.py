"""Monte Carlo estimates from M sampled sequences per input (paper Sec. 3.2).

Every function takes samples [N, M, L] of class ids (a torch tensor or a numpy array) and
is vectorized over items, samples and entries: these run after every evaluation epoch.
"""

from __future__ import annotations

import numpy as np
import torch


def _as_tensor(samples, long: bool = True) -> torch.Tensor:
    t = torch.as_tensor(samples)
    if t.ndim != 3:
        raise ValueError(f"samples must be [N, M, L], got shape {tuple(t.shape)}")
    return t.long() if long else t


def _class_counts(s: torch.Tensor, num_classes: int, weights: torch.Tensor | None = None) -> torch.Tensor:
    """sum over samples of weight * 1[y_i = a]: [N, M, L] -> [N, L, c] float64.

    One scatter_add over a flat (item, entry, class) index: no [N, M, L, c] one-hot.
    """
    N, M, L = s.shape
    if s.numel() and (int(s.min()) < 0 or int(s.max()) >= num_classes):
        raise ValueError(f"sample classes must be in [0, {num_classes})")
    flat = (torch.arange(N).view(N, 1, 1) * L + torch.arange(L).view(1, 1, L)) * num_classes + s
    w = torch.ones(N, M, L, dtype=torch.float64) if weights is None else weights.expand(N, M, L).double()
    counts = torch.zeros(N * L * num_classes, dtype=torch.float64)
    counts.scatter_add_(0, flat.reshape(-1), w.reshape(-1))
    return counts.view(N, L, num_classes)


def marginal_probs(samples, num_classes: int) -> np.ndarray:
    """P(Y_i = a | x) = fraction of samples with y_i = a.  [N, M, L] -> [N, L, c] float64."""
    s = _as_tensor(samples)
    return (_class_counts(s, num_classes) / s.shape[1]).numpy()


def conditional_probs(samples, num_classes: int, j: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """The ratio estimator of P(Y_i = a | Y_j = b, x).

    Among the samples of each item with entry j (0-based) equal to b, the fraction with
    y_i = a. Returns (probs [N, L, c] float64, counts [N] int64: how many samples met the
    condition). Items where no sample meets it get NaN rows. For a condition on the first
    entries, sampling with a forced prefix (:meth:`Simulator.sample`) is exact and cheaper.
    """
    s = _as_tensor(samples)
    N, M, L = s.shape
    if not 0 <= j < L:
        raise ValueError(f"conditioning entry j = {j} is outside [0, {L})")
    keep = (s[:, :, j] == b).unsqueeze(-1)  # (N, M, 1)
    counts = keep.sum(dim=(1, 2)).numpy().astype(np.int64)  # (N,)
    num = _class_counts(s, num_classes, weights=keep).numpy()  # (N, L, c)
    probs = np.full_like(num, np.nan)
    ok = counts > 0
    probs[ok] = num[ok] / counts[ok, None, None]
    return probs, counts


def time_to_event(samples, event: int) -> np.ndarray:
    """T = min{i : y_i = event}, counted from 1 (the paper's convention); T = L if none.

    An event at the first entry is T = 1. A sequence without the event within its L entries
    is censored at T = L, the same value as an event at the last entry (the paper is silent
    on censoring; docs/DESIGN.md records the choice).
    [N, M, L] -> [N, M] int64 (FaceMed: the year of death; games: the entry where the player scores).
    """
    s = _as_tensor(samples)
    L = s.shape[-1]
    hit = s == event
    # argmax returns the first True (0-based); rows with no True get L.
    first = hit.to(torch.uint8).argmax(dim=-1) + 1
    return torch.where(hit.any(dim=-1), first, torch.full_like(first, L)).numpy().astype(np.int64)


def leak(samples, event: int) -> tuple[float, int]:
    """How often sampled sequences leave the event class after first reaching it.

    Returns (fraction, count): among the sampled sequences [N, M, L] that reach ``event``,
    the fraction with a non-event entry after the first event entry, and how many reached
    it (the fraction is NaN when none did). A sampler that forces the event to repeat has
    leak 0 by construction; the true processes here (END, dead) are absorbing, so any leak
    is the model's.
    """
    s = _as_tensor(samples, long=False)  # any integer dtype and device (the packed sampler's bytes on a GPU)
    hit = s == event
    after = hit.to(torch.int8).cummax(dim=-1).values.bool()  # at or after the first event entry
    reached = after[..., -1]
    left = (after & ~hit).any(dim=-1)
    n = int(reached.sum())
    return (float(left.sum()) / n if n else float("nan")), n


def interval(times, alpha: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """The alpha interval I_alpha = [q_(1-alpha)/2, q_(1+alpha)/2] of sampled times, per item.

    times: [N, M]. Quantiles use numpy's default (linear interpolation between order
    statistics). The point estimate is ``times.mean(axis=1)``.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    t = np.asarray(times, dtype=np.float64)
    lo, hi = np.quantile(t, [(1 - alpha) / 2, (1 + alpha) / 2], axis=1)
    return lo, hi


def time_pmf(times, L: int) -> np.ndarray:
    """P(T = t) for t = 1..L: the fraction of the M sampled times equal to t, per item.

    times [N, M] integers in 1..L (:func:`time_to_event`) -> [N, L] float64, rows sum to 1
    (the input of :func:`focus_tune.metrics.crps`). One bincount over a flat (item, t)
    index, no loop over items.
    """
    t = np.asarray(times)
    if t.ndim != 2:
        raise ValueError(f"times must be [N, M], got shape {t.shape}")
    if t.size and ((t != np.round(t)).any() or t.min() < 1 or t.max() > L):
        raise ValueError(f"times must be integers in [1, {L}]")
    N, M = t.shape
    flat = (np.arange(N)[:, None] * L + (t.astype(np.int64) - 1)).ravel()
    return np.bincount(flat, minlength=N * L).reshape(N, L) / M


def pmf_quantile(pmf, level: float) -> np.ndarray:
    """The smallest t in 1..L with P(T <= t) >= level, per row of pmf [N, L] -> float64 [N]
    (a CDF that equals the level up to rounding reaches it)."""
    cdf = np.cumsum(np.asarray(pmf, dtype=np.float64), axis=1)
    return np.minimum(1 + (cdf < level - 1e-12).sum(axis=1), cdf.shape[1]).astype(np.float64)


def event_before(samples, event: int) -> np.ndarray:
    """Whether the event was drawn at an earlier entry: samples [..., L] -> bool [..., L]
    (entry t is True when some entry before t is the event; entry 1 never)."""
    hit = np.asarray(samples) == event
    return np.concatenate([np.zeros_like(hit[..., :1]), np.cumsum(hit, axis=-1)[..., :-1] > 0], axis=-1)


def pmf_from_event_terms(terms, ended) -> np.ndarray:
    """The Rao-Blackwellized time-to-event distribution on t = 1..L of M draws per item.

    terms [N, L]: for each t the mean over the draws of 1[no event before t] p(y_t = event |
    x, y_<t); ended [N, L]: the fraction of the draws with an event before t (the mean over
    the draws of :func:`event_before`). Their sum is
    E[1(T <= t) | the draw's history before t] averaged over the draws: an unbiased estimate
    of P(T <= t) in [0, 1] whose variance is at most the counted fraction's (it replaces
    only the last step's indicator by its probability). A plain running sum of the terms
    would also be unbiased, but each draw adds its own event probabilities until it draws
    the event, so on a trained model it strayed from the counted CDF by 0.1 near the tail.
    The CDF is made monotone by a running maximum, T = L takes the rest (the event at L or
    none), and every row is a distribution. Returns float64 [N, L].
    """
    raw, done = (np.asarray(a, dtype=np.float64) for a in (terms, ended))
    if raw.ndim != 2 or done.shape != raw.shape:
        raise ValueError(f"terms and ended must be the same [N, L], got {raw.shape} and {done.shape}")
    cdf = np.minimum(np.maximum.accumulate(done[:, :-1] + raw[:, :-1], axis=1), 1.0)
    return np.diff(np.concatenate([np.zeros((len(raw), 1)), cdf, np.ones((len(raw), 1))], axis=1), axis=1)
