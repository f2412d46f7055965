"""Atari datasets from the emulator: the player's exact truth, mean lengths, frames."""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from focus_tune.data import ATARI_GAMES, build_dataset, get_spec, load_dataset
from focus_tune.data.builtin.ale import (
    ALE_ACTIONS,
    CLASS_NAMES,
    END,
    PLAYER_MODELS,
    PlayerParams,
    build_atari,
    exact_marginals,
    params_from_manifest,
    player_params,
    sample_sequences,
)
from focus_tune.data.builtin.profiles import PAPER_MEAN_LENGTH_S
from focus_tune.data.sequences import time_to_event

PAPER_FIRST_ENTRY = {"seaquest": "NOOP", "riverraid": "NOOP", "hero": "NOOP", "bankheist": "RIGHT",
                     "roadrunner": "LEFT"}


@pytest.fixture(scope="module")
def hero_smoke(tmp_path_factory):
    return load_dataset(build_dataset("hero", "smoke", tmp_path_factory.mktemp("ale") / "hero"))


def test_manifest_and_stored_truth(hero_smoke):
    m = hero_smoke.manifest
    assert m.class_names == CLASS_NAMES and m.num_classes == 19 and m.event_class == END == 18
    assert (m.length, m.sampling_freq, m.image_shape) == (30, 20, (3, 32, 32))
    for split in (hero_smoke.train, hero_smoke.val, hero_smoke.test):
        recomputed = exact_marginals(params_from_manifest(split.images, m))
        assert np.allclose(split.exact_marginals, recomputed, atol=1e-6)  # truth is a function of the frame
        assert np.allclose(split.exact_marginals.sum(axis=2), 1, atol=1e-5)
        assert np.all(np.diff(split.exact_marginals[:, :, END], axis=1) >= -1e-7)  # END absorbing
        end = split.sequences == END
        assert np.all(end[:, 1:] >= end[:, :-1])  # END-padded
    episodes = [set(np.unique(s.extras["episode"])) for s in (hero_smoke.train, hero_smoke.val, hero_smoke.test)]
    assert not (episodes[0] & episodes[1] or episodes[0] & episodes[2] or episodes[1] & episodes[2])
    images = hero_smoke.train.images.reshape(len(hero_smoke.train), -1)
    assert len(np.unique(images, axis=0)) > len(images) // 2  # many distinct emulator frames


def test_exact_marginals_match_monte_carlo(hero_smoke):
    frames = hero_smoke.test.images[:3]
    params = params_from_manifest(frames, hero_smoke.manifest)
    n = 20_000
    draws = sample_sequences(params.take(np.repeat(np.arange(3), n)), np.random.default_rng(0))
    exact = exact_marginals(params)
    for k in range(3):
        ours = draws[k * n:(k + 1) * n]
        freq = np.stack([(ours == c).mean(axis=0) for c in range(19)], axis=1)  # [L, 19]
        tolerance = 5 * np.sqrt(exact[k] * (1 - exact[k]) / n) + 1e-4
        assert np.all(np.abs(freq - exact[k]) <= tolerance)
        # The END column is the exact time-to-event distribution: P(T < i).
        t = time_to_event(ours, END)
        # T counts from 1 and is censored at L, so P(T <= i) = P(END at entry i) for i < L.
        cdf = np.array([(t <= i).mean() for i in range(1, exact.shape[1])])
        assert np.abs(cdf - exact[k, :-1, END]).max() < 0.015


def test_forward_recursion_equals_brute_force_enumeration():
    """Sum the probability of all 19^4 sequences of a short chain and compare."""
    rng = np.random.default_rng(1)
    length = 4
    params = PlayerParams(first=rng.dirichlet(np.ones(18), 1), switch=rng.dirichlet(np.ones(18), 1),
                          stick=np.array([0.7]), hazard=rng.uniform(0.05, 0.4, (1, length)))
    sequences = np.array(list(itertools.product(range(19), repeat=length)))
    prob = np.ones(len(sequences))
    for i in range(length):
        y, h = sequences[:, i], params.hazard[0, i]
        if i == 0:
            step = np.where(y == END, h, (1 - h) * params.first[0, np.minimum(y, 17)])
        else:
            prev = sequences[:, i - 1]
            move = params.stick[0] * (y == prev) + (1 - params.stick[0]) * params.switch[0, np.minimum(y, 17)]
            step = np.where(prev == END, (y == END).astype(float), np.where(y == END, h, (1 - h) * move))
        prob *= step
    assert np.isclose(prob.sum(), 1.0)
    brute = np.stack([np.bincount(sequences[:, i], weights=prob, minlength=19) for i in range(length)])
    assert np.allclose(exact_marginals(params)[0], brute, atol=1e-12)


def test_one_player_in_continuous_time():
    """Stickiness and the time to score are defined in seconds, the same at every freq."""
    model = PLAYER_MODELS["hero"]
    z = np.zeros((1, 4))
    fine, coarse = player_params(z, model, 2, 300, 0.5), player_params(z, model, 6, 100, 0.5)
    assert np.isclose(fine.stick[0], np.exp(-2 / 60 / model.hold_s))
    assert np.isclose(fine.stick[0] ** 3, coarse.stick[0])
    # P(no END in the first 1 s): 30 entries at freq 2, 10 entries at freq 6.
    assert np.isclose(np.prod(1 - fine.hazard[0, :30]), np.prod(1 - coarse.hazard[0, :10]))
    assert np.allclose(fine.switch, coarse.switch)


@pytest.mark.parametrize("game", ATARI_GAMES)
def test_mean_length_near_the_paper_and_condition_class(game, tmp_path):
    """At the paper's L and freq, lengths match the paper's mean and the usual first action."""
    spec = replace(get_spec(game, "paper"), profile="test", train=300, val=20, test=20, image_shape=(3, 16, 16))
    ds = load_dataset(build_atari(spec, tmp_path / game, stride=16))
    details = ds.manifest.details
    assert np.isclose(details["exact_mean_length"]["train"], spec.mean_length_target, rtol=1e-3)
    t = ds.train.time_to_event
    assert abs(t.mean() - spec.mean_length_target) < 4 * t.std() / np.sqrt(len(t))
    assert CLASS_NAMES[ds.manifest.condition_class] == PAPER_FIRST_ENTRY[game]
    seconds = np.mean([details["exact_mean_length"][s] for s in ("val", "test")]) * spec.sampling_freq / 60
    assert abs(seconds / PAPER_MEAN_LENGTH_S[game] - 1) < 0.4  # unseen episodes stay near the target


def test_builds_are_reproducible(hero_smoke, tmp_path):
    again = load_dataset(build_dataset("hero", "smoke", tmp_path / "again"))
    assert again.manifest.files == hero_smoke.manifest.files
    assert ALE_ACTIONS[0] == "NOOP" and ALE_ACTIONS[17] == "DOWNLEFTFIRE"
