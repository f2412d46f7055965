"""Post-hoc temperature scaling fitted where the labels say something: the live rows.

Pure numpy / torch (no Ray, no MLflow). A simulator's entry i is drawn from
softmax(z_i / T_i); temperature scaling fits T on the validation split by the
teacher-forced NLL and keeps the network as it is.

Why "live rows": the event class (END, dead) is absorbing, so once an item's true
sequence has reached it, every later label is the event again and says nothing about the
model's uncertainty over the actions. Fitting on such rows rewards a sure "stay in END":
on the quick H.E.R.O. data no validation sequence is alive after entry 41, the NLL of
those entries keeps falling as T -> 0, and a per-entry fit on all rows puts 61 of 100
temperatures at the lower bound (logits x 20). The sampled sequences that are still
alive there then freeze on their argmax action and never reach END. A row is therefore
*live* when the item's true previous entry y_{i-1} is not the event class (entry 1 is
always live), i.e. exactly the rows where the model predicts from a state that the
sampler also visits while a sequence is running.

The fits (each returns a :class:`TemperatureFit`):

* :func:`fit_pooled`: one temperature over all live rows of all entries.
* :func:`fit_per_entry`: one temperature per entry on that entry's live rows, where the
  entry has at least ``min_rows`` of them; the pooled temperature elsewhere.
* :func:`choose_staged`: temperatures picked on a grid (:data:`GRID`) by any score (the
  search's way of choosing lambda: the validation sampled marginal ECE), one for all entries
  or T_1..T_k1 one entry at a time and then one for the rest; the scoring is the caller's, and
  so are the noise of a score difference (:func:`paired_bootstrap_se`) and the decision (the
  search's tie rule). These are the product's temperature rows (focus_tune/trial/final.py):
  on the quick H.E.R.O. model both NLL fits sampled a worse test ECE than T = 1
  (docs/results/temperature/README.md), because a teacher-forced NLL optimum is not the
  optimum of the sampled marginals.

Every fit says how many of its temperatures sit at a bound of the search interval, so a
report can never show a bounded temperature as if it were an optimum.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np
import torch

BOUNDS = (0.05, 20.0)  # the search interval of T; a fit that ends on it is reported as at_bound
MIN_LIVE_ROWS = 100  # per-entry fit: fewer live rows than this and the entry takes the pooled T
# Candidates of the grid choice (benchmarks/bench_temperature.py): T = 1 (no change) is one of
# them, so the choice is never worse than the unscaled model on the validation criterion.
# Both sides of 1 as far as 0.7 (sharper) and 1.5 (softer): an overconfident model asks for
# T > 1, an unsure one for T < 1, and lambda's grid reaches its strong end too; an optimum at
# the grid's edge is reported (temperature_at_bound).
GRID = (0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5)


@dataclass(frozen=True)
class TemperatureFit:
    """A fitted temperature vector and what it rests on.

    temperature: float64 [L], entry i is sampled from softmax(z_i / temperature[i]).
    pooled: the one temperature fitted on all live rows (the fallback of a per-entry fit;
        for a grid choice, the chosen value).
    at_bound: how many of the L entries of ``temperature`` sit at a bound of ``bounds``.
    live_rows: int [L], live rows per entry in the fitting data.
    own_fit: bool [L], entries with a temperature of their own (the others took ``pooled``).
    method: "pooled", "per-entry", "grid" (or a caller's name).
    bounds: the (low, high) interval the fit searched.
    scores: for a grid choice, {candidate T: score}; empty otherwise.
    margin, margin_se: for a grid choice with a noise guard, score(T = 1) - score(best
        candidate) and its standard error (NaN otherwise; 0 margin when T = 1 was best).
    """

    temperature: np.ndarray
    pooled: float
    at_bound: int
    live_rows: np.ndarray
    own_fit: np.ndarray
    method: str
    bounds: tuple[float, float] = BOUNDS
    scores: dict = field(default_factory=dict)
    margin: float = float("nan")
    margin_se: float = float("nan")

    @property
    def pooled_at_bound(self) -> bool:
        """Whether the pooled temperature itself is at a bound."""
        return _on_bound(np.array([self.pooled]), self.bounds)[0]

    def summary(self) -> dict[str, float]:
        """Flat numbers for a result dict (MLflow metrics, the report)."""
        return {
            "temperature_pooled": float(self.pooled),
            "temperature_at_bound": float(self.at_bound),
            "temperature_mean": float(self.temperature.mean()),
            "temperature_min": float(self.temperature.min()),
            "temperature_max": float(self.temperature.max()),
            "temperature_margin": float(self.margin),
            "temperature_margin_se": float(self.margin_se),
            # a staged fit's own entries (T_1..T_k1); temperature_pooled is then the rest's
            **{f"temperature_{i + 1}": float(self.temperature[i]) for i in np.flatnonzero(self.own_fit)
               if self.method == "staged"},
        }


def live_mask(labels, event: int, observed=None) -> np.ndarray:
    """bool [N, L]: row (n, i) is live when the true y_{n, i-1} is not ``event`` (entry 1 always).

    labels [N, L] int. The event is absorbing in the data, so a dead row's label is the
    event for certain: it carries no information on the temperature. ``observed`` bool
    [N, L] (right-censored data): an unobserved row is filler, never live.
    """
    y = np.asarray(labels)
    if y.ndim != 2:
        raise ValueError(f"labels must be [N, L], got shape {y.shape}")
    mask = np.ones(y.shape, dtype=bool)
    mask[:, 1:] = y[:, :-1] != event
    if observed is not None:
        observed = np.asarray(observed)
        if observed.shape != y.shape or observed.dtype != bool:
            raise ValueError(f"observed must be a bool mask of the labels' shape {y.shape}, got "
                             f"{observed.dtype} {observed.shape}")
        mask &= observed
    return mask


def fit_pooled(logits, labels, event: int, bounds: tuple[float, float] = BOUNDS, iters: int = 60,
               observed=None) -> TemperatureFit:
    """One temperature T = argmin_T mean over live rows of -log softmax(z / T)[y].

    logits [N, L, c] (teacher forced), labels [N, L] -> a fit whose ``temperature`` [L] is
    T everywhere. Raises ValueError when there is no live row (cannot happen with L >= 1 and
    N >= 1, since entry 1 is always live and always observed). ``observed`` bool [N, L]
    (right-censored data): the CE of the observed live rows only (:func:`live_mask`).
    """
    z, y = _check(logits, labels)
    mask = torch.as_tensor(live_mask(y.numpy(), event, observed))
    L = z.shape[1]
    t = _bisect(z[mask][:, None], y[mask][:, None], None, bounds, iters)[0]
    at = _on_bound(np.array([t]), bounds)[0]
    return TemperatureFit(np.full(L, t), float(t), int(L if at else 0), mask.sum(0).numpy().astype(np.int64),
                          np.zeros(L, dtype=bool), "pooled", tuple(bounds))


def fit_per_entry(logits, labels, event: int, min_rows: int = MIN_LIVE_ROWS, bounds: tuple[float, float] = BOUNDS,
                  iters: int = 60, chunk: int = 32, observed=None) -> TemperatureFit:
    """One temperature per entry on its live rows; the pooled one where fewer than ``min_rows``.

    logits [N, L, c], labels [N, L]. Entry i's T_i = argmin_T mean over live rows n of
    -log softmax(z_ni / T)[y_ni], for the entries with >= ``min_rows`` live rows; every
    other entry gets the pooled temperature (:func:`fit_pooled`), so an entry the data say
    nothing about keeps the model's overall correction instead of an extreme value.
    ``chunk`` entries at a time bound the memory. ``observed`` bool [N, L] (right-censored
    data): live rows are observed ones (:func:`live_mask`), in both fits.
    """
    if min_rows < 1:
        raise ValueError(f"min_rows must be >= 1, got {min_rows}")
    z, y = _check(logits, labels)
    pooled = fit_pooled(z, y, event, bounds, iters, observed)
    mask = torch.as_tensor(live_mask(y.numpy(), event, observed))
    live = mask.sum(0).numpy().astype(np.int64)
    own = live >= min_rows
    t = pooled.temperature.copy()
    for a in range(0, z.shape[1], chunk):
        cols = np.flatnonzero(own[a : a + chunk]) + a
        if len(cols):
            t[cols] = _bisect(z[:, cols], y[:, cols], mask[:, cols], bounds, iters)
    return TemperatureFit(t, pooled.pooled, int(_on_bound(t, bounds).sum()), live, own, "per-entry", tuple(bounds))


Decide = Callable[[list, Callable[[str, str], float]], int]


def choose_staged(score: Callable[[np.ndarray], float], grid: Iterable[float], length: int, k1: int,
                  decide: Decide, difference_se: Callable[[np.ndarray, np.ndarray], float],
                  live_rows: np.ndarray | None = None) -> TemperatureFit:
    """A temperature per entry chosen as the lambda search chooses its schedule: T_1..T_k1
    one entry at a time, then one T for the entries after k1 (``k1 = 0``: one T for all).

    Stage s (entry s, or the rest) scores every grid value T at its entries, the entries of the
    earlier stages at their chosen T and the later ones at 1, by ``score(vector [L])`` (e.g. the
    validation sampled marginal ECE); ``decide(scored, se)`` picks the stage's winner from
    ``scored`` = [(score, |log T|, key)] (the departure from no change is the penalty), with
    ``se(key_a, key_b)`` the standard error of two candidates' score difference
    (``difference_se`` of their vectors, e.g. a paired bootstrap over the validation items):
    the search's tie rule, so that a temperature moves off 1 only as far as the evidence a
    lambda needs. A choice at the grid's smallest or largest value counts its entries as at a
    bound. ``scores`` of the fit: {stage label: {T: score}}; ``margin``/``margin_se``: the last
    stage's score at T = 1 minus its chosen T's and their SE (0 when it kept 1).
    """
    grid = sorted(float(g) for g in grid)
    if not grid or min(grid) <= 0 or 1.0 not in grid:
        raise ValueError(f"the grid needs positive temperatures and 1.0 among them, got {grid}")
    if not 0 <= k1 < length:
        raise ValueError(f"k1 must be in [0, L) = [0, {length}), got {k1}")
    t = np.ones(length)
    stages = [(f"T{i + 1}", slice(i, i + 1)) for i in range(k1)] + [("rest" if k1 else "all", slice(k1, length))]
    scores: dict[str, dict[float, float]] = {}
    margin = se = float("nan")
    for label, entries in stages:
        vectors = {}
        for g in grid:
            v = t.copy()
            v[entries] = g
            vectors[g] = v
        stage_scores = {g: float(score(v)) for g, v in vectors.items()}
        keys = {f"{label}={g!r}": g for g in grid}
        scored = [(stage_scores[g], abs(float(np.log(g))), k) for k, g in keys.items()]
        chosen = keys[scored[decide(scored, lambda a, b: difference_se(vectors[keys[a]], vectors[keys[b]]))][2]]
        t[entries] = chosen
        scores[label] = stage_scores
        margin = stage_scores[1.0] - stage_scores[chosen]
        se = 0.0 if chosen == 1.0 else float(difference_se(vectors[chosen], vectors[1.0]))
    at_bound = int(np.isin(t, (grid[0], grid[-1])).sum()) if len(grid) > 1 else 0
    live = np.zeros(length, dtype=np.int64) if live_rows is None else np.asarray(live_rows, dtype=np.int64)
    return TemperatureFit(t, float(t[-1]), at_bound, live,
                          np.arange(length) < k1, "staged" if k1 else "grid", (grid[0], grid[-1]), scores, margin, se)


def paired_bootstrap_se(stat: Callable[[np.ndarray], float], a, b, n_items: int, reps: int = 200,
                        seed: int = 0) -> float:
    """Standard error of stat(a, items) - stat(b, items) over ``reps`` bootstrap resamples of the
    ``n_items`` items, the same resample for both (paired): ``stat(x, idx)`` scores candidate x
    on the items idx (with repeats)."""
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(reps):
        idx = rng.integers(0, n_items, n_items)
        diffs.append(stat(a, idx) - stat(b, idx))
    return float(np.std(diffs, ddof=1))


# ----------------------------------------------------------------------------- internals


def _check(logits, labels) -> tuple[torch.Tensor, torch.Tensor]:
    z = torch.as_tensor(logits).double()
    y = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    if z.ndim != 3 or y.shape != z.shape[:2]:
        raise ValueError(f"logits [N, L, c] and labels [N, L] do not match: {tuple(z.shape)}, {tuple(y.shape)}")
    return z, y


def _grad(z: torch.Tensor, y: torch.Tensor, w: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """d/d beta of the weighted mean NLL per column: [K]. z [N, K, c], y, w [N, K], beta [K]."""
    p = torch.softmax(z * beta.view(1, -1, 1), dim=-1)
    zy = torch.gather(z, 2, y[..., None])[..., 0]
    # E_p[z] - z_y written as E_p[z - z_y], so that a nearly sure column keeps its (tiny,
    # negative) sign instead of cancelling to 0.
    g = (p * (z - zy[..., None])).sum(-1)  # (N, K)
    return (g * w).sum(0) / w.sum(0)


def _bisect(z, y, mask, bounds, iters) -> np.ndarray:
    """Per column k the T in ``bounds`` minimizing the mean NLL over the rows with mask: [K].

    The NLL is convex in beta = 1/T (a log-partition minus a linear term), so its derivative
    is increasing in beta and the root is found by bisection on log beta. A column whose
    optimum lies outside ``bounds`` ends on that bound (see :func:`_on_bound`).
    """
    lo_t, hi_t = bounds
    if not 0 < lo_t < 1 < hi_t:
        raise ValueError(f"temperature bounds must satisfy 0 < low < 1 < high, got {bounds}")
    w = torch.ones(y.shape, dtype=torch.float64) if mask is None else torch.as_tensor(mask).double()
    if bool((w.sum(0) == 0).any()):
        raise ValueError("a column to fit has no row")
    K = z.shape[1]
    lo = torch.full((K,), -np.log(hi_t), dtype=torch.float64)  # log beta
    hi = torch.full((K,), -np.log(lo_t), dtype=torch.float64)
    # Decide the bounded columns exactly from the slope at the ends (bisection would only get
    # within rounding of them): slope < 0 at the largest beta -> still falling -> T = low.
    g_top, g_bottom = _grad(z, y, w, hi.exp()), _grad(z, y, w, lo.exp())
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        neg = _grad(z, y, w, mid.exp()) < 0
        lo, hi = torch.where(neg, mid, lo), torch.where(neg, hi, mid)
    t = np.exp(-0.5 * (lo + hi).numpy())
    t[(g_top < 0).numpy()] = lo_t
    t[(g_bottom > 0).numpy()] = hi_t
    return t


def _on_bound(t: np.ndarray, bounds) -> np.ndarray:
    """bool, per value: equal to a bound up to a relative 1e-9."""
    lo, hi = bounds
    return np.isclose(t, lo, rtol=1e-9, atol=0) | np.isclose(t, hi, rtol=1e-9, atol=0)
