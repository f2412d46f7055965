"""The baselines against independent computations: scipy, naive loops, the generators' exact truth."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax

from focus_tune import baselines
from focus_tune.baselines import (
    fit_temperatures,
    has_oracle,
    image_blind_estimates,
    oracle_samples,
    split_temperature_scaled,
    with_baselines,
)
from focus_tune.data import DatasetWriter, build_dataset, ensure_dataset, load_dataset
from focus_tune.data import ale, facemed
from focus_tune.montecarlo import marginal_probs
from focus_tune.train import Split, teacher_forced_logits

from chain import chain_simulator, draw_chain

TRAIN = {"test_items": None, "num_samples": 50, "ece_bins": 10, "alpha": 0.9}


# ----------------------------------------------------------------------------- temperature


def _nll(z, y, t):
    return -log_softmax(z / t, axis=-1)[np.arange(len(y)), y].mean()


def test_temperatures_equal_scipy_entry_by_entry():
    rng = np.random.default_rng(0)
    N, L, c = 300, 5, 4
    z = rng.normal(0, 2, (N, L, c))
    # Labels drawn from softmax(z / T_true) with a different T_true per entry.
    t_true = np.array([0.5, 1.0, 2.0, 4.0, 0.8])
    p = np.exp(log_softmax(z / t_true[None, :, None], axis=-1))
    y = (rng.random((N, L, 1)) > p.cumsum(-1)).sum(-1).clip(max=c - 1)
    ours = fit_temperatures(torch.as_tensor(z), y)
    for i in range(L):
        ref = minimize_scalar(lambda t: _nll(z[:, i], y[:, i], t), bounds=(0.05, 20.0), method="bounded",
                              options={"xatol": 1e-10})
        assert ours[i] == pytest.approx(ref.x, rel=1e-4)
        assert _nll(z[:, i], y[:, i], ours[i]) <= ref.fun + 1e-10
    assert np.all(np.abs(np.log(ours / t_true)) < 0.5)  # and near the truth with N = 300


def test_temperature_of_a_sure_entry_hits_the_bound():
    # Every label is the top class: the NLL keeps falling as T -> 0, so the lower bound is returned.
    z = np.tile([[[3.0, 0.0, -1.0]]], (20, 1, 1))
    assert fit_temperatures(z, np.zeros((20, 1), dtype=int))[0] == pytest.approx(0.05, rel=1e-6)


def test_temperature_undoes_a_scaled_simulator():
    """A chain simulator with its logits multiplied by 3 is fitted T = 3 on data of the chain."""
    sim = chain_simulator()
    with torch.no_grad():
        sim.head.weight.mul_(3.0)
        sim.head.bias.mul_(3.0)
    seq = draw_chain(4000, 1, 5, np.random.default_rng(1))[:, 0]
    data = Split(images=torch.zeros(len(seq), 3, 8, 8, dtype=torch.uint8), sequences=torch.as_tensor(seq),
                 time_to_event=torch.zeros(len(seq), dtype=torch.long))
    t = fit_temperatures(teacher_forced_logits(sim, data), seq)
    np.testing.assert_allclose(t, 3.0, rtol=0.1)


def test_split_temperature_scaled_rows_by_hand():
    rows = [{"seed": 0, "test/marginal/ece": 0.1, "test/temperature-scaled/marginal/ece": 0.05,
             "test/temperature-scaled/per_entry": '{"a": 1}', "test_per_entry": "{}"},
            {"seed": 1, "test/marginal/ece": 0.2}]
    own, scaled = split_temperature_scaled(rows)
    assert own == [{"seed": 0, "test/marginal/ece": 0.1, "test_per_entry": "{}"}, rows[1]]
    assert scaled == [{"seed": 0, "test/marginal/ece": 0.05, "test_per_entry": '{"a": 1}'}]


# ----------------------------------------------------------------------------- image-blind


def test_image_blind_equals_naive_counting():
    rng = np.random.default_rng(2)
    n_train, L, c, event, b = 60, 6, 4, 3, 0
    train = rng.integers(0, c, (n_train, L))
    test = rng.integers(0, c, (9, L))
    est = image_blind_estimates(train, 9, c, event, alpha=0.8, condition_class=b, test_labels=test)
    for i in range(L):
        for a in range(c):
            count = sum(1 for s in train.tolist() if s[i] == a)
            assert np.all(est.probs[:, i, a] == count / n_train)
    given = [s for s in train.tolist() if s[0] == b]
    keep = [k for k, s in enumerate(test.tolist()) if s[0] == b]
    assert est.cond_probs.shape == (len(keep), L - 1, c)
    for i in range(1, L):
        for a in range(c):
            assert np.all(est.cond_probs[:, i - 1, a] == pytest.approx(sum(s[i] == a for s in given) / len(given)))
    times = [s.index(event) + 1 if event in s else L for s in train.tolist()]  # T from 1, L if none
    assert np.all(est.lo == np.quantile(times, 0.1)) and np.all(est.hi == np.quantile(times, 0.9))
    assert np.all(est.point == pytest.approx(np.mean(times)))


# ----------------------------------------------------------------------------- oracle


@pytest.fixture(scope="module")
def hero_smoke(tmp_path_factory):
    return load_dataset(build_dataset("hero", "smoke", tmp_path_factory.mktemp("oracle") / "hero"))


@pytest.fixture(scope="module")
def facemed_smoke(tmp_path_factory):
    return load_dataset(ensure_dataset("facemed", "smoke", tmp_path_factory.mktemp("oracle")))


def _within(est, exact, M, z=5.0):
    return np.all(np.abs(est - exact) <= z * np.sqrt(exact * (1 - exact) / M) + 2e-3)


def _player_conditional(params, b):
    """P(Y_i = a | Y_1 = b, x) for the player chain, by a naive loop over states (one item)."""
    L, first = params.hazard.shape[1], np.zeros(ale.END + 1)
    first[b] = 1.0
    out = [first]
    for i in range(1, L):
        prev, cur = out[-1], np.zeros(ale.END + 1)
        cur[ale.END] += prev[ale.END]
        for a in range(ale.END):
            if prev[a] == 0:
                continue
            live = prev[a] * (1 - params.hazard[0, i])
            cur[ale.END] += prev[a] * params.hazard[0, i]
            cur[a] += live * params.stick[0]
            cur[:ale.END] += live * (1 - params.stick[0]) * params.switch[0]
        out.append(cur)
    return np.array(out)


def test_player_oracle_follows_the_exact_truth(hero_smoke):
    m, test = hero_smoke.manifest, hero_smoke.test
    assert has_oracle(m, test)
    idx, M = np.arange(3), 4000
    extras = {k: v[idx] for k, v in test.extras.items()}
    s = oracle_samples(m, test.images[idx], extras, M, np.random.default_rng(0), chunk=2)
    assert s.shape == (3, M, m.length)
    assert _within(marginal_probs(s, m.num_classes), test.exact_marginals[idx].astype(np.float64), M)
    b = m.condition_class
    cond = oracle_samples(m, test.images[idx], extras, M, np.random.default_rng(1), first=b)
    assert np.all(cond[:, :, 0] == b)
    params = ale.params_from_manifest(test.images[idx], m)
    for k in range(3):
        exact = _player_conditional(params.take(np.array([k])), b)
        assert _within(marginal_probs(cond[k:k + 1], m.num_classes)[0], exact, M)
    with pytest.raises(ValueError, match="action"):
        oracle_samples(m, test.images[idx], extras, 2, np.random.default_rng(0), first=ale.END)


def test_facemed_oracle_follows_the_chain(facemed_smoke):
    m, test = facemed_smoke.manifest, facemed_smoke.test
    assert has_oracle(m, test)
    ages = np.array([30, 60, 79, 85])
    images = np.zeros((4, *m.image_shape), np.uint8)
    M, L = 4000, m.length
    s = oracle_samples(m, images, {"age": ages}, M, np.random.default_rng(0))
    assert _within(marginal_probs(s, 3), facemed.exact_marginals_batch(ages, L), M)
    cond = oracle_samples(m, images, {"age": ages}, M, np.random.default_rng(1), first=facemed.HEALTHY)
    for k, age in enumerate(ages):
        p, exact = np.array([1.0, 0.0, 0.0]), [np.array([1.0, 0.0, 0.0])]  # Y_1 = healthy
        for i in range(1, L):  # entry i + 1 is reached with the transition of age + i
            p = p @ facemed.transition_matrix(age + i)
            exact.append(p)
        assert _within(marginal_probs(cond[k:k + 1], 3)[0], np.array(exact), M)
    with pytest.raises(ValueError, match="healthy"):
        oracle_samples(m, images, {"age": ages}, 2, np.random.default_rng(0), first=facemed.ILL)


# ----------------------------------------------------------------------------- report rows


def test_baseline_rows_on_a_dataset_with_truth(facemed_smoke):
    finals = {"none": [{"seed": 3, "test/marginal/ece": 0.2, "test/temperature-scaled/marginal/ece": 0.1}]}
    rows = with_baselines(finals, facemed_smoke, TRAIN, seeds=[3, 4])
    assert rows["none"] == [{"seed": 3, "test/marginal/ece": 0.2}]
    assert rows["temperature-scaled"][0]["test/marginal/ece"] == 0.1
    assert [r["seed"] for r in rows["oracle"]] == [3, 4] and len(rows["image-blind"]) == 1
    for family in ("oracle", "image-blind"):
        for row in rows[family]:
            for key in ("test/marginal/ece", "test/marginal/auc", "test/marginal/brier", "test/marginal/rmse",
                        "test/interval/coverage", "test/conditional/items"):
                assert np.isfinite(row[key]), (family, key)
            assert "marginal" in row["test_per_entry"]
    oracle = rows["oracle"]
    assert oracle[0]["test/marginal/leak"] == 0.0  # dead is absorbing in the true chain
    assert oracle[0]["test/marginal/ece"] != oracle[1]["test/marginal/ece"]  # seeds differ
    # The oracle's estimate is the truth up to Monte Carlo error; the image-blind one is not.
    assert oracle[0]["test/marginal/rmse"] < rows["image-blind"][0]["test/marginal/rmse"]


def test_no_oracle_without_a_true_process(tmp_path):
    rng = np.random.default_rng(4)
    L, c = 5, 3
    with DatasetWriter(tmp_path / "ds", class_names=["a", "b", "END"], length=L, image_shape=(1, 2, 2),
                       event_class=2, has_exact_marginals=False) as w:
        for split, n in (("train", 30), ("val", 5), ("test", 8)):
            w.add(split, rng.integers(0, 255, (n, 1, 2, 2)), rng.integers(0, c, (n, L)))
        w.commit(name="x", source="test", game="hero", profile=None, sampling_freq=2,
                 generator="atari-head-import", generator_version="1", seed=0)
    ds = load_dataset(tmp_path / "ds")
    assert not has_oracle(ds.manifest, ds.test)
    rows = baselines.baseline_rows(ds, TRAIN, seeds=[0])
    assert rows["oracle"] == [] and len(rows["image-blind"]) == 1
    assert "test/marginal/rmse" not in rows["image-blind"][0]
