import numpy as np
import pytest
import torch

from chain import chain_simulator, draw_chain, exact_marginals
from focus_tune.errors import NonFiniteLoss
from focus_tune.scoring.evaluation import evaluate
from focus_tune.scoring.metrics import sequence_metrics
from focus_tune.scoring.montecarlo import time_to_event
from focus_tune.sim.device_split import DeviceSplit
from focus_tune.sim.model import Simulator
from focus_tune.sim.regularization import LambdaSchedule
from focus_tune.sim.train import LearningRate, seed_everything, train_one_epoch


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
    forced = evaluate(sim, data, generator=torch.Generator().manual_seed(0), event_sampling="forced", **common)
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
    with pytest.raises(ValueError, match="event_sampling must be one of"):
        evaluate(sim, data, generator=torch.Generator().manual_seed(0), event_sampling="always", **common)


@pytest.mark.parametrize("epochs,items,batch", [(10, 1000, 64), (3, 40, 16), (1, 7, 8)])
def test_one_cycle_is_torch_one_cycle(epochs, items, batch):
    """The pure function of the step is PyTorch's OneCycleLR (cosine, no momentum cycling)."""
    lr = LearningRate.of(3e-3, "onecycle", epochs, items, batch)
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=3e-3)
    ref = torch.optim.lr_scheduler.OneCycleLR(opt, 3e-3, total_steps=lr.total_steps, cycle_momentum=False)
    for step in range(lr.total_steps):
        assert lr(step) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12, abs=1e-15), step
        opt.step()
        ref.step()
    assert LearningRate.of(3e-3, "constant", epochs, items, batch)(5) == 3e-3
    with pytest.raises(ValueError, match="unknown lr schedule"):
        LearningRate.of(3e-3, "cosine", epochs, items, batch)


@pytest.mark.parametrize("epochs,items,batch", [(10, 1000, 64), (3, 40, 16), (1, 7, 8), (1, 3, 8)])
def test_decay_is_constant_then_torch_cosine_annealing(epochs, items, batch):
    """'decay': the peak until the last 20 % of the steps (rounded), then PyTorch's
    CosineAnnealingLR from the peak to peak / 25e4, stepped once before each decay step; a
    training too short for a decay step keeps the peak."""
    lr = LearningRate.of(3e-3, "decay", epochs, items, batch)
    decay = round(0.2 * lr.total_steps)
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=3e-3)
    ref = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(decay, 1), eta_min=3e-3 / 25e4)
    for step in range(lr.total_steps):
        if step >= lr.total_steps - decay:
            opt.step()
            ref.step()
        assert lr(step) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-9, abs=1e-15), step
    assert lr(0) == 3e-3
    assert lr(lr.total_steps - 1) == (pytest.approx(3e-3 / 25e4) if decay else 3e-3)


def test_a_scheduled_training_is_the_scheduler_driven_loop_and_resumes_from_the_epoch():
    """train_one_epoch with a LearningRate equals the naive loop stepping OneCycleLR after every
    batch, bit for bit; and a training continued from epoch 2 with a fresh optimizer state
    copy (a resumed trial) takes the same steps, as the rate is a function of the step alone."""
    L = 5
    data = chain_split(48, L, 5)
    lambdas = LambdaSchedule.constant(0.01, L).tensor()
    lr = LearningRate.of(1e-2, "onecycle", 3, len(data), 16)

    def fresh():
        torch.manual_seed(0)
        model = Simulator(3, encoder="small", embed_dim=8, hidden=8)
        return model, torch.optim.Adam(model.parameters(), lr=1e-2), torch.Generator().manual_seed(1)

    model, opt, gen = fresh()
    losses = [train_one_epoch(model, opt, data, lambdas, 16, gen, lr=lr, step=e * 3)["train/loss"] for e in range(3)]

    ref, ref_opt, ref_gen = fresh()
    sched = torch.optim.lr_scheduler.OneCycleLR(ref_opt, 1e-2, total_steps=9, cycle_momentum=False)
    from focus_tune.sim.regularization import regularized_loss
    ref_losses = []
    for _ in range(3):
        order, total = torch.randperm(len(data), generator=ref_gen), 0.0
        for start in range(0, len(data), 16):
            idx = order[start:start + 16]
            loss = regularized_loss(ref(data.images[idx], data.sequences[idx]), data.sequences[idx], lambdas)
            ref_opt.zero_grad()
            loss.backward()
            ref_opt.step()
            sched.step()
            total += loss.item() * len(idx)
        ref_losses.append(total / len(data))
    assert losses == ref_losses
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), ref.state_dict().values()))

    # Resumed after epoch 1: the checkpoint's model, optimizer and generator, then epochs 2-3.
    first, first_opt, first_gen = fresh()
    train_one_epoch(first, first_opt, data, lambdas, 16, first_gen, lr=lr, step=0)
    again, again_opt, _ = fresh()
    again.load_state_dict(first.state_dict())
    again_opt.load_state_dict(first_opt.state_dict())
    for e in (1, 2):
        train_one_epoch(again, again_opt, data, lambdas, 16, first_gen, lr=lr, step=e * 3)
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), model.state_dict().values()))
