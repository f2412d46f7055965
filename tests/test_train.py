import numpy as np
import pytest
import torch

from focus_tune.model import Simulator
from focus_tune.montecarlo import time_to_event
from focus_tune.regularization import LambdaSchedule
from focus_tune.train import NonFiniteLoss, Split, evaluate, seed_everything, train_one_epoch

from chain import draw_chain, exact_marginals


def chain_split(n, L, seed):
    rng = np.random.default_rng(seed)
    seq = draw_chain(n, 1, L, rng)[:, 0]
    exact = np.repeat(exact_marginals(L)[None], n, axis=0)
    return Split(
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
    for key in ("marginal/ece", "marginal/auc", "marginal/brier", "marginal/ce", "marginal/ece_floor",
                "interval/coverage", "interval/relative_width", "interval/relative_mae",
                "conditional/ece", "conditional/auc", "conditional/items"):
        assert key in after and np.isfinite(after[key]), key
    # Exact probabilities score their own floor; the learned chain is close to it.
    assert after["marginal/ece"] < after["marginal/ece_floor"] + 0.1
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
