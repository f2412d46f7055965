"""A final's scoring on the test set: its metrics, its ``+conformal`` row and, for a ``none``
final, the temperature-scaled baseline; plain settings in (the ``TrainConfig``, the
``DataInfo``, the splits, the seed), metrics and per-entry arrays out. No Ray, no files.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ..config.space import TrainConfig
from ..names import (
    CONFORMAL_PREFIX,
    POSTHOC_SECONDS,
    TDT_CONFORMAL_PREFIX,
    TDT_PREFIX,
    TEMPERATURE_SCALED,
    TIME_DEPENDENT_TEMPERATURE,
    TS_CONFORMAL_PREFIX,
    TS_PREFIX,
)
from ..procedure.plan import tie_rule
from ..scoring import conformal
from ..scoring.evaluation import Scoring, censoring_weights, conformal_scores, evaluation_generator, test_result
from ..scoring.metrics import sequence_ece
from ..scoring.montecarlo import Estimates
from ..scoring.temperature import GRID, TemperatureFit, choose_staged, live_mask, paired_bootstrap_se
from ..sim.device_split import DeviceSplit
from ..sim.model import Simulator
from ..sim.model_io import DataInfo
from .on_device import TrialSplits


def score_final(model: Simulator, splits: TrialSplits, train: TrainConfig, info: DataInfo, seed: int,
                with_temperature: bool = False, k1: int | None = None) -> tuple[dict, dict]:
    """A final's test metrics and its per-entry arrays (for the report's figures: the
    ``test_per_entry.json`` of its checkpoint); ``with_temperature`` (a ``none`` final) adds
    its temperature-scaled baseline and, with the schedule's ``k1``, its time-dependent
    temperature (T_1..T_k1, then one T for the rest).

    Each temperature is chosen on the validation split (see :func:`fit_temperature`), then the
    test set is evaluated again with the tempered model and the unscaled evaluation's uniforms
    (with every T = 1, that evaluation itself), reported under ``temperature-scaled/test/...``
    (``time-dependent temperature/test/...``) with ``temperature_pooled`` (the one T, or the
    rest's), ``temperature_<i>`` (entry i's own), ``temperature_at_bound`` (entries whose
    temperature is at the edge of the grid, where the optimum may lie beyond it),
    ``temperature_margin`` and ``_margin_se`` (the last stage's validation margin over T = 1
    and its noise), the grid's validation ECEs per stage in the per-entry arrays, and its cost,
    ``time/temperature_s`` (``time/time_dependent_temperature_s``): validation sampling only.
    """
    t0 = time.perf_counter()
    test, scoring = splits.test, Scoring.of(train)
    labels = test.sequences.cpu().numpy()

    def evaluated(temperature: torch.Tensor | None = None) -> dict:  # the unscaled evaluation's uniforms
        return scoring.evaluate(model, test, info.event, evaluation_generator(seed, -1),
                                condition_class=info.condition_class, per_entry=True, temperature=temperature,
                                groups=splits.test_groups)

    out = evaluated()
    per_entry, probs, pmf = out.pop("per_entry"), out.pop("probs"), out.pop("time_pmf")
    weights = split_weights(test)
    result = test_result(out, per_entry, probs, labels, train.ece_bins, weights=weights)
    files = {"test_per_entry": result.pop("test_per_entry")}
    t1 = time.perf_counter()
    level = _conformal_level(model, splits, train, info, seed)
    result.update(_conformal_row(CONFORMAL_PREFIX, level, per_entry, probs, pmf, splits, train.alpha))
    result["time/conformal_s"] = time.perf_counter() - t1
    if with_temperature:
        rows = [(TEMPERATURE_SCALED, TS_PREFIX, TS_CONFORMAL_PREFIX, 0)]
        if k1 is not None:
            rows.append((TIME_DEPENDENT_TEMPERATURE, TDT_PREFIX, TDT_CONFORMAL_PREFIX, min(k1, labels.shape[1] - 1)))
        scored: dict = {}  # the validations of both rows: a temperature vector both try is sampled once
        for row, prefix, conformal_prefix, stages in rows:
            t1 = time.perf_counter()
            fit = fit_temperature(model, splits, train, info, seed, stages, scored)
            result[POSTHOC_SECONDS[row]] = time.perf_counter() - t1  # its validation sampling: the row's whole cost
            if (fit.temperature == 1.0).all():  # no change: the same draws (below) would give the same numbers
                ts, ts_entry, ts_probs, ts_pmf, ts_level = dict(out), dict(per_entry), probs, pmf, level
            else:  # the rows differ by the temperature alone
                temperature = torch.as_tensor(fit.temperature)
                ts = evaluated(temperature)
                ts_entry, ts_probs, ts_pmf = ts.pop("per_entry"), ts.pop("probs"), ts.pop("time_pmf")
                ts_level = _conformal_level(model, splits, train, info, seed, temperature)
            result.update(_conformal_row(conformal_prefix, ts_level, ts_entry, ts_probs, ts_pmf, splits, train.alpha))
            ts_entry["temperature"] = fit.temperature
            ts_entry["temperature_grid"] = {label: {"T": list(scores), "val_ece": list(scores.values())}
                                            for label, scores in fit.scores.items()}
            ts.update(fit.summary())  # temperature_pooled, _at_bound, _mean, _min, _max, _margin, _margin_se, _<i>
            scaled = test_result(ts, ts_entry, ts_probs, labels, train.ece_bins, weights=weights)
            files[prefix + "per_entry"] = scaled.pop("test_per_entry")
            result.update({prefix + k.removeprefix("test/"): v for k, v in scaled.items()})
    result["time/test_s"] = time.perf_counter() - t0  # the test evaluations, the temperature's fit included
    return result, files


def _conformal_level(model: Simulator, splits: TrialSplits, train: TrainConfig, info: DataInfo, seed: int,
                     temperature: torch.Tensor | None = None) -> tuple[float, float]:
    """The split conformal level of I_alpha and the validation items behind it
    (:func:`focus_tune.scoring.conformal.calibrate`): the validation split scored as the test is (the
    test's estimator and M, at ``temperature``), so that its scores and the test's are
    exchangeable; one fresh generator, the same uniforms at every temperature."""
    val = splits.val
    out = Scoring.of(train).evaluate(model, val, info.event, evaluation_generator(seed, -4), per_entry=True,
                                     temperature=temperature)
    return conformal.calibrate(out["time_pmf"], val.time_to_event.cpu().numpy(), train.alpha, val.censored)


def _conformal_row(prefix: str, level: tuple[float, float], per_entry: dict, probs, pmf, splits: TrialSplits,
                   alpha: float) -> dict:
    """The ``+conformal`` row of a test evaluation (its point and pmf, the conformal interval at
    ``level``), keyed ``<prefix><group>/<metric>``."""
    interval = per_entry["interval"]
    est = Estimates(probs, interval["lo"], interval["hi"], interval["point"], time_pmf=pmf)
    row = conformal_scores(est, interval["true"], *level, alpha=alpha, groups=splits.test_groups,
                           censored=splits.test.censored)
    return {prefix + k: v for k, v in row.items()}


def split_weights(data: DeviceSplit) -> np.ndarray | None:
    """The entry-level censoring weights of a right-censored split [N, L]
    (:func:`~focus_tune.scoring.evaluation.censoring_weights`, what its scores use), None when every
    entry is observed."""
    if data.observed is None:
        return None
    return censoring_weights(data.sequences.cpu().numpy(), data.time_to_event.cpu().numpy(), data.observed_numpy,
                             data.censored)


def fit_temperature(model: Simulator, splits: TrialSplits, train: TrainConfig, info: DataInfo,
                    seed: int, k1: int = 0, scored: dict | None = None) -> TemperatureFit:
    """A temperature row's temperatures, chosen on :data:`~focus_tune.scoring.temperature.GRID`
    by the validation sampled marginal ECE, the criterion the search picks lambda by, with its
    tie rule (``train.tie_se``: among the temperatures within that many standard errors of
    the lowest, the one closest to 1; the SE of a difference from a paired bootstrap over the
    validation items): ``k1 = 0`` one T for every entry (``temperature-scaled``), else
    T_1..T_k1 one entry at a time and then one T for the rest (``time-dependent temperature``,
    :func:`~focus_tune.scoring.temperature.choose_staged`).

    Not a teacher-forced NLL fit: on the quick H.E.R.O. model the NLL fit per entry on all
    rows put 61 of 100 temperatures at 0.05 (no live validation row after entry 41) and froze
    the late samples, and the NLL fits on live rows only (one T, or one per entry) still
    sampled a worse test ECE than T = 1 (docs/results/temperature/README.md). The validation
    items are the search's (``val_items``); every candidate draws the same uniforms (one fresh
    generator each), so their differences are the temperature's, not Monte Carlo noise; and a
    vector sampled once is not sampled again (``scored``: temperature vector -> its validation
    ECE and probabilities, shared by a final's two rows: each stage's candidate at the value
    already chosen is the stage before's winner, and all-ones is in both rows).
    """
    val, validation = splits.val, Scoring.of(train, "val")
    labels = val.sequences.cpu().numpy()
    observed = val.observed_numpy  # right-censored data: every score over the observed labels, weighted
    weights = split_weights(val)
    L = labels.shape[1]
    scored = {} if scored is None else scored

    def val_ece(t: np.ndarray) -> float:
        if tuple(t) not in scored:
            out = validation.evaluate(model, val, info.event, evaluation_generator(seed, -3),
                                      temperature=torch.as_tensor(t), per_entry=True)
            scored[tuple(t)] = out["marginal/ece"], out["probs"]
        return scored[tuple(t)][0]

    def on_items(t: np.ndarray, idx: np.ndarray) -> float:
        return sequence_ece(scored[tuple(t)][1][idx], labels[idx], train.ece_bins,
                            weights=None if weights is None else weights[idx])

    def difference_se(a: np.ndarray, b: np.ndarray) -> float:
        return paired_bootstrap_se(on_items, a, b, len(labels), seed=seed)

    def decide(scored: list, se) -> int:
        return tie_rule(scored, train.tie_se, se)[0]

    return choose_staged(val_ece, GRID, L, k1, decide, difference_se, live_mask(labels, info.event, observed).sum(0))
