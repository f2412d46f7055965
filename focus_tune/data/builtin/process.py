"""The true process of a built-in scenario: the chains its generator drew the sequences from.

A built-in scenario's generator knows the Markov chain behind each item: FaceMed's chain from
the subject's age, an Atari game's simulated player given the frame. The report's reference
rows (``scoring.baselines``: oracle, image-Bayes, exact) sample from those chains, follow
them along their draws and compute their marginals, through :class:`ScenarioProcess`, the one
face both scenarios show. ``facemed`` and ``ale`` each register theirs under the names of
their scenarios (:func:`register`) as they are imported; ``cache.true_process`` imports them
and returns the process of a dataset's scenario (None for one's own data).
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from ..manifest import Manifest


class Chains(Protocol):
    """The parameters of n chains of a process, one per item or one per draw (FaceMed:
    ``facemed.AgeChains``, the ages; Atari: ``ale.PlayerParams``, the player of each frame)."""

    def take(self, index: np.ndarray) -> Chains:
        """The chains at ``index`` (int [k]), in that order."""


class ScenarioProcess(Protocol):
    """The true process of a built-in scenario: one Markov chain per item, read from the item.

    ``first``, where a method takes it, conditions the chain on Y_1 = first (the conditional
    metrics' condition): the chain itself conditioned, not a rejection; a class the chain
    cannot start with is a ValueError that names the ones it can.
    """

    def known(self, manifest: Manifest, extras: dict[str, np.ndarray]) -> bool:
        """Whether the chains of a split's items can be read back from the items (their
        ``extras``) and the manifest: the oracle and exact rows need it."""

    def chains(self, manifest: Manifest, images: np.ndarray, extras: dict[str, np.ndarray],
               first: int | None = None) -> Chains:
        """The chain of each of n items: images uint8 [n, C, H, W], extras [n] each."""

    def sample_sequences(self, chains: Chains, rng: np.random.Generator) -> np.ndarray:
        """One sequence from each of n chains: int64 [n, L]."""

    def conditionals(self, chains: Chains, sequences: np.ndarray) -> np.ndarray:
        """p(Y_i = a | Y_<i) of each chain along its sequences: n chains, sequences [n, M, L]
        -> float64 [n, M, L, c] (entry 1's, for a chain given Y_1, is the unconditioned one's)."""

    def exact_marginals(self, chains: Chains) -> np.ndarray:
        """P(Y_i = a) of each of n chains: float64 [n, L, c] (given Y_1 = first: entry 1 certain)."""

    def image_posterior_known(self, manifest: Manifest, extras: dict[str, np.ndarray]) -> bool:
        """Whether the items record what their images show of their chains (procedural
        FaceMed: the apparent age), so that the best image-only predictor is known: the
        image-Bayes row needs it. False where the image fixes the chain (the Atari player:
        the oracle is then that predictor)."""

    def image_posterior_chains(self, manifest: Manifest, extras: dict[str, np.ndarray], num_samples: int,
                               rng: np.random.Generator, first: int | None = None) -> Chains:
        """M chains per item drawn from their posterior given what the image shows (``extras``
        [n] each): n * M chains, item by item."""


_PROCESSES: dict[str, ScenarioProcess] = {}


def register(process: ScenarioProcess, *scenarios: str) -> None:
    """Make ``process`` the true process of each of the built-in ``scenarios`` (each scenario's
    module registers its own as it is imported); another process for one of them is a ValueError."""
    for scenario in scenarios:
        if _PROCESSES.setdefault(scenario, process) is not process:
            raise ValueError(f"scenario {scenario!r} has a true process already: {_PROCESSES[scenario]!r}")


def registered(scenario: str | None) -> ScenarioProcess | None:
    """The process registered for ``scenario`` so far, None if none is (one's own data has none).
    A scenario's module registers its process when imported: ``cache.true_process`` imports them all."""
    return _PROCESSES.get(scenario)
