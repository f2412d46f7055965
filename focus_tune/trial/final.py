"""A final's scoring on the test set: its metrics, its ``+conformal`` row and, for a ``none``
final, the temperature-scaled baseline; plain settings in (the ``TrainConfig``, the
``DataInfo``, the splits, the seed), metrics and per-entry arrays out. No Ray, no files.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ..config.space import TrainConfig
from ..names import CONFORMAL_PREFIX, TS_CONFORMAL_PREFIX, TS_PREFIX
from ..scoring import conformal
from ..scoring.evaluation import Scoring, censoring_weights, conformal_scores, evaluation_generator, test_result
from ..scoring.metrics import sequence_ece
from ..scoring.montecarlo import Estimates
from ..scoring.temperature import GRID, TemperatureFit, choose_on_grid, live_mask, paired_bootstrap_se
from ..sim.device_split import DeviceSplit
from ..sim.model import Simulator
from ..sim.model_io import DataInfo
from .on_device import TrialSplits


def score_final(model: Simulator, splits: TrialSplits, train: TrainConfig, info: DataInfo, seed: int,
                with_temperature: bool = False) -> tuple[dict, dict]:
    """A final's test metrics and its per-entry arrays (for the report's figures: the
    ``test_per_entry.json`` of its checkpoint); ``with_temperature`` (a ``none`` final) adds
    its temperature-scaled baseline.

    Temperature scaling: one temperature chosen on the validation split (see
    :func:`fit_temperature`), then the same evaluation of the test set with the tempered
    model and the unscaled evaluation's uniforms (with T = 1, that evaluation itself), reported
    under ``temperature-scaled/test/...`` with ``temperature_pooled`` (the value used),
    ``temperature_at_bound`` (entries whose temperature is at the edge of the grid, where the
    optimum may lie beyond it), ``temperature_margin`` and ``_margin_se`` (the validation margin
    over T = 1 and its noise) and the grid's validation ECEs in the per-entry arrays.
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
        t1 = time.perf_counter()
        fit = fit_temperature(model, splits, train, info, seed)
        result["time/temperature_s"] = time.perf_counter() - t1
        if fit.pooled == 1.0:  # no change: the same draws (below) would give the same numbers
            ts, ts_entry, ts_probs, ts_pmf, ts_level = dict(out), dict(per_entry), probs, pmf, level
        else:  # the rows differ by the temperature alone
            temperature = torch.as_tensor(fit.temperature)
            ts = evaluated(temperature)
            ts_entry, ts_probs, ts_pmf = ts.pop("per_entry"), ts.pop("probs"), ts.pop("time_pmf")
            ts_level = _conformal_level(model, splits, train, info, seed, temperature)
        result.update(_conformal_row(TS_CONFORMAL_PREFIX, ts_level, ts_entry, ts_probs, ts_pmf, splits, train.alpha))
        ts_entry["temperature"] = fit.temperature
        ts_entry["temperature_grid"] = {"T": list(fit.scores), "val_ece": list(fit.scores.values())}
        ts.update(fit.summary())  # temperature_pooled, _at_bound, _mean, _min, _max, _margin, _margin_se
        scaled = test_result(ts, ts_entry, ts_probs, labels, train.ece_bins, weights=weights)
        files[TS_PREFIX + "per_entry"] = scaled.pop("test_per_entry")
        result.update({TS_PREFIX + k.removeprefix("test/"): v for k, v in scaled.items()})
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
                    seed: int) -> TemperatureFit:
    """The temperature-scaled baseline's temperature: one T on :data:`~focus_tune.scoring.temperature.GRID`
    with the lowest validation sampled marginal ECE, the criterion the search picks lambda by,
    kept only if it beats T = 1 by more than twice the standard error of the difference (a
    paired bootstrap over the validation items).

    Not a teacher-forced NLL fit: on the quick H.E.R.O. model the NLL fit per entry on all
    rows put 61 of 100 temperatures at 0.05 (no live validation row after entry 41) and froze
    the late samples, and the NLL fits on live rows only (one T, or one per entry) still
    sampled a worse test ECE than T = 1 (docs/results/temperature/README.md). Without the
    noise guard the grid chose T = 0.9 on two of three quick H.E.R.O. seeds by validation
    margins of 0.0006-0.0015 and made test entries 41-100 worse (ECE 0.0094 -> 0.0250 and
    0.0066 -> 0.0199). The validation items are the search's (``val_items``); every candidate
    draws the same uniforms (one fresh generator each), so their differences are the
    temperature's, not Monte Carlo noise.
    """
    val, validation = splits.val, Scoring.of(train, "val")
    labels = val.sequences.cpu().numpy()
    observed = val.observed_numpy  # right-censored data: every score over the observed labels, weighted
    weights = split_weights(val)
    L = labels.shape[1]
    probs = {}

    def val_ece(t: float) -> float:
        out = validation.evaluate(model, val, info.event, evaluation_generator(seed, -3),
                                  temperature=torch.full((L,), t), per_entry=True)
        probs[t] = out["probs"]
        return out["marginal/ece"]

    def on_items(t: float, idx: np.ndarray) -> float:
        return sequence_ece(probs[t][idx], labels[idx], train.ece_bins, weights=None if weights is None else weights[idx])

    def margin_se(best: float, one: float) -> float:
        return paired_bootstrap_se(on_items, one, best, len(labels), seed=seed)

    return choose_on_grid(val_ece, GRID, L, live_mask(labels, info.event, observed).sum(0), margin_se=margin_se)
