"""Temperature fits on live rows (focus_tune/scoring/temperature.py) against known answers and scipy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax

from chain import chain_simulator, draw_chain
from focus_tune.scoring import montecarlo
from focus_tune.scoring.evaluation import draw_samples, evaluate, teacher_forced_logits
from focus_tune.scoring.temperature import BOUNDS, fit_per_entry, fit_pooled, live_mask, paired_bootstrap_se
from focus_tune.sim.device_split import DeviceSplit

EVENT = 3  # the absorbing class of the synthetic data below


def _nll(z, y, t):
    return -log_softmax(z / t, axis=-1)[np.arange(len(y)), y].mean()


def _scipy_t(z, y):
    return minimize_scalar(lambda t: _nll(z, y, t), bounds=BOUNDS, method="bounded", options={"xatol": 1e-10}).x


def _data(n=400, L=6, c=4, t_true=1.7, seed=0, die_after=None):
    """Logits z [n, L, c] and labels drawn from softmax(z / t_true); an item is dead (every
    label the event) from a random entry on, or from ``die_after`` entries on."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 2.5, (n, L, c))
    p = np.exp(log_softmax(z / t_true, axis=-1))
    y = (rng.random((n, L, 1)) > p.cumsum(-1)).sum(-1).clip(max=c - 1)
    y[y == EVENT] = 0  # the event only in the dead tail below, so that the live mask is what we set
    end = rng.integers(1, L + 1, n) if die_after is None else np.full(n, die_after)
    for k in range(n):
        y[k, end[k]:] = EVENT
    return z, y


def test_live_mask_by_hand():
    y = np.array([[0, 3, 3, 3], [1, 2, 3, 3], [3, 3, 3, 3]])
    np.testing.assert_array_equal(live_mask(y, 3), [[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])


def test_pooled_recovers_a_known_temperature():
    # Logits of a model that is too sure by a factor 2.5: labels drawn from softmax(z / 2.5).
    rng = np.random.default_rng(3)
    n, L, c = 3000, 4, 5
    z = rng.normal(0, 3.0, (n, L, c))
    p = np.exp(log_softmax(z / 2.5, axis=-1))
    y = (rng.random((n, L, 1)) > p.cumsum(-1)).sum(-1).clip(max=c - 1)
    fit = fit_pooled(z, y, event=c + 7)  # no label is the event: every row is live
    assert fit.pooled == pytest.approx(2.5, rel=0.05)
    np.testing.assert_array_equal(fit.temperature, np.full(L, fit.pooled))
    assert fit.at_bound == 0 and not fit.pooled_at_bound
    np.testing.assert_array_equal(fit.live_rows, np.full(L, n))
    # And it is the exact minimizer of the pooled NLL (scipy on the flattened rows).
    assert fit.pooled == pytest.approx(_scipy_t(z.reshape(-1, c), y.ravel()), rel=1e-6)


def test_pooled_uses_only_live_rows():
    z, y = _data()
    live = live_mask(y, EVENT)
    fit = fit_pooled(z, y, EVENT)
    assert fit.pooled == pytest.approx(_scipy_t(z[live], y[live]), rel=1e-6)
    # Anything on the dead rows (their logits) leaves the fit unchanged ...
    z2 = z.copy()
    z2[~live] = np.random.default_rng(9).normal(0, 30, (int((~live).sum()), z.shape[2]))
    assert fit_pooled(z2, y, EVENT).pooled == pytest.approx(fit.pooled, rel=1e-12)
    # ... while an all-rows fit would move: the dead rows do weigh there.
    assert _scipy_t(z2.reshape(-1, 4), y.ravel()) != pytest.approx(fit.pooled, rel=1e-3)


def test_per_entry_fits_entries_with_enough_live_rows_and_falls_back_elsewhere():
    z, y = _data(n=500, L=6, seed=1)
    live = live_mask(y, EVENT)
    counts = live.sum(0)
    min_rows = int(counts[3])  # entries 1..4 have at least this many, 5 and 6 fewer (items die over time)
    assert counts[4] < min_rows
    fit = fit_per_entry(z, y, EVENT, min_rows=min_rows)
    pooled = fit_pooled(z, y, EVENT).pooled
    np.testing.assert_array_equal(fit.own_fit, counts >= min_rows)
    np.testing.assert_array_equal(fit.live_rows, counts)
    assert fit.pooled == pytest.approx(pooled, rel=1e-12)
    for i in range(z.shape[1]):
        expected = _scipy_t(z[live[:, i], i], y[live[:, i], i]) if fit.own_fit[i] else pooled
        assert fit.temperature[i] == pytest.approx(expected, rel=1e-6)
    assert fit.at_bound == 0


def test_entries_with_only_dead_rows_do_not_move_the_fit():
    # Every item dies after entry 3: entries 5.. have no live row (entry 4 is live: y_3 is alive).
    z, y = _data(n=300, L=8, seed=2, die_after=3)
    assert live_mask(y, EVENT)[:, 4:].sum() == 0
    a = fit_per_entry(z, y, EVENT, min_rows=50)
    b = fit_per_entry(z[:, :4], y[:, :4], EVENT, min_rows=50)
    np.testing.assert_allclose(a.temperature[:4], b.temperature, rtol=1e-12)
    np.testing.assert_allclose(a.temperature[4:], a.pooled, rtol=1e-12)  # the dead entries take the pooled T
    assert a.pooled == pytest.approx(b.pooled, rel=1e-12)
    assert a.at_bound == b.at_bound  # the dead entries add no temperature at a bound


def test_at_bound_is_counted():
    z, y = _data(n=300, L=5, seed=4, die_after=5)
    # Entry 2: every label is the model's sure top class -> its NLL keeps falling as T -> 0.
    y[:, 1] = z[:, 1, :EVENT].argmax(-1)
    z[:, 1, :] = 0.0
    z[np.arange(len(y)), 1, y[:, 1]] = 4.0
    fit = fit_per_entry(z, y, EVENT, min_rows=10)
    assert fit.temperature[1] == BOUNDS[0]
    assert fit.at_bound == 1
    assert fit.summary()["temperature_at_bound"] == 1.0
    # A pooled fit on sure labels only: the one temperature, and so all L entries, at the bound.
    sure = fit_pooled(z[:, 1:2].repeat(5, axis=1), y[:, 1:2].repeat(5, axis=1), EVENT)
    assert sure.pooled == BOUNDS[0] and sure.pooled_at_bound and sure.at_bound == 5
    # Labels that contradict the logits everywhere: T at the upper bound.
    flat = fit_pooled(-z[:, 1:2], y[:, 1:2], EVENT)
    assert flat.pooled == BOUNDS[1] and flat.at_bound == 1


def test_the_tie_rule_keeps_t_1_unless_a_temperature_beats_it_by_more_than_the_noise():
    """choose_staged with the search's tie rule: quick H.E.R.O. seed 0's validation ECEs (0.9
    beats 1.0 by 0.0015): within one SE of the lowest, T = 1 is kept; beyond it, 0.9 wins."""
    from focus_tune.procedure.plan import tie_rule
    from focus_tune.scoring.temperature import choose_staged

    ece = {0.9: 0.0193, 1.0: 0.0208, 1.1: 0.0225}

    def choose(se, tie_se=1.0):
        return choose_staged(lambda t: ece[float(t[0])], [0.9, 1.0, 1.1], 4, 0,
                             lambda scored, diff_se: tie_rule(scored, tie_se, diff_se)[0], lambda a, b: se)

    kept = choose(0.002)  # 0.0015 < 1 x 0.002
    assert kept.pooled == 1.0 and kept.margin == 0.0 and kept.margin_se == 0.0 and kept.at_bound == 0
    moved = choose(0.001)  # 0.0015 > 1 x 0.001
    assert moved.pooled == 0.9 and moved.at_bound == 4  # 0.9 is the grid's edge
    assert moved.margin == pytest.approx(0.0015) and moved.margin_se == 0.001
    assert moved.summary()["temperature_margin"] == pytest.approx(0.0015)
    assert choose(0.001, tie_se=2.0).pooled == 1.0  # the old 2-SE guard kept it
    assert moved.scores == {"all": ece}


def test_paired_bootstrap_se_matches_the_standard_error_of_a_mean_difference():
    rng = np.random.default_rng(3)
    a, b = rng.normal(0, 1, 400), rng.normal(0, 1, 400)
    shared = rng.normal(0, 5, 400)  # common to both candidates: pairing must cancel it
    x, y = a + shared, b + shared
    se = paired_bootstrap_se(lambda v, idx: v[idx].mean(), x, y, 400, reps=2000, seed=1)
    assert se == pytest.approx(np.std(x - y, ddof=1) / np.sqrt(400), rel=0.1)
    unpaired = np.sqrt(x.var(ddof=1) / 400 + y.var(ddof=1) / 400)
    assert se < unpaired / 3


FAST = np.array([[0.65, 0.05, 0.3], [0.05, 0.65, 0.3], [0.0, 0.0, 1.0]])  # class 2 absorbing, hazard 0.3


def test_sampled_evaluation_with_the_fit_does_not_freeze_late_entries():
    """A chain simulator twice too unsure (logits halved) on data that die young.

    No validation sequence is alive late, so an all-rows per-entry fit would put those entries
    at T = 0.05 and freeze the still-alive sampled sequences on their top action (class 0
    stays 0). The live fit recovers T = 0.5 and the samples reach the absorbing class as the
    chain does (it survives 40 entries with probability 0.7^40 < 1e-6).
    """
    sim = chain_simulator(P=FAST)
    with torch.no_grad():
        sim.head.weight.mul_(0.5)
        sim.head.bias.mul_(0.5)
    n, L, event = 150, 40, 2
    seq = draw_chain(n, 1, L, np.random.default_rng(0), P=FAST)[:, 0]
    times = montecarlo.time_to_event(seq[:, None], event)[:, 0]
    data = DeviceSplit(images=torch.zeros(n, 3, 8, 8, dtype=torch.uint8), sequences=torch.as_tensor(seq),
                 time_to_event=torch.as_tensor(times))
    live = live_mask(seq, event).sum(0)
    dead = live == 0
    assert dead[-20:].all()  # the late entries say nothing: no live row there

    fit = fit_per_entry(teacher_forced_logits(sim, data), seq, event, min_rows=50)
    assert fit.pooled == pytest.approx(0.5, rel=0.15)
    assert fit.at_bound == 0
    np.testing.assert_array_equal(fit.temperature[dead], fit.pooled)

    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    tvec = torch.as_tensor(fit.temperature)
    r = evaluate(sim, data, 100, event, gen(), temperature=tvec, per_entry=True)
    assert (np.asarray(r["per_entry"]["interval"]["hi"]) >= L).mean() < 0.02
    assert r["marginal/leak"] == 0.0  # the chain's END is sure: a temperature near 1 keeps it

    # The sampled sequences still alive where the data have no live row left (the same ones
    # under both temperature vectors: same uniforms, same temperatures before that entry).
    first_dead = int(np.flatnonzero(dead)[0])  # 0-based entry
    frozen = fit.temperature.copy()
    frozen[dead] = BOUNDS[0]  # the failure this guards against: T = 0.05 where no row is live
    t_fit, t_frozen = (montecarlo.time_to_event(draw_samples(sim, data.images, 200, L, gen(), None,
                                                             temperature=torch.as_tensor(t)).samples, event)
                       for t in (fit.temperature, frozen))
    alive = t_fit > first_dead
    np.testing.assert_array_equal(alive, t_frozen > first_dead)
    assert alive.sum() >= 20
    assert (t_fit[alive] >= L).mean() < 0.05  # they go on to END, as the chain does (0.7 per entry)
    assert (t_frozen[alive] >= L).mean() > 0.9  # frozen on their top action, never END


def test_the_unregularized_final_reports_its_grid_temperature():
    """trial.score_final of a 'none' final (no Ray) on the too-unsure chain simulator: the
    temperature-scaled keys, the chosen T with its at-bound count, the grid's validation ECEs."""
    import dataclasses

    from focus_tune.config.space import load_search_config, space_path
    from focus_tune.data.dataset_reader import Split as StoredSplit
    from focus_tune.procedure.job import Splits
    from focus_tune.scoring.temperature import GRID
    from focus_tune.sim.model_io import DataInfo
    from focus_tune.trial import TrialSplits, score_final

    sim = chain_simulator(P=FAST)
    with torch.no_grad():
        sim.head.weight.mul_(0.5)
        sim.head.bias.mul_(0.5)
    n, L, event = 400, 40, 2

    def split(name, seed, n=n):
        seq = draw_chain(n, 1, L, np.random.default_rng(seed), P=FAST)[:, 0]
        return StoredSplit(name, np.zeros((n, 3, 8, 8), dtype=np.uint8), seq,
                           montecarlo.time_to_event(seq[:, None], event)[:, 0], None)

    train = dataclasses.replace(load_search_config(space_path("hero"), "smoke").train, num_samples=50,
                                val_items=None, test_items=None, event_sampling="model")
    info = DataInfo(num_classes=3, event=event, condition_class=0, in_channels=3)

    def splits(n=n, train=train):
        return TrialSplits(Splits(split("train", 3, n), split("val", 1, n), split("test", 2, n)), train, info,
                           torch.device("cpu"))

    out, files = score_final(sim, splits(), train, info, seed=0, with_temperature=True, k1=3)

    t = out["temperature-scaled/test/temperature_pooled"]
    assert t in GRID and t <= 0.9  # the model is too unsure: the validation ECE asks for a cooler T
    assert out["temperature-scaled/test/temperature_at_bound"] == (L if t in (min(GRID), max(GRID)) else 0)
    assert out["temperature-scaled/test/temperature_mean"] == pytest.approx(t)
    assert "temperature-scaled/test/marginal/ece" in out and "test/marginal/ece" in out
    grid = files["temperature-scaled/test/per_entry"]["temperature_grid"]["all"]
    assert grid["T"] == list(GRID) and len(grid["val_ece"]) == len(GRID)
    margin, se = out["temperature-scaled/test/temperature_margin"], out["temperature-scaled/test/temperature_margin_se"]
    assert margin > train.tie_se * se > 0  # the cooler T had to beat T = 1 by the tie rule's margin
    # The time-dependent temperature: T_1..T_3 then the rest, each cooler or 1, its cost recorded
    staged = [out[f"time-dependent temperature/test/temperature_{i}"] for i in (1, 2, 3)]
    rest = out["time-dependent temperature/test/temperature_pooled"]
    assert all(x in GRID and x <= 1.0 for x in (*staged, rest)) and min(*staged, rest) < 1.0
    stages = files["time-dependent temperature/test/per_entry"]["temperature_grid"]
    assert list(stages) == ["T1", "T2", "T3", "rest"]
    assert "time-dependent temperature/test/marginal/ece" in out
    assert "time-dependent temperature/conformal/test/interval/coverage" in out
    assert out["time/time_dependent_temperature_s"] > 0 and out["time/temperature_s"] > 0

    # The chain itself (calibrated): no candidate beats T = 1 beyond the noise, so T = 1 stays
    # and the row repeats the unscaled one exactly (the same uniforms, the same model). Fewer
    # items and draws: keeping T = 1 needs no power (the tie margin guards it at any noise).
    few = dataclasses.replace(train, num_samples=20)
    calibrated, _ = score_final(chain_simulator(P=FAST), splits(100, few), few, info, seed=0, with_temperature=True)
    assert calibrated["temperature-scaled/test/temperature_pooled"] == 1.0
    assert calibrated["temperature-scaled/test/temperature_at_bound"] == 0
    for key in ("marginal/ece", "marginal/ece_debiased", "marginal/ce", "interval/coverage", "interval/interval_score"):
        assert calibrated[f"temperature-scaled/test/{key}"] == calibrated[f"test/{key}"]
