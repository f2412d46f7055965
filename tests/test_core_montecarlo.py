import numpy as np
import pytest
import torch

from chain import draw_chain, exact_marginals
from focus_tune.scoring.montecarlo import conditional_probs, interval, leak, marginal_probs, time_to_event


def test_marginals_of_a_known_chain_within_four_standard_errors():
    rng = np.random.default_rng(0)
    N, M, L = 3, 5000, 10
    s = draw_chain(N, M, L, rng)
    est = marginal_probs(s, 3)
    assert est.shape == (N, L, 3)
    np.testing.assert_allclose(est.sum(-1), 1.0)
    exact = exact_marginals(L)
    se = np.sqrt(exact * (1 - exact) / M) + 1e-12
    assert np.all(np.abs(est - exact[None]) <= 4 * se + 1e-12)


def test_marginals_accept_torch_and_count_exactly():
    s = torch.tensor([[[0, 1], [0, 2], [1, 2], [0, 2]]])  # N=1, M=4, L=2
    est = marginal_probs(s, 3)
    np.testing.assert_array_equal(est[0], [[0.75, 0.25, 0], [0, 0.25, 0.75]])


def test_conditional_ratio_estimator_of_a_known_chain():
    rng = np.random.default_rng(1)
    N, M, L = 2, 20000, 6
    s = draw_chain(N, M, L, rng)
    probs, counts = conditional_probs(s, 3, j=0, b=1)
    exact = exact_marginals(L, start=1)
    assert np.all(counts == (s[:, :, 0] == 1).sum(1))
    se = np.sqrt(exact * (1 - exact) / counts.min()) + 1e-12
    assert np.all(np.abs(probs - exact[None]) <= 4 * se + 1e-12)
    np.testing.assert_allclose(probs[:, 0, 1], 1.0)


def test_conditional_is_nan_where_nothing_meets_the_condition():
    s = np.array([[[0, 1], [0, 0]], [[1, 1], [0, 1]]])  # item 0 never has y_1 = 1
    probs, counts = conditional_probs(s, 2, j=0, b=1)
    assert counts.tolist() == [0, 1]
    assert np.isnan(probs[0]).all()
    np.testing.assert_array_equal(probs[1], [[0, 1], [0, 1]])
    with pytest.raises(ValueError, match="outside"):
        conditional_probs(s, 2, j=2, b=0)


def test_time_to_event_and_interval():
    s = np.array([[[0, 0, 2, 2], [2, 2, 2, 2], [0, 1, 1, 0]]])
    t = time_to_event(s, event=2)
    np.testing.assert_array_equal(t, [[3, 1, 4]])  # counted from 1; never -> L
    rng = np.random.default_rng(2)
    times = rng.integers(0, 100, (50, 1000))
    lo, hi = interval(times, 0.9)
    np.testing.assert_allclose(lo, np.quantile(times, 0.05, axis=1))
    np.testing.assert_allclose(hi, np.quantile(times, 0.95, axis=1))
    with pytest.raises(ValueError, match="alpha"):
        interval(times, 1.5)


def test_time_to_event_of_the_chain_matches_its_law():
    # P(T > k) for the absorbing chain (T counted from 1): the mass not yet in class 2 at
    # entry k; T = L also holds the sequences censored at L, so k stops at L - 1.
    rng = np.random.default_rng(3)
    M, L = 20000, 12
    t = time_to_event(draw_chain(1, M, L, rng), event=2)[0]
    survive = 1 - exact_marginals(L)[:, 2]
    assert t.min() >= 1 and t.max() <= L
    for k in range(L - 1):
        emp = (t > k + 1).mean()
        assert abs(emp - survive[k]) <= 4 * np.sqrt(survive[k] * (1 - survive[k]) / M) + 1e-9


def test_leak_by_hand():
    # event 2; 5 samples of one item, L = 4:
    #   [0, 2, 2, 2] reaches, stays          [0, 2, 1, 2] reaches, leaves (and comes back)
    #   [2, 0, 0, 0] reaches, leaves         [0, 1, 0, 1] never reaches
    #   [0, 0, 0, 2] reaches at the last entry, cannot leave
    # -> 4 reach the event, 2 of them leave it: leak 0.5.
    s = np.array([[[0, 2, 2, 2], [0, 2, 1, 2], [2, 0, 0, 0], [0, 1, 0, 1], [0, 0, 0, 2]]])
    assert leak(s, 2) == (0.5, 4)
    frac, n = leak(np.zeros((1, 3, 4), dtype=int), 2)
    assert n == 0 and np.isnan(frac)


def test_leak_equals_a_naive_loop():
    rng = np.random.default_rng(7)
    s = rng.choice(3, size=(6, 50, 9), p=[0.5, 0.3, 0.2])
    reached = left = 0
    for row in s.reshape(-1, 9).tolist():
        if 2 in row:
            reached += 1
            left += any(y != 2 for y in row[row.index(2):])
    assert leak(s, 2) == (left / reached, reached)


def test_estimate_counted_is_the_frequencies_and_the_sampled_times():
    """The one entry point: counted estimates of draws (a device-free tensor, the conditioned
    items' draws beside), and the names it accepts."""
    from focus_tune.names import ESTIMATORS
    from focus_tune.scoring.montecarlo import Drawn, estimate, time_pmf

    rng = np.random.default_rng(4)
    s = draw_chain(5, 40, 8, rng)
    given = draw_chain(2, 40, 8, rng)
    est = estimate(Drawn(torch.as_tensor(s)), "counted", 2, 3, 0.8, Drawn(given))
    times = time_to_event(s, 2)
    np.testing.assert_array_equal(est.probs, marginal_probs(s, 3))
    np.testing.assert_array_equal(est.cond_probs, marginal_probs(given, 3)[:, 1:])
    np.testing.assert_array_equal(np.stack([est.lo, est.hi]), np.stack(interval(times, 0.8)))
    np.testing.assert_array_equal(est.point, times.mean(axis=1))
    np.testing.assert_array_equal(est.time_pmf, time_pmf(times, 8))
    np.testing.assert_array_equal(est.median(), np.median(times, axis=1))
    assert ESTIMATORS == ("counted", "rao_blackwell")
    with pytest.raises(ValueError, match="rao_blackwell=<event class>"):
        estimate(Drawn(s), "rao_blackwell", 2, 3, 0.8)  # no conditionals were summed along these draws
    with pytest.raises(ValueError, match=r"one of \('counted', 'rao_blackwell'\), got 'guess'"):
        estimate(Drawn(s), "guess", 2, 3, 0.8)


def test_estimate_rao_blackwell_reads_the_sums_and_the_pmf():
    from focus_tune.scoring.montecarlo import Drawn, estimate, pmf_quantile

    rng = np.random.default_rng(5)
    marginals, pmf = rng.dirichlet(np.ones(3), (4, 6)), rng.dirichlet(np.ones(6), 4)
    given = Drawn(None, rng.dirichlet(np.ones(3), (2, 6)), rng.dirichlet(np.ones(6), 2))
    est = estimate(Drawn(None, torch.as_tensor(marginals), pmf), "rao_blackwell", 2, 3, 0.9, given)
    np.testing.assert_array_equal(est.probs, marginals)
    np.testing.assert_array_equal(est.cond_probs, given.marginals[:, 1:])
    np.testing.assert_array_equal(est.lo, pmf_quantile(pmf, 0.05))
    np.testing.assert_array_equal(est.hi, pmf_quantile(pmf, 0.95))
    np.testing.assert_array_equal(est.median(), pmf_quantile(pmf, 0.5))
    assert est.times is None
