import numpy as np
import pytest
import torch

from focus_tune.metrics import sequence_metrics
from focus_tune.model import Simulator
from focus_tune.montecarlo import time_to_event
from focus_tune.regularization import LambdaSchedule
from focus_tune.train import NonFiniteLoss, seed_everything, train_one_epoch
from focus_tune.device_split import DeviceSplit
from focus_tune.evaluation import evaluate

from chain import chain_simulator, draw_chain, exact_marginals


def chain_split(n, L, seed):
    rng = np.random.default_rng(seed)
    seq = draw_chain(n, 1, L, rng)[:, 0]
    exact = np.repeat(exact_marginals(L)[None], n, axis=0)
    return DeviceSplit(
        images=torch.randint(0, 256, (n, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)),
        sequences=torch.as_tensor(seq),
        time_to_event=torch.as_tensor(time_to_event(seq[:, None], 2)[:, 0]),
        exact_marginals=exact,
    )


def test_training_learns_the_chain_and_evaluate_reports_every_metric():
    gen = seed_everything(0)
    L = 6
    train, test = chain_split(512, L, 1), chain_split(200, L, 2)
    model = Simulator(3, encoder="small", embed_dim=16, hidden=16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    lambdas = LambdaSchedule.none(L).tensor()
    before = evaluate(model, test, 50, event=2, generator=gen)
    losses = [train_one_epoch(model, opt, train, lambdas, 64, gen)["train/loss"] for _ in range(15)]
    after = evaluate(model, test, 400, event=2, generator=gen, condition_class=0, per_entry=True)
    assert losses[-1] < losses[0]
    assert after["marginal/rmse"] < 0.05 < before["marginal/rmse"]
    for key in ("marginal/ece", "marginal/auc", "marginal/brier", "marginal/ce", "marginal/leak",
                "marginal/p_stay", "interval/coverage", "interval/relative_width", "interval/relative_mae",
                "conditional/ece", "conditional/auc", "conditional/items"):
        assert key in after and np.isfinite(after[key]), key
    # The exact probabilities score some ECE on the same labels; the learned chain is close to it.
    exact_ece = sequence_metrics(test.exact_marginals, test.sequences.numpy())["ece"]
    assert after["marginal/ece"] < exact_ece + 0.1
    assert after["marginal/p_stay"] > 0.9  # the chain's class 2 is absorbing and the model learned it
    assert 0.7 <= after["interval/coverage"] <= 1.0
    assert after["per_entry"]["marginal"]["ece"].shape == (L,)
    assert after["conditional/items"] == (test.sequences[:, 0] == 0).sum().item()


def test_regularization_shrinks_the_logits():
    gen = seed_everything(0)
    L = 4
    data = chain_split(256, L, 3)
    norms = {}
    for lam in (0.0, 1.0):
        torch.manual_seed(0)
        model = Simulator(3, encoder="small", embed_dim=8, hidden=8)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(10):
            train_one_epoch(model, opt, data, LambdaSchedule.constant(lam, L).tensor(), 64, gen)
        with torch.no_grad():
            norms[lam] = model(data.images, data.sequences).norm(dim=-1).mean().item()
    assert norms[1.0] < 0.7 * norms[0.0]


def test_nan_loss_stops_the_epoch():
    gen = seed_everything(0)
    data = chain_split(32, 4, 4)
    model = Simulator(3, encoder="small", embed_dim=8, hidden=8)
    with torch.no_grad():
        model.head.bias.fill_(float("nan"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with pytest.raises(NonFiniteLoss, match="nan"):
        train_one_epoch(model, opt, data, LambdaSchedule.none(4).tensor(), 16, gen)


LEAKY = np.array([[0.7, 0.2, 0.1], [0.3, 0.5, 0.2], [0.1, 0.1, 0.8]])  # class 2 kept with 0.8 only


def test_absorbing_modes_on_a_model_that_leaks():
    """A model whose p(event -> event) = 0.8: forcing hides the leak, the default shows it."""
    sim = chain_simulator(P=LEAKY)
    L, n = 10, 40
    data = chain_split(n, L, 5)  # true sequences of the absorbing chain
    common = dict(num_samples=200, event=2, condition_class=0)
    model = evaluate(sim, data, generator=torch.Generator().manual_seed(0), **common)
    forced = evaluate(sim, data, generator=torch.Generator().manual_seed(0), absorbing="forced", **common)
    # p(event -> event) is read from the model's teacher-forced logits: exactly LEAKY[2, 2].
    assert model["marginal/p_stay"] == pytest.approx(0.8, abs=1e-9)
    assert forced["marginal/p_stay"] == pytest.approx(0.8, abs=1e-9)
    assert forced["marginal/leak"] == 0.0
    assert model["marginal/leak"] > 0.5  # with 0.2 per step to leave, most absorbed rows leave
    # Forced, the samples follow the absorbing chain (the truth): only Monte Carlo error is left.
    # Unforced, they follow the leaky chain, whose marginals are this far from the truth:
    leaky_rmse = np.sqrt(((exact_marginals(L, P=LEAKY) - exact_marginals(L)) ** 2).mean(axis=1)).mean()
    assert leaky_rmse > 0.1
    assert forced["marginal/rmse"] < 0.05 < 0.5 * leaky_rmse < model["marginal/rmse"]
    with pytest.raises(ValueError, match="absorbing must be one of"):
        evaluate(sim, data, generator=torch.Generator().manual_seed(0), absorbing="always", **common)
