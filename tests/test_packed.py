"""Packed training and evaluation against the solo path they replace (focus_tune.sim.packed, packed_eval).

On a CPU a pack runs its members' LSTM and head with the solo model's own calls, so a member
is bit for bit the trial it replaces (float32: compared with ==); in float64 the same, to
1e-9 where a path takes another order of summation. The GPU path (the batched recurrence,
the CUDA-graph step) needs a GPU: benchmarks/gpu_packed.py runs it there.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from focus_tune.scoring import metrics
from focus_tune.scoring.evaluation import evaluate
from focus_tune.scoring.packed_eval import evaluate_packed, sample_packed
from focus_tune.sim.device_split import DeviceSplit
from focus_tune.sim.model import Simulator
from focus_tune.sim.packed import (
    Member,
    PackedSimulator,
    PackTrainer,
    load_member,
    load_member_optimizer,
    member_model,
    member_optimizer_state,
    member_state_dict,
    new_pack,
)
from focus_tune.sim.train import LearningRate, train_one_epoch

REPO = Path(__file__).resolve().parents[1]
L, C = 8, 5
SEEDS = (0, 1, 2)
TOL = 1e-9


def _split(n: int, seed: int) -> DeviceSplit:
    g = torch.Generator().manual_seed(seed)
    return DeviceSplit(torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g),
                       torch.randint(0, C, (n, L), generator=g), torch.randint(1, L + 1, (n,), generator=g))


def _model(seed: int, dtype=torch.float64, encoder: str = "resnet18") -> Simulator:
    torch.manual_seed(seed)
    return Simulator(C, encoder=encoder, embed_dim=12, hidden=16, encoder_width=8).to(dtype)


def _lambdas(k: int, dtype=torch.float64) -> torch.Tensor:
    return [torch.zeros(L), torch.full((L,), 0.05), torch.linspace(0, 0.1, L)][k].to(dtype)


def _solo(seed: int, k: int, data: DeviceSplit, epochs: int, dtype=torch.float64):
    model = _model(seed, dtype)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(seed)
    losses = [train_one_epoch(model, opt, data, _lambdas(k, dtype), 16, gen)["train/loss"] for _ in range(epochs)]
    return model, opt, gen, losses


def _max_diff(state: dict, model: Simulator) -> float:
    return max((state[n].double() - v.double()).abs().max().item() for n, v in model.state_dict().items())


@pytest.fixture(scope="module")
def data():
    return _split(40, 0)


def _pack(datasets, dtype=torch.float64, lambdas=None, seeds=SEEDS, which=None):
    packed, opt = new_pack([_model(s, dtype) for s in seeds], lr=1e-2)
    members = [Member(_lambdas(k, dtype) if lambdas is None else lambdas[k], torch.Generator().manual_seed(s),
                      dataset=0 if which is None else which[k]) for k, s in enumerate(seeds)]
    return packed, opt, members, PackTrainer(packed, opt, datasets, members, 16)


@pytest.mark.parametrize("encoder", ["resnet18", "small"])
def test_members_train_as_they_would_alone(data, encoder):
    """Different seeds (initial weights, batch order) and lambda schedules; BatchNorm's running
    statistics included: weights, buffers and losses equal the solo trials' after 3 epochs."""
    packed, opt = new_pack([_model(s, encoder=encoder) for s in SEEDS], lr=1e-2)
    members = [Member(_lambdas(k), torch.Generator().manual_seed(s)) for k, s in enumerate(SEEDS)]
    trainer = PackTrainer(packed, opt, [data], members, 16)
    packed_losses = [[r["train/loss"] for r in trainer.epoch()] for _ in range(3)]
    for k, seed in enumerate(SEEDS):
        model = _model(seed, encoder=encoder)
        sopt = torch.optim.Adam(model.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(seed)
        solo_losses = [train_one_epoch(model, sopt, data, _lambdas(k), 16, gen)["train/loss"] for _ in range(3)]
        assert np.allclose([e[k] for e in packed_losses], solo_losses, rtol=0, atol=TOL)
        assert _max_diff(member_state_dict(packed, k), model) < TOL
    assert all(m.failed is None for m in members)


def test_float32_members_are_their_solo_trials_bit_for_bit(data):
    packed, opt, members, trainer = _pack([data], torch.float32)
    outs = [trainer.epoch() for _ in range(2)]
    for k, seed in enumerate(SEEDS):
        model, _, _, losses = _solo(seed, k, data, 2, torch.float32)
        assert [o[k]["train/loss"] for o in outs] == losses
        assert _max_diff(member_state_dict(packed, k), model) == 0.0


def test_members_follow_a_learning_rate_schedule_as_alone(data):
    """A one-cycle schedule: every member's weights equal its solo trial's, bit for bit (float32)."""
    lr = LearningRate.of(1e-2, "onecycle", 2, len(data), 16)
    packed, opt = new_pack([_model(s, torch.float32) for s in SEEDS], lr=1e-2)
    members = [Member(_lambdas(k, torch.float32), torch.Generator().manual_seed(s)) for k, s in enumerate(SEEDS)]
    trainer = PackTrainer(packed, opt, [data], members, 16, lr=lr)
    outs = [trainer.epoch(e) for e in (1, 2)]
    batches = -(-len(data) // 16)
    for k, seed in enumerate(SEEDS):
        model = _model(seed, torch.float32)
        sopt = torch.optim.Adam(model.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(seed)
        losses = [train_one_epoch(model, sopt, data, _lambdas(k, torch.float32), 16, gen, lr=lr,
                                  step=e * batches)["train/loss"] for e in range(2)]
        assert [o[k]["train/loss"] for o in outs] == losses
        assert _max_diff(member_state_dict(packed, k), model) == 0.0
    assert opt.param_groups[0]["lr"] == lr(2 * batches - 1)
    assert isinstance(member_optimizer_state(opt, packed, 0)["param_groups"][0]["lr"], float)


def test_a_member_whose_loss_turns_nan_stops_alone(data):
    """Its loss is NaN from the first batch: it is marked failed with the solo trial's message;
    the others train exactly as alone."""
    lambdas = [_lambdas(0), torch.full((L,), float("nan"), dtype=torch.float64), _lambdas(2)]
    packed, opt, members, trainer = _pack([data], lambdas=lambdas)
    for _ in range(2):
        out = trainer.epoch()
    assert out[1] == {"failed": "training loss became nan after 0 samples"}
    assert members[1].failed == out[1]["failed"]
    for k in (0, 2):
        model, *_ = _solo(SEEDS[k], k, data, 2)
        assert _max_diff(member_state_dict(packed, k), model) < TOL


def test_members_resume_from_solo_checkpoints(data):
    """A pack trained one epoch, its members saved as solo checkpoints (model, Adam, generator),
    a new pack loaded from them and trained one more epoch: each equals 2 epochs alone; and a
    member's checkpoint continues as a solo trial just the same."""
    packed, opt, members, trainer = _pack([data])
    trainer.epoch()
    saved = [(member_state_dict(packed, k), member_optimizer_state(opt, packed, k), m.generator.get_state())
             for k, m in enumerate(members)]
    fresh, fresh_opt = new_pack([_model(100 + s) for s in SEEDS], lr=1e-2)
    again = []
    for k, (state, opt_state, gen_state) in enumerate(saved):
        load_member(fresh, k, state)
        load_member_optimizer(fresh_opt, fresh, k, opt_state)
        gen = torch.Generator()
        gen.set_state(gen_state)
        again.append(Member(_lambdas(k), gen))
    PackTrainer(fresh, fresh_opt, [data], again, 16).epoch()
    for k, seed in enumerate(SEEDS):
        model, *_ = _solo(seed, k, data, 2)
        assert _max_diff(member_state_dict(fresh, k), model) < TOL
        # The same checkpoint continued alone.
        solo = member_model(packed, k, _model(seed))
        state, opt_state, gen_state = saved[k]
        solo.load_state_dict(state)
        sopt = torch.optim.Adam(solo.parameters(), lr=1e-2)
        sopt.load_state_dict(opt_state)
        gen = torch.Generator()
        gen.set_state(gen_state)
        train_one_epoch(solo, sopt, data, _lambdas(k), 16, gen)
        assert _max_diff(member_state_dict(fresh, k), solo) < TOL


def test_each_member_its_own_dataset():
    """Replication: members on different datasets of one size, each as alone on its own."""
    datasets = [_split(40, 10), _split(40, 11)]
    packed, opt, members, trainer = _pack(datasets, seeds=(0, 1), which=[1, 0])
    trainer.epoch()
    for k, (seed, d) in enumerate(zip((0, 1), (datasets[1], datasets[0]))):
        model, *_ = _solo(seed, k, d, 1)
        assert _max_diff(member_state_dict(packed, k), model) < TOL


def test_pack_checks_its_inputs(data):
    models = [_model(0), Simulator(C, encoder="small", embed_dim=12, hidden=16).double()]
    with pytest.raises(ValueError, match="same architecture"):
        PackedSimulator(models)
    packed, opt = new_pack([_model(0)], lr=1e-2)
    with pytest.raises(ValueError, match="differ in size"):
        PackTrainer(packed, opt, [data, _split(30, 1)], [Member(_lambdas(0), torch.Generator())], 16)
    with pytest.raises(ValueError, match="2 members for a pack of 1"):
        PackTrainer(packed, opt, [data], [Member(_lambdas(0), torch.Generator())] * 2, 16)


def _trained_models(dtype):
    data = _split(32, 5)
    models = [_model(s, dtype) for s in (0, 1)]
    for m in models:  # non-trivial BatchNorm statistics
        m.train()
        m(data.images, data.sequences)
    return models


@pytest.mark.parametrize("absorbing", ["model", "forced"])
def test_packed_evaluation_equals_solo_evaluate(absorbing):
    """Same generators, same draws (the chunking does not change the CPU generator's stream):
    every metric of every member equals ``evaluate``'s."""
    data = _split(50, 3)
    models = _trained_models(torch.float64)
    packed = PackedSimulator(models)
    gens = [torch.Generator().manual_seed(10 + k) for k in range(2)]
    got = evaluate_packed(packed, [data, data], 20, C - 1, gens, event_sampling=absorbing, rows=2 * 20 * 7, threads=2)
    for k, model in enumerate(models):
        want = evaluate(model, data, 20, C - 1, torch.Generator().manual_seed(10 + k), event_sampling=absorbing)
        assert got[k].keys() == want.keys()
        for key, value in want.items():
            assert got[k][key] == pytest.approx(value, abs=TOL, nan_ok=True), key


def test_packed_samples_and_metrics_equal_solo_in_float32():
    data = _split(30, 4)
    models = _trained_models(torch.float32)
    packed = PackedSimulator(models)
    samples = sample_packed(packed, data.images.expand(2, *data.images.shape), 16, L,
                            [torch.Generator().manual_seed(k) for k in range(2)], rows=2 * 16 * 8)
    got = evaluate_packed(packed, [data, data], 16, C - 1, [torch.Generator().manual_seed(k) for k in range(2)])
    for k, model in enumerate(models):
        solo = model.sample(data.images, 16, L, torch.Generator().manual_seed(k))
        assert torch.equal(samples[k].long(), solo)
        want = evaluate(model, data, 16, C - 1, torch.Generator().manual_seed(k))
        assert got[k] == pytest.approx(want, nan_ok=True, rel=0, abs=0)


def test_packed_evaluation_per_member_splits():
    splits = [_split(24, 20), _split(24, 21)]
    models = _trained_models(torch.float64)
    got = evaluate_packed(PackedSimulator(models), splits, 10, C - 1,
                          [torch.Generator().manual_seed(k) for k in (0, 1)], per_entry=True)
    for k, model in enumerate(models):
        want = evaluate(model, splits[k], 10, C - 1, torch.Generator().manual_seed(k), per_entry=True)
        assert got[k]["marginal/ece"] == pytest.approx(want["marginal/ece"], abs=TOL)
        np.testing.assert_allclose(got[k]["probs"], want["probs"], atol=TOL)


def test_sequence_metrics_in_threads_are_the_same_numbers():
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(4), size=(300, 37))
    labels = rng.integers(0, 4, (300, 37))
    one, three = metrics.sequence_metrics(probs, labels, 10), metrics.sequence_metrics(probs, labels, 10, threads=3)
    for key in ("ece", "ece_debiased", "ece_debiased_sq", "auc"):
        assert one[key] == three[key]
        np.testing.assert_array_equal(one["per_entry"][key], three["per_entry"][key])
    for key in ("brier", "ce", "overconfidence"):
        assert three[key] == pytest.approx(one[key], abs=1e-12)


def test_gpu_script_runs_dry_and_costs_the_committed_run(tmp_path):
    """benchmarks/gpu_packed.py at tiny sizes on the CPU (so it cannot rot), and the search cost
    from the committed H200 run."""
    run = subprocess.run([sys.executable, "benchmarks/gpu_packed.py", "--dry", "--out", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    import json

    report = json.loads((tmp_path / "gpu_packed.json").read_text())
    assert report["errors"] == {} and report["mc"]["same_metrics"]
    assert {r["mode"] for r in report["train"]} == {"solo", "packed"}
    cost = subprocess.run([sys.executable, "benchmarks/gpu_packed.py", "--from-json",
                           "docs/results/gpu/packed-h200.json"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert cost.returncode == 0, cost.stderr
    assert "packs of 16" in cost.stdout
