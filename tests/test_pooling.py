"""The random-effects pooled difference and the equivalence test (focus_tune/replicate/pooling.py)."""

import math

import numpy as np
import pytest

from focus_tune.replicate.pooling import equivalence, random_effects
from focus_tune.report.stats import t_quantile


def _reference(groups, level=0.95):
    """DerSimonian-Laird with the modified Hartung-Knapp interval, written out scalar by scalar."""
    y = [sum(g) / len(g) for g in groups]
    v = [sum((x - m) ** 2 for x in g) / (len(g) - 1) / len(g) for g, m in zip(groups, y)]
    w = [1 / vi for vi in v]
    fixed = sum(wi * yi for wi, yi in zip(w, y)) / sum(w)
    q = sum(wi * (yi - fixed) ** 2 for wi, yi in zip(w, y))
    c = sum(w) - sum(wi * wi for wi in w) / sum(w)
    tau2 = max(0.0, (q - (len(y) - 1)) / c)
    ws = [1 / (vi + tau2) for vi in v]
    mean = sum(wi * yi for wi, yi in zip(ws, y)) / sum(ws)
    var = sum(wi * (yi - mean) ** 2 for wi, yi in zip(ws, y)) / ((len(y) - 1) * sum(ws))
    var = max(var, 1 / sum(ws))  # never below the plain random-effects variance
    half = t_quantile(0.5 + level / 2, len(y) - 1) * math.sqrt(var)
    return mean, mean - half, mean + half, tau2


def test_the_pooled_difference_matches_the_formulas_written_out():
    rng = np.random.default_rng(3)
    for spread in (0.0, 0.002, 0.02):  # from no between-scenario variance to a lot
        groups = [list(rng.normal(rng.normal(0, spread), 0.003, 5)) for _ in range(5)]
        got = random_effects(groups)
        mean, low, high, tau2 = _reference(groups)
        assert (got["mean"], got["low"], got["high"], got["tau2"]) == pytest.approx((mean, low, high, tau2), rel=1e-12)
    assert random_effects([[0.01, 0.02, 0.03]] * 3)["tau2"] == 0.0  # identical scenarios: no heterogeneity


def test_scenarios_that_happen_to_agree_do_not_narrow_the_interval_below_their_own_errors():
    """Two scenarios with nearly equal means: the unmodified Hartung-Knapp variance (their
    weighted spread) would be tiny; the modified one keeps at least 1 / sum(w)."""
    a, b = [-0.03, -0.02, -0.01, 0.0, -0.011], [-0.021, -0.015, -0.012, -0.018, -0.009]
    got = random_effects([a, b])
    v = [np.var(g, ddof=1) / len(g) for g in (a, b)]
    half = t_quantile(0.975, 1) * math.sqrt(1 / sum(1 / vi for vi in v))  # tau^2 = 0 here
    assert got["tau2"] == 0.0 and (got["high"] - got["low"]) / 2 == pytest.approx(half)
    assert got["low"] < min(np.mean(a), np.mean(b)) - 0.02


def test_one_scenario_is_its_own_t_interval_and_too_few_searches_give_no_number():
    one = random_effects([[0.01, 0.02, 0.04]])
    half = t_quantile(0.975, 2) * np.std([0.01, 0.02, 0.04], ddof=1) / math.sqrt(3)
    assert (one["low"], one["high"]) == pytest.approx((0.07 / 3 - half, 0.07 / 3 + half))
    assert math.isnan(random_effects([[0.01, 0.02], [0.03]])["mean"])  # one search: no standard error
    assert math.isnan(random_effects([])["mean"])


def test_equivalence_is_the_90_percent_interval_inside_the_margin():
    d = [0.001, -0.001, 0.0005, 0.0, -0.0005]
    eq = equivalence(d, 0.005)
    half = t_quantile(0.95, 4) * np.std(d, ddof=1) / math.sqrt(5)
    assert eq["equivalent"] and (eq["low"], eq["high"]) == pytest.approx((-half, half))
    assert not equivalence(d, 0.0005)["equivalent"]  # the interval reaches past a margin this small
    assert not equivalence(d, 0.0)["equivalent"]  # no headroom: nothing to be equivalent within
    assert not equivalence([0.001], 0.1)["equivalent"]
