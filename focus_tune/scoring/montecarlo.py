"""Monte Carlo estimates from M sampled sequences per input (paper Sec. 3.2).

:func:`estimate` is the one estimator of every evaluation (a model's, a pack's, a baseline's,
predict's): the draws of a sampler (:class:`Drawn`) and an estimator's name
(:data:`~focus_tune.names.ESTIMATORS`) -> :class:`Estimates`, what the metrics score
(:func:`focus_tune.scoring.evaluation.score`). ``counted`` is the paper's: the class frequencies of the
M draws and the quantiles of their times to the event. ``rao_blackwell`` averages the
sampler's own conditionals along the same draws: :class:`RaoBlackwell` sums them step by step,
inside :meth:`~focus_tune.sim.model.Simulator.sample` or from a baseline's conditionals.

The functions below it take samples [N, M, L] of class ids (a numpy array or a torch tensor,
on any device) and are vectorized over items, samples and entries, in numpy: these run after
every evaluation epoch. Counting in numpy measured faster than in torch on a CPU (1000 items x
100 draws x 100 entries, 19 classes, one thread: the class frequencies 32 ms with one
bincount against 182 ms with torch's ``scatter_add`` and 2.8 s with one comparison per class;
the times to the event 5 ms against 36 ms), so a pack's draws on a GPU are copied to the CPU
(one byte per entry) and counted here like every other (a GPU's own counting was not measured).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..data.sequences import time_to_event  # the one rule of T, the data's: draws [N, M, L] -> [N, M]
from ..names import ESTIMATORS


def _numpy(a) -> np.ndarray:
    """A torch tensor (any device) or an array-like as a numpy array."""
    return a.cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def _as_array(samples) -> np.ndarray:
    s = _numpy(samples)
    if s.ndim != 3:
        raise ValueError(f"samples must be [N, M, L], got shape {s.shape}")
    return s


def _class_counts(s: np.ndarray, num_classes: int, weights: np.ndarray | None = None) -> np.ndarray:
    """sum over samples of weight * 1[y_i = a]: [N, M, L] -> [N, L, c] float64 (exact integers
    for 0/1 weights).

    One bincount over a flat (item, entry, class) index: no [N, M, L, c] one-hot.
    """
    N, M, L = s.shape
    if s.size and (int(s.min()) < 0 or int(s.max()) >= num_classes):
        raise ValueError(f"sample classes must be in [0, {num_classes})")
    flat = (np.arange(N * L).reshape(N, 1, L) * num_classes + s).ravel()
    w = None if weights is None else np.broadcast_to(weights, s.shape).ravel().astype(np.float64)
    counts = np.bincount(flat, weights=w, minlength=N * L * num_classes)
    return counts.reshape(N, L, num_classes).astype(np.float64, copy=False)


def marginal_probs(samples, num_classes: int) -> np.ndarray:
    """P(Y_i = a | x) = fraction of samples with y_i = a.  [N, M, L] -> [N, L, c] float64."""
    s = _as_array(samples)
    return _class_counts(s, num_classes) / s.shape[1]


def conditional_probs(samples, num_classes: int, j: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """The ratio estimator of P(Y_i = a | Y_j = b, x).

    Among the samples of each item with entry j (0-based) equal to b, the fraction with
    y_i = a. Returns (probs [N, L, c] float64, counts [N] int64: how many samples met the
    condition). Items where no sample meets it get NaN rows. For a condition on the first
    entries, sampling with a forced prefix (:meth:`Simulator.sample`) is exact and cheaper.
    """
    s = _as_array(samples)
    N, M, L = s.shape
    if not 0 <= j < L:
        raise ValueError(f"conditioning entry j = {j} is outside [0, {L})")
    keep = (s[:, :, j] == b)[..., None]  # (N, M, 1)
    counts = keep.sum(axis=(1, 2)).astype(np.int64)  # (N,)
    num = _class_counts(s, num_classes, weights=keep)  # (N, L, c)
    probs = np.full_like(num, np.nan)
    ok = counts > 0
    probs[ok] = num[ok] / counts[ok, None, None]
    return probs, counts


def leak(samples, event: int) -> tuple[float, int]:
    """How often sampled sequences leave the event class after first reaching it.

    Returns (fraction, count): among the sampled sequences [N, M, L] that reach ``event``,
    the fraction with a non-event entry after the first event entry, and how many reached
    it (the fraction is NaN when none did). A sampler that forces the event to repeat has
    leak 0 by construction; the true processes here (END, dead) are absorbing, so any leak
    is the model's.
    """
    hit = _as_array(samples) == event  # any integer dtype (the packed sampler's bytes)
    after = np.logical_or.accumulate(hit, axis=-1)  # at or after the first event entry
    reached = after[..., -1]
    left = (after & ~hit).any(axis=-1)
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
    (the input of :func:`focus_tune.scoring.metrics.crps`). One bincount over a flat (item, t)
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


# ----------------------------------------------------------------------------- the estimator


@dataclass
class Drawn:
    """What a sampler drew: ``samples`` [N, M, L] class ids (numpy or torch, any device) and,
    where it summed its own conditionals along them (:class:`RaoBlackwell`), the
    Rao-Blackwellized ``marginals`` [N, L, c] and ``time_pmf`` [N, L] (float64; None where it
    did not: then only the counted estimator applies)."""

    samples: Any
    marginals: Any = None
    time_pmf: Any = None


@dataclass
class Estimates:
    """What the metrics score, however it was estimated (Monte Carlo samples, frequencies).

    probs [N, L, c]: P(Y_i = a | x); lo, hi, point [N]: the time-to-event interval and
    point estimate; cond_probs [K, L-1, c]: P(Y_i = a | Y_1 = b, x) for i = 2..L on the K
    items whose true Y_1 is b (None when not evaluated); time_pmf [N, L]: P(T = t | x) for
    t = 1..L, the distribution the interval comes from (None: no CRPS); times [N, M]: the
    sampled times of the counted estimator (None for the others).
    """

    probs: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    point: np.ndarray
    cond_probs: np.ndarray | None = None
    time_pmf: np.ndarray | None = None
    times: np.ndarray | None = None

    def median(self) -> np.ndarray:
        """The median time to the event per item [N]: the sampled times' (numpy's median), or
        the pmf's (:func:`pmf_quantile` at 1/2) where no times were sampled."""
        return np.median(self.times, axis=1) if self.times is not None else pmf_quantile(self.time_pmf, 0.5)


def check_estimator(estimator: str) -> None:
    """Raise ValueError naming the valid choices unless ``estimator`` is one of :data:`ESTIMATORS`."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")


def estimate(drawn: Drawn, estimator: str, event: int, num_classes: int, alpha: float,
             given: Drawn | None = None) -> Estimates:
    """The estimates of M draws per item under ``estimator`` (:data:`ESTIMATORS`).

    ``counted`` (the paper's): P(Y_i = a | x) the class frequencies of the draws, the alpha
    interval the quantiles of their times to the event (:func:`interval`), the point their
    mean, the pmf their histogram (:func:`time_pmf`). ``rao_blackwell``: ``drawn.marginals``
    and ``drawn.time_pmf``, the interval and point from that pmf
    (:func:`estimates_from_distributions`). ``given``: the draws of the K conditioned items
    with Y_1 forced, whose entries 2..L give ``cond_probs`` [K, L-1, c] (the same estimator).
    """
    check_estimator(estimator)
    if estimator == "counted":
        samples = _as_array(drawn.samples)
        times = time_to_event(samples, event)  # (N, M)
        lo, hi = interval(times, alpha)
        cond = None if given is None else marginal_probs(given.samples, num_classes)[:, 1:]
        return Estimates(marginal_probs(samples, num_classes), lo, hi, times.mean(axis=1), cond,
                         time_pmf(times, samples.shape[-1]), times)
    if drawn.marginals is None or (given is not None and given.marginals is None):
        raise ValueError("the rao_blackwell estimator needs the sampler's conditionals summed along its draws "
                         "(sample with rao_blackwell=<event class>)")
    cond = None if given is None else _numpy(given.marginals)[:, 1:]
    return estimates_from_distributions(_numpy(drawn.marginals), _numpy(drawn.time_pmf), cond, alpha)


def estimates_from_distributions(probs, time_pmf, cond_probs, alpha: float) -> Estimates:
    """Estimates from probabilities [N, L, c] and a time-to-event pmf [N, L] on t = 1..L.

    The interval is the pmf's own quantile pair: the smallest t with P(T <= t) >=
    (1 - alpha) / 2, and with >= (1 + alpha) / 2 (the limit of the sampled interval as M
    grows); the point estimate is the pmf's mean.
    """
    pmf = np.asarray(time_pmf, dtype=np.float64)
    lo, hi = (pmf_quantile(pmf, q) for q in ((1 - alpha) / 2, (1 + alpha) / 2))
    cond = None if cond_probs is None else np.asarray(cond_probs, dtype=np.float64)
    return Estimates(np.asarray(probs, dtype=np.float64), lo, hi, pmf @ np.arange(1, pmf.shape[1] + 1), cond, pmf)


def estimates_from_marginals(probs, cond_probs, event: int, alpha: float) -> Estimates:
    """Estimates of a predictor that knows its probabilities (no sampling): probs [N, L, c].

    The event is absorbing, so P(T <= t) = P(Y_t = event) for t < L, and T = L takes the
    rest (censored at L, as for samples); the interval and point as in
    :func:`estimates_from_distributions`.
    """
    probs = np.asarray(probs, dtype=np.float64)
    cdf = np.maximum.accumulate(probs[:, :, event], axis=1)  # (N, L); monotone against rounding
    cdf[:, -1] = 1.0
    return estimates_from_distributions(probs, np.diff(cdf, axis=1, prepend=0.0), cond_probs, alpha)


class RaoBlackwell:
    """Sums of a sampler's own conditionals over the M draws of each of B items, entry by entry:
    the Rao-Blackwellized estimates of :class:`Drawn` (the model's sampler, on its device, and
    the baselines' conditionals, on the CPU, both feed it).

    Per entry, the rows still simulated add p(y_i | x, y_<i) [R, c] to their item's marginal
    and, where no event was drawn before, p(y_i = event | ...) to its time-to-event pmf. Rows
    a sampler dropped (the absorbing shortcut) repeat the event: one-hot, and no event term.
    """

    def __init__(self, B: int, M: int, L: int, c: int, event: int, device="cpu"):
        self.M, self.L, self.c, self.event = M, L, c, event
        self.item = torch.arange(B * M, device=device) // M  # the item of each row
        self.seen = torch.zeros(B * M, dtype=torch.bool, device=device)  # event drawn at an earlier entry
        self.marginals = torch.zeros(B, L, c, dtype=torch.float64, device=device)
        self.pmf = torch.zeros(B, L, dtype=torch.float64, device=device)
        self.active = torch.zeros(B, L, dtype=torch.float64, device=device)  # rows simulated at each entry

    def add(self, i: int, rows: torch.Tensor, p: torch.Tensor, draw: torch.Tensor) -> None:
        """Entry i of the rows ``rows`` [R]: p [R, c] their conditionals, or a forced class [R]
        (long: one-hot); ``draw`` [R] the classes drawn."""
        if p.dtype == torch.long:
            p = torch.nn.functional.one_hot(p, self.c).double()
        item = self.item[rows]
        self.marginals[:, i].index_add_(0, item, p)
        self.pmf[:, i].index_add_(0, item, p[:, self.event] * (~self.seen[rows]))
        self.active[:, i].index_add_(0, item, torch.ones_like(item, dtype=torch.float64))
        self.seen[rows] |= draw == self.event

    def result(self, samples) -> tuple[torch.Tensor, torch.Tensor]:
        """(marginals [B, L, c], time_pmf [B, L]) float64 on the CPU; ``samples`` [B, M, L] are the draws."""
        marginals = self.marginals.clone()
        marginals[:, :, self.event] += self.M - self.active  # dropped rows: the event, surely
        ended = event_before(_numpy(samples), self.event).mean(axis=1)
        pmf = torch.from_numpy(pmf_from_event_terms((self.pmf / self.M).cpu().numpy(), ended))  # T = L: the rest
        return (marginals / self.M).cpu(), pmf
