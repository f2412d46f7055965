"""Monte Carlo evaluation in plain PyTorch and numpy: no Ray, no MLflow.

``evaluate`` draws M Monte Carlo sequences per item, estimates by
:func:`focus_tune.scoring.montecarlo.estimate` and returns the paper's metrics under the keys used
everywhere else (Tune results, MLflow, reports): ``marginal/ece``, ``conditional/auc``,
``interval/coverage``, ... ``score`` turns any estimates (sampled, Rao-Blackwellized, a
baseline's, a pack's: ``packed_eval.py``) into those metrics, so every row of every table is
scored by one implementation. :class:`Scoring` is how a split is scored (the trial's
validation and test, the baselines' rows), :func:`evaluation_generator` the seed of each
evaluation of a trial.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from ..names import EVENT_SAMPLING
from ..sim.device_split import DeviceSplit
from ..sim.model import Simulator
from . import conformal, metrics, montecarlo, survival
from .montecarlo import Drawn, Estimates


def draw_samples(
    model: Simulator,
    images: torch.Tensor,
    num_samples: int,
    length: int,
    generator: torch.Generator,
    forced_event: int | None,
    prefix: list[int] | None = None,
    chunk: int = 64,
    temperature: torch.Tensor | None = None,
    rao_blackwell: int | None = None,
) -> Drawn:
    """Monte Carlo sequences for every image, ``chunk`` images at a time: samples [N, M, L] on CPU.

    ``forced_event``: the class forced to repeat once drawn, or None to draw every entry from
    the model (see :meth:`Simulator.sample`). ``rao_blackwell`` (the event class): with the
    Rao-Blackwellized sums of the same draws, marginals [N, L, c] and time_pmf [N, L]
    (:meth:`Simulator.sample`).
    """
    parts = [
        model.sample(images[i : i + chunk], num_samples, length, generator, prefix=prefix, forced_event=forced_event,
                     temperature=temperature, rao_blackwell=rao_blackwell)
        for i in range(0, len(images), chunk)
    ]
    if rao_blackwell is None:
        return Drawn(torch.cat([p.cpu() for p in parts]))
    return Drawn(*(torch.cat([p[k].cpu() for p in parts]) for k in range(3)))


@torch.no_grad()
def teacher_forced_logits(model: Simulator, data: DeviceSplit, chunk: int = 256) -> torch.Tensor:
    """Logits z [N, L, c] (float64, CPU) of every item given its true previous entries."""
    model.eval()
    out = [model(data.images[i : i + chunk], data.sequences[i : i + chunk]).double().cpu()
           for i in range(0, len(data), chunk)]
    return torch.cat(out)


def event_stay_probability(logits: torch.Tensor, sequences: torch.Tensor, event: int,
                           temperature: torch.Tensor | None = None,
                           observed: torch.Tensor | None = None) -> float:
    """The model's mean p(y_i = event | x, y_<i) where the true y_{i-1} is the event.

    logits [N, L, c] (teacher forced), sequences [N, L]; temperature [L] rescales entry i.
    The true processes are absorbing, so 1 is right; the penalty of eq. 2 pulls it lower.
    NaN when no item has the event before its last entry. ``observed`` bool [N, L]
    (right-censored data): only entries i that are observed count (then so is y_{i-1}).
    """
    z = logits if temperature is None else logits / temperature.double().view(1, -1, 1)
    p = torch.softmax(z, dim=-1)[:, 1:, event]  # (N, L-1): p(y_i = event), i = 2..L
    after = sequences[:, :-1].cpu() == event
    if observed is not None:
        after &= observed[:, 1:].cpu()
    return float(p[after].mean()) if bool(after.any()) else float("nan")


def _prefixed(stats: dict, prefix: str) -> dict[str, float]:
    return {f"{prefix}/{k}": v for k, v in stats.items() if k != "per_entry"}


def condition_items(labels: np.ndarray, condition_class: int | None) -> np.ndarray | None:
    """Indices of the items whose true Y_1 is the condition, or None when too few (< 2) or none asked."""
    if condition_class is None:
        return None
    keep = np.flatnonzero(labels[:, 0] == condition_class)
    return keep if len(keep) > 1 else None


def score(est: Estimates, labels: np.ndarray, true_times: np.ndarray, n_bins: int = 10,
          exact_marginals: np.ndarray | None = None, condition_class: int | None = None, alpha: float = 0.9,
          groups: dict[str, np.ndarray] | None = None, threads: int = 1,
          observed: np.ndarray | None = None, censored: np.ndarray | None = None) -> tuple[dict, dict]:
    """The paper's metrics of some estimates under the keys used everywhere (``marginal/ece``, ...).

    labels [N, L], true_times [N]; exact_marginals [N, L, c] adds ``marginal/rmse``. With
    ``condition_class`` the conditional metrics score ``est.cond_probs`` on the items of
    :func:`condition_items`. ``alpha`` is the interval's level (for the interval score);
    ``est.time_pmf`` adds ``interval/crps``; ``groups`` (name -> item mask [N]) add the
    coverage of each group, ``interval/coverage_<name>``. ``threads``: the marginal metrics'
    (:func:`focus_tune.scoring.metrics.sequence_metrics`). Returns (metrics, entry-level arrays).

    Right-censored data (``DeviceSplit.observed`` / ``.censored``): every entry-level metric
    (the conditional ones too) is the inverse-probability-of-censoring weighted estimate of
    its value on the full labels (:func:`censoring_weights`: pair (n, i) observed weighs
    1 / G(min(T_n, i)), G estimated on this split), the time-to-event metrics (interval,
    CRPS, the groups' coverage) are IPCW Hajek means with the outcomes the data resolves
    (:func:`time_to_event_scores`), and ``data/censored_items``, ``data/unobserved_entries``,
    ``data/entry_effective_items`` (the smallest Kish effective number of an entry's
    weights) and ``data/largest_entry_weight`` are added. Where the positivity check fails
    (G(e) = 0: nobody observed past e - 1), ``data/positivity`` = e and every metric that
    needs G(e) is NaN (:func:`focus_tune.scoring.survival.positivity_note` says why). None: every
    label is observed, the keys and numbers of fully observed data.
    """
    weights = None
    if observed is not None or censored is not None:
        weights = censoring_weights(labels, true_times, observed, censored)
    marginal = metrics.sequence_metrics(est.probs, labels, n_bins, threads=threads, weights=weights)
    out = _prefixed(marginal, "marginal")
    extras: dict = {"marginal": marginal["per_entry"]}
    out.update(time_to_event_scores(est, true_times, alpha, groups, censored, length=labels.shape[1]))
    if weights is not None:
        out["data/censored_items"] = float(0 if censored is None else np.count_nonzero(censored))
        out["data/unobserved_entries"] = float(0 if observed is None else np.count_nonzero(~np.asarray(observed)))
        out.update(entry_weight_summary(weights))
    extras["interval"] = {"lo": est.lo, "hi": est.hi, "point": est.point, "true": true_times}
    if exact_marginals is not None:
        rmse = metrics.rmse_per_entry(est.probs, exact_marginals)
        out["marginal/rmse"] = float(rmse.mean())
        extras["marginal"]["rmse"] = rmse
    if condition_class is not None:
        keep = condition_items(labels, condition_class)
        out["conditional/items"] = float(0 if keep is None else len(keep))
        if keep is not None and est.cond_probs is not None:
            # Entry 1 is forced (certain) for every item: score entries 2..L only.
            conditional = metrics.sequence_metrics(est.cond_probs, labels[keep, 1:], n_bins,
                                                   weights=None if weights is None else weights[keep, 1:])
            out.update(_prefixed(conditional, "conditional"))
            extras["conditional"] = conditional["per_entry"]
    return out, extras


def censoring_weights(labels: np.ndarray, true_times: np.ndarray, observed: np.ndarray | None,
                      censored: np.ndarray | None) -> np.ndarray:
    """The entry-level weights of a right-censored split: float [N, L],
    :func:`focus_tune.scoring.survival.entry_weights` with G estimated on these items (NaN at the
    entries the positivity check blocks). ``observed`` None: every pair observed."""
    mask = np.ones(np.shape(labels), bool) if observed is None else np.asarray(observed, dtype=bool)
    return survival.entry_weights(mask, np.asarray(true_times), censored)


def entry_weight_summary(weights: np.ndarray) -> dict:
    """The noise keys of weighted entry-level metrics: ``data/entry_effective_items`` (the
    smallest Kish effective number over the entries that have weight), ``data/largest_entry_weight``
    and, where the positivity check blocks entries, ``data/positivity`` (the first one)."""
    out = {}
    blocked = np.flatnonzero(np.isnan(weights).any(axis=0))
    if len(blocked):
        out[survival.POSITIVITY_KEY] = float(blocked[0] + 1)
    usable = [i for i in range(weights.shape[1]) if i not in set(blocked) and (weights[:, i] > 0).any()]
    out["data/entry_effective_items"] = min((survival.kish(weights[:, i]) for i in usable), default=float("nan"))
    out["data/largest_entry_weight"] = float(weights[:, usable].max()) if usable else float("nan")
    return out


def time_to_event_scores(est: Estimates, true_times: np.ndarray, alpha: float = 0.9,
                         groups: dict[str, np.ndarray] | None = None, censored: np.ndarray | None = None,
                         length: int | None = None) -> dict:
    """The time-to-event part of :func:`score`: ``interval/...`` (coverage, relative width and
    MAE, interval score), ``interval/crps`` where ``est.time_pmf`` is given and the coverage
    of each group, ``interval/coverage_<name>``; IPCW-weighted where ``censored`` is given.

    On censored data (:func:`focus_tune.scoring.metrics.interval_metrics` with ``length`` = L, the
    estimates' own where not given): an item cut at L - 1 without the event has T = L, the
    coverage is weighted at min(T, hi) (a censored item observed through its interval's upper
    end is a known miss), every value has its standard error (``interval/<metric>_se``), and
    ``data/effective_items`` and ``data/largest_weight`` (Kish's effective number and the
    largest weight of the time-to-event metrics), ``data/coverage_effective_items`` and
    ``data/positivity`` (where G reaches 0 before L - 1: every value NaN) are added."""
    if censored is None:
        out = _prefixed(metrics.interval_metrics(est.lo, est.hi, est.point, true_times, alpha), "interval")
        if est.time_pmf is not None:
            out["interval/crps"] = metrics.crps(est.time_pmf, true_times)
        for name, mask in (groups or {}).items():
            mask = np.asarray(mask, dtype=bool)
            inside = (true_times >= est.lo) & (true_times <= est.hi)
            out[f"interval/coverage_{name}"] = float(inside[mask].mean()) if mask.any() else float("nan")
        return out
    if length is None:
        length = est.probs.shape[1] if est.probs is not None and np.ndim(est.probs) == 3 else None
    return _censored_time_to_event_scores(est, true_times, alpha, groups, np.asarray(censored, dtype=bool), length)


def _censored_time_to_event_scores(est: Estimates, true_times: np.ndarray, alpha: float,
                                   groups: dict[str, np.ndarray] | None, censored: np.ndarray,
                                   length: int | None) -> dict:
    """:func:`time_to_event_scores` of right-censored items (every metric IPCW-weighted)."""
    summary = metrics.interval_metrics(est.lo, est.hi, est.point, true_times, alpha, censored, length=length,
                                       with_se=True)
    out = {}
    for key, value in summary.items():
        out[key if key.startswith("data/") else f"interval/{key}"] = value
    if est.time_pmf is not None:
        crps, crps_se = metrics.crps(est.time_pmf, true_times, censored, with_se=True)
        out["interval/crps"], out["interval/crps_se"] = crps, crps_se
    if groups:
        G = survival.censoring_survival(true_times, censored, length)
        t, known_censored = survival.known_times(true_times, censored, length)
        w = survival.time_weights(true_times, censored, length, upper=est.hi, G=G)
        inside = (t >= est.lo) & (t <= est.hi) & ~known_censored
    for name, mask in (groups or {}).items():
        mask = np.asarray(mask, dtype=bool)
        wm = w[mask]
        out[f"interval/coverage_{name}"] = float((wm * inside[mask]).sum() / wm.sum()) if wm.sum() > 0 \
            else float("nan")
    return out


def conformal_scores(est: Estimates, true_times: np.ndarray, level: float, items: float, alpha: float = 0.9,
                     groups: dict[str, np.ndarray] | None = None, censored: np.ndarray | None = None) -> dict:
    """:func:`time_to_event_scores` of the estimates with I_alpha replaced by the split
    conformal interval at ``level`` (:func:`focus_tune.scoring.conformal.calibrate` on the validation
    split): the point, the pmf and so MAE and CRPS are the estimates' own. Adds
    ``interval/conformal_level`` (the calibrated level q; inf: too few validation items, the
    interval is the whole range) and ``interval/conformal_items`` (the validation items
    behind it: n, or the effective number under censoring)."""
    if est.time_pmf is None:
        raise ValueError("a conformal interval needs the estimates' time-to-event pmf")
    lo, hi = conformal.intervals(est.time_pmf, level)
    out = time_to_event_scores(replace(est, lo=lo, hi=hi), true_times, alpha, groups, censored)
    out["interval/conformal_level"] = float(level)
    out["interval/conformal_items"] = float(items)
    return out


@dataclass(frozen=True)
class Scoring:
    """How a split is scored: M, the bins, the interval's level, the items, the estimator and
    the sampling of the event (:func:`evaluate`'s settings; the baselines' rows use the same)."""

    num_samples: int  # M
    ece_bins: int
    alpha: float
    items: int | None = None  # the split's first items; None = the whole split
    estimator: str = "counted"  # or "rao_blackwell" (names.ESTIMATORS)
    event_sampling: str = "model"  # or "forced" (names.EVENT_SAMPLING)

    @classmethod
    def of(cls, train, split: str = "test") -> "Scoring":
        """A trial's scoring of ``split`` ("test" or "val") from a :class:`~focus_tune.config.TrainConfig`:
        the test's M and estimator, or the validation's (``train.validation``)."""
        if split == "test":
            return cls(train.num_samples, train.ece_bins, train.alpha, train.test_items, train.estimator,
                       train.event_sampling)
        if split == "val":
            estimator, num_samples = train.validation
            return cls(num_samples, train.ece_bins, train.alpha, train.val_items, estimator, train.event_sampling)
        raise ValueError(f"split must be 'test' or 'val', got {split!r}")

    def evaluate(self, model: Simulator, data: DeviceSplit, event: int, generator: torch.Generator,
                 **options) -> dict:
        """:func:`evaluate` of ``data`` with these settings; ``options``: its others
        (``condition_class``, ``per_entry``, ``temperature``, ``groups``)."""
        return evaluate(model, data, self.num_samples, event, generator, self.ece_bins, self.alpha,
                        event_sampling=self.event_sampling, estimator=self.estimator, **options)


def evaluation_generator(seed: int, epoch: int) -> torch.Generator:
    """The Monte Carlo generator of a trial's evaluation: its validation after ``epoch``, the
    final's test (epoch -1) or the temperature's validation (-3). A fresh one per evaluation,
    from the trial's seed alone, so each is reproduced without the trial's state."""
    return torch.Generator().manual_seed(seed * 100_003 + epoch)


def evaluate(
    model: Simulator,
    data: DeviceSplit,
    num_samples: int,
    event: int,
    generator: torch.Generator,
    n_bins: int = 10,
    alpha: float = 0.9,
    condition_class: int | None = None,
    per_entry: bool = False,
    event_sampling: str = "model",
    temperature: torch.Tensor | None = None,
    groups: dict[str, np.ndarray] | None = None,
    estimator: str = "counted",
) -> dict:
    """Monte Carlo evaluation: marginal metrics, interval metrics and, if asked, conditional ones.

    Marginal P(Y_i | x) and the time-to-event interval come from one set of M samples per
    item. With ``condition_class`` = b, a second set is drawn with Y_1 forced to b (exact
    conditioning) and scored on the items whose true Y_1 is b. Where the data has exact
    marginals, ``marginal/rmse`` (to the truth) is added. On right-censored data
    (``data.observed``, ``data.censored``) the scores are :func:`score`'s masked and
    censoring-weighted ones.

    ``event_sampling``: "model" (default) draws every entry from the model, so a model that
    leaves the event class after reaching it is scored with that leak; "forced" makes the
    event repeat once drawn (faster; exact only for a model that is itself absorbing).
    Either way ``marginal/leak`` is the fraction of sampled sequences that reach the event
    and later leave it (0 when forced) and ``marginal/p_stay`` the model's mean teacher-forced
    p(event -> event) on the data. ``temperature`` [L] samples from softmax(z_i / T_i);
    ``groups`` (name -> item mask) add the coverage per group (see :func:`score`).
    ``estimator``: "counted" (the paper's: class frequencies and the sampled times'
    quantiles) or "rao_blackwell" (the same draws, each entry's probabilities averaged over
    the model's conditionals at the sampled prefixes: unbiased with less Monte Carlo noise;
    the interval from the resulting time-to-event pmf): :func:`focus_tune.scoring.montecarlo.estimate`.
    With ``per_entry`` the entry-level arrays are returned under ``"per_entry"`` (for
    reports and plots), the marginals under ``"probs"`` and the time-to-event pmf under
    ``"time_pmf"``.
    """
    if event_sampling not in EVENT_SAMPLING:
        raise ValueError(f"event_sampling must be one of {EVENT_SAMPLING}, got {event_sampling!r}")
    montecarlo.check_estimator(estimator)
    model.eval()
    L = data.sequences.shape[1]
    forced = event if event_sampling == "forced" else None
    labels = data.sequences.cpu().numpy()
    rb = event if estimator == "rao_blackwell" else None  # the sampler sums its conditionals as it draws
    drawn = draw_samples(model, data.images, num_samples, L, generator, forced_event=forced, temperature=temperature,
                         rao_blackwell=rb)
    keep = condition_items(labels, condition_class)
    given = None
    if keep is not None:
        given = draw_samples(model, data.images[torch.as_tensor(keep, device=data.images.device)], num_samples, L,
                             generator, forced, prefix=[condition_class], temperature=temperature, rao_blackwell=rb)
    est = montecarlo.estimate(drawn, estimator, event, model.num_classes, alpha, given)
    out, extras = score(est, labels, data.time_to_event.cpu().numpy(), n_bins, data.exact_marginals, condition_class,
                        alpha, groups, observed=data.observed_numpy, censored=data.censored)
    out["marginal/leak"], _ = montecarlo.leak(drawn.samples, event)
    out["marginal/p_stay"] = event_stay_probability(teacher_forced_logits(model, data), data.sequences, event,
                                                    temperature, data.observed)
    if per_entry:
        out["per_entry"] = extras
        out["probs"] = est.probs
        out["time_pmf"] = est.time_pmf
    return out


def test_result(out: dict, extras: dict, probs: np.ndarray, labels: np.ndarray, n_bins: int,
                entries: list[int] | None = None, observed: np.ndarray | None = None,
                weights: np.ndarray | None = None) -> dict:
    """The flat test result of the reports: ``test/<metric>`` keys and ``test_per_entry``.

    ``test_per_entry`` (plain lists and numbers, ready for a JSON file) holds the entry-level
    arrays of :func:`score` and reliability curves of the marginal probabilities [N, L, c] at
    ``entries`` (1-based; default the first, L/4 and L/2): the report draws its figures from
    them. ``observed`` bool [N, L] (right-censored data): a curve over the entry's observed
    items; an entry without any has none. ``weights`` float [N, L] (right-censored data,
    :func:`censoring_weights`; what the scores use, in place of ``observed``): the weighted
    curve of :func:`focus_tune.scoring.metrics.reliability_curve` (counts are sums of weights);
    an entry without weight, or blocked by the positivity check, has none.
    """
    L = labels.shape[1]
    per_entry = dict(extras)
    per_entry["reliability"] = {}
    for i in entries or sorted({1, L // 4 + 1, L // 2 + 1}):
        if weights is not None:
            w = np.asarray(weights)[:, i - 1]
            if (w > 0).any() and not np.isnan(w).any():
                per_entry["reliability"][str(i)] = metrics.reliability_curve(probs[:, i - 1], labels[:, i - 1],
                                                                             n_bins, weights=w)
            continue
        rows = slice(None) if observed is None else np.asarray(observed)[:, i - 1]
        if observed is None or rows.any():
            per_entry["reliability"][str(i)] = metrics.reliability_curve(probs[rows, i - 1], labels[rows, i - 1],
                                                                         n_bins)
    result = {f"test/{k}": v for k, v in out.items()}
    result["test_per_entry"] = _jsonable(per_entry)
    return result


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        return [None if not np.isfinite(x) else float(x) for x in obj.ravel()]
    return obj
