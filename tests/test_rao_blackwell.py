"""Rao-Blackwellized Monte Carlo estimates: unbiased, less noisy, equal to a naive teacher-forced pass."""

import numpy as np
import pytest
import torch

from chain import chain_simulator, exact_marginals
from focus_tune.scoring.evaluation import evaluate
from focus_tune.scoring.montecarlo import estimates_from_distributions, marginal_probs, time_pmf, time_to_event
from focus_tune.sim.device_split import DeviceSplit
from focus_tune.sim.model import Simulator

EVENT = 2  # the chain's absorbing class


def _naive(model, images, samples, event, prefix=(), forced=False):
    """The model's conditionals at every sampled prefix by one teacher-forced pass; their mean
    over the M rows, and the time-to-event CDF entry by entry: the fraction of rows ended
    before t plus the mean of the others' event probability (T = L the rest)."""
    B, M, L = samples.shape
    seqs = torch.as_tensor(samples).reshape(B * M, L)
    with torch.no_grad():
        p = torch.softmax(model(images.repeat_interleave(M, dim=0), seqs).double(), dim=-1).numpy()  # (B*M, L, c)
    c = p.shape[-1]
    s = seqs.numpy()
    for i, b in enumerate(prefix):
        p[:, i] = np.eye(c)[b]
    pmf = np.zeros((B * M, L))
    for r in range(B * M):
        for i in range(L):
            if forced and i > 0 and event in s[r, :i]:
                p[r, i] = np.eye(c)[event]
            if event not in s[r, :i]:
                pmf[r, i] = p[r, i, event]
    terms = pmf.reshape(B, M, L).mean(axis=1)
    ended = np.array([[np.mean([event in s[b * M + r, :i] for r in range(M)]) for i in range(L)] for b in range(B)])
    out = np.zeros((B, L))
    for b in range(B):
        cdf = 0.0
        for i in range(L - 1):  # P(T <= t): the draws ended before t, plus the others' event probability
            new = min(1.0, max(cdf, ended[b, i] + terms[b, i]))
            out[b, i], cdf = new - cdf, new
        out[b, -1] = 1.0 - cdf
    return p.reshape(B, M, L, c).mean(axis=1), out


@pytest.mark.parametrize("prefix,forced", [((), False), ((1,), False), ((), True)])
def test_rao_blackwell_equals_a_teacher_forced_pass(prefix, forced):
    torch.manual_seed(0)
    model = Simulator(4, encoder="small", embed_dim=8, hidden=8).double().eval()
    images = torch.randint(0, 255, (3, 3, 16, 16), dtype=torch.uint8)
    gen = lambda: torch.Generator().manual_seed(5)  # noqa: E731
    samples, marg, pmf = model.sample(images, 6, 7, gen(), prefix=list(prefix), forced_event=3 if forced else None,
                                      rao_blackwell=3)
    assert torch.equal(samples, model.sample(images, 6, 7, gen(), prefix=list(prefix),
                                             forced_event=3 if forced else None))  # the same draws
    naive_marg, naive_pmf = _naive(model, images, samples.numpy(), 3, prefix, forced)
    np.testing.assert_allclose(marg.numpy(), naive_marg, atol=1e-9)
    np.testing.assert_allclose(pmf.numpy(), naive_pmf, atol=1e-9)
    np.testing.assert_allclose(marg.sum(-1).numpy(), 1.0)
    np.testing.assert_allclose(pmf.sum(-1).numpy(), 1.0)


def test_rao_blackwell_time_pmf_by_hand_and_a_distribution_where_the_event_is_nearly_sure():
    """P(T <= t) = (draws ended before t) + (the others' event probability at t): in [0, 1]
    whatever the draws, where the running sum of the event terms alone passed 1 or stayed
    far below it near the tail."""
    from focus_tune.scoring.montecarlo import pmf_from_event_terms

    terms = np.array([[0.5, 0.3, 0.1, 0.05, 0.9]])
    ended = np.array([[0.0, 0.4, 0.8, 0.95, 1.0]])
    np.testing.assert_allclose(pmf_from_event_terms(terms, ended)[0], [0.5, 0.2, 0.2, 0.1, 0.0])
    # not monotone as given (0.7 then 0.6): the running maximum keeps it a CDF
    np.testing.assert_allclose(pmf_from_event_terms(np.array([[0.7, 0.1, 0.0]]), np.array([[0.0, 0.5, 0.0]]))[0],
                               [0.7, 0.0, 0.3])
    with pytest.raises(ValueError, match="same"):
        pmf_from_event_terms(terms, ended[:, :3])
    # A simulator whose event comes fast (hazard 0.3, L = 40): every item a distribution, and
    # the CDF near the tail at least the counted one's (the draws that ended count fully).
    sim = chain_simulator(P=np.array([[0.65, 0.05, 0.3], [0.05, 0.65, 0.3], [0.0, 0.0, 1.0]]))
    images = torch.zeros(64, 3, 8, 8, dtype=torch.uint8)
    samples, _, got = sim.sample(images, 20, 40, torch.Generator().manual_seed(0), rao_blackwell=2)
    got = got.numpy()
    assert (got >= 0).all() and np.allclose(got.sum(axis=1), 1.0)
    counted = time_pmf(time_to_event(samples, 2), 40)
    assert (np.cumsum(got, axis=1)[:, 20] >= np.cumsum(counted, axis=1)[:, 19] - 1e-12).all()


def test_rao_blackwell_is_unbiased_and_less_noisy_than_counting():
    sim = chain_simulator()
    L, M, R = 8, 40, 60
    images = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    counted, rb, counted_t, rb_t = [], [], [], []
    for seed in range(R):
        samples, marg, pmf = sim.sample(images, M, L, torch.Generator().manual_seed(seed), rao_blackwell=EVENT)
        counted.append(marginal_probs(samples, 3))
        rb.append(marg.numpy())
        counted_t.append(time_pmf(time_to_event(samples, EVENT), L))
        rb_t.append(pmf.numpy())
    exact = exact_marginals(L)
    exact_t = np.diff(exact[:, EVENT], prepend=0.0)
    exact_t[-1] = 1 - exact_t[:-1].sum()
    for est, truth in ((np.array(rb), exact), (np.array(rb_t), exact_t)):
        se = est.std(axis=0, ddof=1) / np.sqrt(R) + 1e-12
        assert np.all(np.abs(est.mean(axis=0) - truth) <= 5 * se + 1e-9)  # unbiased
    # Same draws, lower variance: the counted frequencies' Monte Carlo variance is larger.
    assert np.array(rb).var(axis=0).sum() < 0.6 * np.array(counted).var(axis=0).sum()
    # The time to event: P(T <= t) per t is a conditional expectation of the counted
    # indicator (Rao-Blackwell), so its variance is lower at every t; the pmf's follows.
    cdf_rb, cdf_counted = np.cumsum(rb_t, axis=-1)[..., :-1], np.cumsum(counted_t, axis=-1)[..., :-1]
    assert (cdf_rb.var(axis=0) <= cdf_counted.var(axis=0) + 1e-12).all()
    assert cdf_rb.var(axis=0).sum() < 0.8 * cdf_counted.var(axis=0).sum()
    assert np.array(rb_t).var(axis=0).sum() < 0.85 * np.array(counted_t).var(axis=0).sum()


def test_evaluate_with_either_estimator():
    sim = chain_simulator()
    rng = np.random.default_rng(0)
    from chain import draw_chain

    seq = draw_chain(40, 1, 6, rng)[:, 0]
    t = np.array([list(s).index(EVENT) + 1 if EVENT in s else 6 for s in seq.tolist()])
    data = DeviceSplit(images=torch.zeros(40, 3, 8, 8, dtype=torch.uint8), sequences=torch.as_tensor(seq),
                 time_to_event=torch.as_tensor(t))
    out = {e: evaluate(sim, data, 50, EVENT, torch.Generator().manual_seed(1), n_bins=5, condition_class=0,
                       estimator=e) for e in ("counted", "rao_blackwell")}
    for e, res in out.items():
        for key in ("marginal/ece", "marginal/ece_debiased", "interval/coverage", "interval/crps", "conditional/ece"):
            assert np.isfinite(res[key]), (e, key)
    # The chain simulator is the truth: its Rao-Blackwellized marginals are closer to it.
    assert out["rao_blackwell"]["marginal/brier"] <= out["counted"]["marginal/brier"] + 1e-3
    with pytest.raises(ValueError, match="estimator"):
        evaluate(sim, data, 5, EVENT, torch.Generator(), estimator="guess")


def test_interval_of_a_pmf_is_its_quantile_pair():
    pmf = np.array([[0.05, 0.1, 0.5, 0.3, 0.05]])
    est = estimates_from_distributions(np.zeros((1, 5, 2)), pmf, None, alpha=0.9)
    assert est.lo[0] == 1 and est.hi[0] == 4 and est.point[0] == pytest.approx(pmf[0] @ np.arange(1, 6))
    est = estimates_from_distributions(np.zeros((1, 5, 2)), pmf, None, alpha=0.8)
    assert est.lo[0] == 2 and est.hi[0] == 4
