"""The censoring survival G(t) = P(C >= t) of right-censored data, and the weights built on it.

One home for the reverse Kaplan-Meier estimate that every censored metric uses
(docs/METRICS.md, "Censored items"): the time-to-event metrics (:func:`focus_tune.scoring.metrics.ipcw_weights`,
:func:`time_weights`), the entry-level metrics (:func:`entry_weights`) and the split conformal
level (``focus_tune.scoring.conformal``). Plain numpy.

Conventions. ``true_times`` [N] are integers in 1..L: the time to event, or on a censored item
its last observed entry C (T exceeds it); ``censored`` bool [N]. Entry t of an item is seen
when C >= t, and an event at t is seen when entry t is, so an item is observed at entry i
with probability G(i) and its event at T with probability G(T).

**The estimate** (discrete time): at s, the items at risk of a censoring seen at s are those
observed beyond s or censored at s (an event at s hides a censoring at s), h(s) = #censored
at s / #at risk at s, and G(t) = prod_{s < t} (1 - h(s)) (G(1) = 1). A time s that no item
reaches (0 at risk: every item resolved before it) has h(s) = 0.

**Which split.** G is estimated on the split being scored (the censoring of the test split is
the censoring of its items; the training split's may differ). A small split gives a coarse
step function; where nobody is observed past an entry e - 1 while an item was censored
there, G(e) = 0 and no weight can stand in for the items whose time reaches e: that is the
positivity check (:func:`positivity_entry`), and every metric that would need G(e) is NaN,
with ``data/positivity`` = e in the scores (:data:`POSITIVITY_KEY`, :func:`positivity_note`).

**Assumption.** Censoring independent of T and of the image (one curve G for every item) and
P(C >= L) > 0 (some item can be observed to the end). Under it the Hajek means
sum w x / sum w below are consistent for the means over the uncensored population.
"""

from __future__ import annotations

import numpy as np

POSITIVITY_KEY = "data/positivity"  # the first entry e with G(e) = 0, only where there is one


def _check(true_times, censored) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(true_times)
    censored = np.asarray(censored)
    if censored.dtype != bool or censored.shape != t.shape or t.ndim != 1:
        raise ValueError(f"censored must be a bool [N] beside true_times [N], got {censored.dtype} {censored.shape} "
                         f"and {t.shape}")
    if len(t) and ((t != np.round(t)).any() or t.min() < 1):
        raise ValueError("true_times must be integers >= 1 to weigh censored items")
    return t.astype(np.int64), censored


def censoring_survival(true_times, censored, length: int | None = None) -> np.ndarray:
    """G(t) for t = 0..max(length, max T): float64 [size + 1], G[0] = G[1] = 1 (the module doc's
    reverse Kaplan-Meier estimate)."""
    t, censored = _check(true_times, censored)
    size = max(int(t.max()) if len(t) else 0, length or 0) + 1
    observed_from = np.cumsum(np.bincount(t, minlength=size)[::-1])[::-1]  # [s]: #{observed time >= s}
    # An event at s is seen when entry s is (C >= s), so it hides a censoring at s: those items
    # are not at risk of a censoring seen at s (kept in, they would bias h(s) low by P(T > s | T >= s)).
    at_risk = observed_from - np.bincount(t[~censored], minlength=size)
    hazard = np.bincount(t[censored], minlength=size) / np.maximum(at_risk, 1)
    # cumprod[k] = prod_{s <= k} (1 - h(s)), h(0) = 0: G(t) = cumprod[t - 1].
    return np.concatenate([[1.0], np.cumprod(1.0 - hazard)])


def positivity_entry(G: np.ndarray, upto: int) -> int | None:
    """The first entry e in 1..``upto`` with G(e) = 0 (nobody observed past e - 1 while some
    item was censored there), or None: every weight up to ``upto`` exists."""
    zero = np.flatnonzero(G[1 : upto + 1] <= 0)
    return int(zero[0]) + 1 if len(zero) else None


def positivity_note(entry: int) -> str:
    """The one line a report shows beside the metrics flagged by the positivity check."""
    return (f"no item is observed past entry {entry - 1} while some are censored there: the censoring survival "
            f"G({entry}) = 0, so nothing stands in for the items whose time reaches entry {entry}; the metrics "
            "that need it are NaN")


def entry_weights(observed, true_times, censored, G: np.ndarray | None = None) -> np.ndarray:
    """The inverse-probability-of-censoring weight of every (item, entry) pair: float64 [N, L].

    observed bool [N, L]; true_times, censored [N] (the module's conventions). An observed
    pair (n, i) weighs 1 / G(min(T_n, i)) (Graf et al. 1999's time-dependent weights: entry i
    of an item whose event came at T <= i is known once T is seen, any other entry i once i
    is), an unobserved pair 0. Entries i >= :func:`positivity_entry` (G(i) = 0) are NaN for
    every item: the metrics of such an entry cannot be estimated, and NaN carries that to
    every score that reads them. ``censored`` None: nothing is censored (G = 1; the weights
    are the mask).
    """
    observed = np.asarray(observed, dtype=bool)
    N, L = observed.shape
    t = np.asarray(true_times)
    if censored is None:
        censored = np.zeros(len(t), bool)
    if G is None:
        G = censoring_survival(t, censored, L)
    at = np.minimum(t.astype(np.int64)[:, None], np.arange(1, L + 1)[None, :])
    g = G[at]
    with np.errstate(divide="ignore"):
        w = np.where(observed, 1.0 / np.where(observed, g, 1.0), 0.0)
    blocked = positivity_entry(G, L)
    if blocked is not None:
        w[:, blocked - 1 :] = np.nan
    return w


def known_times(true_times, censored, length: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(T, censored) with the outcomes the data already resolves: an item observed through
    L - 1 without the event has T = L (event at L or never, both T = L), so it is recoded as
    uncensored at L. ``length`` None: unchanged."""
    t, censored = np.asarray(true_times, dtype=np.float64), np.asarray(censored, dtype=bool)
    if length is None:
        return t, censored
    resolved = censored & (t >= length - 1)
    return np.where(resolved, float(length), t), censored & ~resolved


def time_weights(true_times, censored, length: int | None = None, upper=None,
                 G: np.ndarray | None = None) -> np.ndarray:
    """IPCW weights of item-level quantities of T: [N] float64, NaN everywhere when the
    positivity check fails on a time they need.

    An item's quantity is known once entry tau is seen, tau = min(T, L - 1) (T = L is known at
    L - 1: :func:`known_times`), or with ``upper`` [N] (an interval's upper end) tau =
    min(T, floor(upper), L - 1): whether T lies in an interval ending at hi is known at
    min(T, hi) (a censored item observed through floor(hi) without the event is a known
    miss). Weight 1 / G(tau) where the quantity is known (C >= tau), 0 where it is not.
    ``length`` None: tau = T (or min(T, floor(upper))). ``true_times``, ``censored``: as stored
    (a censored item's time is its last observed entry C).
    """
    t, censored = _check(true_times, censored)
    if G is None:
        G = censoring_survival(t, censored, length)
    cap = np.full(len(t), np.iinfo(np.int64).max) if length is None else np.full(len(t), max(length - 1, 1))
    if upper is not None:
        cap = np.minimum(cap, np.maximum(np.floor(np.asarray(upper, dtype=np.float64)), 1).astype(np.int64))
    # Uncensored: tau = min(T, cap). Censored at C (T > C): known iff C >= cap, then tau = cap.
    tau = np.where(censored, cap, np.minimum(t, cap))
    known = ~censored | (t >= cap)
    # The times some item's quantity may need: every tau, a censored item's included (its T is
    # unseen: a zero of G before its tau is what hides it).
    need = len(G) - 1 if length is None else int(tau.max()) if len(tau) else 1
    if positivity_entry(G, need) is not None:
        return np.full(len(t), np.nan)
    return np.where(known, 1.0 / np.where(known, G[np.minimum(tau, len(G) - 1)], 1.0), 0.0)


def kish(weights: np.ndarray) -> float:
    """Kish's effective number of items of weights w: (sum w)^2 / sum w^2 (0 when all are 0)."""
    w = np.asarray(weights, dtype=np.float64)
    total = (w * w).sum()
    return float(w.sum() ** 2 / total) if total > 0 else 0.0
