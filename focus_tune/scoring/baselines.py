"""Baselines beside the regularized families, each scored like the models.

Pure functions (numpy, torch, the data generators' own samplers; no Ray, no MLflow). Every
sampled baseline draws M sequences per test item and goes through the models' own Monte
Carlo estimator (:func:`focus_tune.scoring.montecarlo.estimate`, either estimator) and metrics
(:func:`~focus_tune.scoring.evaluation.score`), with the same M, the same bins and the same keys, so a
baseline's numbers carry the same Monte Carlo noise as a model's:

* ``image-blind``: ignores the image. Each of the M sequences of an item is a training
  sequence drawn uniformly at random (with replacement), and conditional on Y_1 = b one
  drawn among the training sequences that start with b: the empirical distribution of the
  training set. Needs only sequences, so it works on any data, imported ones included.
* ``oracle``: M sequences per test item from the *true* process (the player model's chain
  of a built Atari dataset, the FaceMed chain given the subject's true age): what a perfect
  simulator of the data scores with this M. On the Atari data the player's chain is a
  function of the frame, so the oracle is also the best image-only simulator.
* ``image-Bayes`` (procedural FaceMed): the best an image-only simulator can do. A face
  shows the age only through its apparent age, so each sample draws an age from the
  posterior given the apparent age (:func:`focus_tune.data.builtin.facemed.age_posterior`), then a
  chain from that age. This, not the oracle, is the target of a simulator on FaceMed.
* ``exact``: the true marginals and time-to-event distribution, no sampling: the
  calibrated reference (its ECE is the floor that finite test data put under any predictor).
  Where the true process is known, the row also carries the labels' own noise
  (:func:`focus_tune.scoring.metrics.label_noise`: the SD of its ECE and debiased squared ECE over
  label sequences redrawn for the same items).
* ``temperature-scaled``: the unregularized final model with one temperature chosen on
  validation (no retraining; :mod:`focus_tune.scoring.temperature`; the search's tie rule),
  sampled in the trial layer (``focus_tune.trial.final``) with the unscaled evaluation's uniforms;
  ``time-dependent temperature``: the same with T_1..T_k1, then one T for the rest.

The oracle, image-Bayes and exact rows ask the dataset's scenario for its true process
(:func:`focus_tune.data.true_process`, a ``data.builtin.process.ScenarioProcess`` that each
built-in scenario registers) and know nothing of any one scenario themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np
import torch

from ..names import (
    CONFORMAL_PREFIX,
    TDT_CONFORMAL_PREFIX,
    TDT_PREFIX,
    TEMPERATURE_SCALED,
    TIME_DEPENDENT_TEMPERATURE,
    TS_CONFORMAL_PREFIX,
    TS_PREFIX,
    conformal_row,
)
from . import metrics, montecarlo
from .evaluation import Scoring, censoring_weights, condition_items, score, test_result
from .montecarlo import Drawn, Estimates, estimates_from_marginals

IMAGE_BLIND = "image-blind"
ORACLE = "oracle"
IMAGE_BAYES = "image-Bayes"
EXACT = "exact"
BASELINES = (TEMPERATURE_SCALED, IMAGE_BLIND, IMAGE_BAYES, ORACLE, EXACT)


# ----------------------------------------------------------------------------- temperature


def split_prefixed(rows: Sequence[dict], prefix: str) -> tuple[list[dict], list[dict]]:
    """Split finals' results into their own rows and the rows of another model they report
    under ``prefix`` (``temperature-scaled/test/...``, ``conformal/test/...``), keyed ``test/...``
    with the seed of the final that reported them."""
    own, other = [], []
    for row in rows:
        mine = {k: v for k, v in row.items() if not k.startswith(prefix)}
        theirs = {"test/" + k.removeprefix(prefix): v for k, v in row.items() if k.startswith(prefix)}
        own.append(mine)
        if theirs:
            if "test/per_entry" in theirs:
                theirs["test_per_entry"] = theirs.pop("test/per_entry")
            theirs["seed"] = row.get("seed")
            other.append(theirs)
    return own, other


def split_temperature_scaled(rows: Sequence[dict], prefix: str = TS_PREFIX) -> tuple[list[dict], list[dict]]:
    """Split the 'none' finals' results into their own rows and a temperature row's.

    A 'none' final reports its temperature-scaled evaluation under ``temperature-scaled/test/...``
    and its time-dependent temperature's under ``time-dependent temperature/test/...`` (``prefix``;
    focus_tune.trial.final); the report wants those as families of their own, keyed ``test/...``.
    """
    own, scaled = split_prefixed(rows, prefix)
    for row in scaled:
        row.setdefault("test_per_entry", None)
    return own, scaled


def split_conformal(finals: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """The finals with each trained row's split conformal results as a row of its own
    (``<family> +conformal``, :func:`focus_tune.names.conformal_row`), the temperature-scaled
    one's taken from the 'none' finals; rows without conformal results are left as they are."""
    out = {}
    for family, rows in finals.items():
        prefixes = [(family, CONFORMAL_PREFIX)]
        if family == "none":
            prefixes += [(TEMPERATURE_SCALED, TS_CONFORMAL_PREFIX), (TIME_DEPENDENT_TEMPERATURE, TDT_CONFORMAL_PREFIX)]
        for row, prefix in prefixes:
            rows, calibrated = split_prefixed(rows, prefix)
            if calibrated:
                out[conformal_row(row)] = calibrated
        out[family] = rows
    return out


# ----------------------------------------------------------------------------- predictors


class Predictor(Protocol):
    """What a sampled baseline is: M sequences per item, optionally with Y_1 forced, and its
    own conditionals along them (for the Rao-Blackwellized estimates)."""

    def draw(self, num_samples: int, rng: np.random.Generator, first: int | None = None,
             items: np.ndarray | None = None) -> tuple[np.ndarray, Callable[[slice], np.ndarray]]:
        """(samples [n, M, L] int64, conditionals): ``conditionals(rows)`` gives p(y_i = a | y_<i)
        along the samples of those items, [k, M, L, c] (``items``: only those test items)."""

    def sample(self, num_samples: int, rng: np.random.Generator, first: int | None = None,
               items: np.ndarray | None = None) -> np.ndarray:
        """The samples of :meth:`draw` alone."""


def rao_blackwell(samples: np.ndarray, conditionals: Callable[[slice], np.ndarray], event: int,
                  first: int | None = None, chunk: int = 32) -> Drawn:
    """Drawn sequences with their Rao-Blackwellized estimates, summed by the model's sampler's
    own accumulator (:class:`focus_tune.scoring.montecarlo.RaoBlackwell`), entry by entry.

    samples [n, M, L]; conditionals(rows) -> [k, M, L, c], the predictor's p(y_i | y_<i)
    along them (a forced Y_1 = first counts one-hot). The result's marginals [n, L, c] are the
    mean over the M rows, its time_pmf [n, L] the mean of 1[no event before t] p(y_t = event |
    ...) for t < L, made a distribution with the fraction ended before t, and T = L the rest
    (``montecarlo.pmf_from_event_terms``). ``chunk`` items at a time bound the memory.
    One accumulator for the model and the baselines costs time here: a numpy mean over the
    draws was 3.4x faster (128 items, M = 100, L = 100, 19 classes: 0.04 s against 0.15 s), a
    few seconds per report with this estimator; the numbers are the same to the bit.
    """
    n, M, L = samples.shape
    marginals, pmf = [], []
    for a in range(0, n, chunk):
        rows = slice(a, min(a + chunk, n))
        s = torch.from_numpy(np.ascontiguousarray(samples[rows], dtype=np.int64))  # (k, M, L)
        p = torch.from_numpy(np.ascontiguousarray(conditionals(rows), dtype=np.float64))  # (k, M, L, c)
        k, c = p.shape[0], p.shape[-1]
        sums, every = montecarlo.RaoBlackwell(k, M, L, c, event), torch.arange(k * M)
        for i in range(L):
            draw = s[:, :, i].reshape(-1)
            sums.add(i, every, draw if i == 0 and first is not None else p[:, :, i].reshape(-1, c), draw)
        m, t = sums.result(s)
        marginals.append(m.numpy())
        pmf.append(t.numpy())
    return Drawn(samples, np.concatenate(marginals), np.concatenate(pmf))


class _Sampling:
    """``sample`` from ``draw``, for the predictors below."""

    def sample(self, num_samples, rng, first=None, items=None):
        return self.draw(num_samples, rng, first, items)[0]


@dataclass
class ImageBlind(_Sampling):
    """The training set's empirical sequence distribution, the same for every item."""

    train_sequences: np.ndarray  # [N_train, L]
    num_items: int
    num_classes: int

    def draw(self, num_samples, rng, first=None, items=None):
        seqs = np.asarray(self.train_sequences, dtype=np.int64)
        if first is not None:
            seqs = seqs[seqs[:, 0] == first]
            if not len(seqs):
                raise ValueError(f"no training sequence starts with class {first}")
        n = self.num_items if items is None else len(items)
        pick = rng.integers(0, len(seqs), (n, num_samples))  # (n, M): which training sequences
        table = empirical_conditionals(seqs, self.num_classes)  # (N_train', L, c)
        return seqs[pick], lambda rows: table[pick[rows]]

    def marginals(self) -> np.ndarray:
        """The distribution's own per-entry class frequencies, the same for every item: [N, L, c]
        (what the sampled estimate converges to; for analyses that want no sampling noise)."""
        seqs = np.asarray(self.train_sequences, dtype=np.int64)
        freq = montecarlo.marginal_probs(seqs[None], self.num_classes)[0]  # (L, c)
        return np.broadcast_to(freq, (self.num_items, *freq.shape))


def completed_sequences(sequences: np.ndarray, observed_length: np.ndarray | None, seed: int = 0) -> np.ndarray:
    """Training sequences for the image-blind predictor with every censored suffix filled in
    [N, L] (``sequences`` itself when nothing is censored).

    Hot-deck imputation under a first-order Markov reading: a sequence cut after entry n
    takes entries n+1..L from a random donor observed beyond n whose entry n is the same
    class (any donor observed beyond n if none shares it; its own last entry repeated if no
    sequence is observed beyond n). Cuts are filled longest first, so a donor cut later
    than n is already complete. Without censoring in the data the image-blind predictor is
    the training sequences' own distribution; with it, whole sequences with filler would
    put the filler's classes where the data say nothing.
    """
    if observed_length is None:
        return sequences
    seqs = np.array(sequences, dtype=np.int64)
    n_obs = np.asarray(observed_length, dtype=np.int64)
    L = seqs.shape[1]
    rng = np.random.default_rng(seed)
    # One pass per cut entry, longest first: the donors of a cut (and their split by the class
    # at the cut) are found once for all the sequences cut there, in index order.
    for cut in np.unique(n_obs[n_obs < L])[::-1]:
        donors = np.flatnonzero(n_obs > cut)
        by_class: dict[int, np.ndarray] = {}
        for k in np.flatnonzero(n_obs == cut):
            last = int(seqs[k, cut - 1])
            if last not in by_class:
                same = donors[seqs[donors, cut - 1] == last]
                by_class[last] = same if len(same) else donors
            pool = by_class[last]
            seqs[k, cut:] = seqs[rng.choice(pool), cut:] if len(pool) else last
    return seqs


def empirical_conditionals(sequences: np.ndarray, num_classes: int) -> np.ndarray:
    """p(y_i = a | y_<i) of the empirical distribution of ``sequences`` [N, L], along each of
    them: [N, L, c] (the fraction of the sequences with the same prefix y_<i whose entry i is a).

    Prefixes get integer ids entry by entry (np.unique of (prefix id, class) pairs), so the
    table costs L passes over the N sequences.
    """
    seqs = np.asarray(sequences, dtype=np.int64)
    N, L = seqs.shape
    out = np.zeros((N, L, num_classes))
    prefix = np.zeros(N, dtype=np.int64)  # id of y_<i (all share the empty prefix)
    for i in range(L):
        pair = prefix * num_classes + seqs[:, i]
        counts = np.zeros((prefix.max() + 1, num_classes))
        np.add.at(counts, (prefix, seqs[:, i]), 1.0)
        out[:, i] = counts[prefix] / counts[prefix].sum(axis=1, keepdims=True)
        prefix = np.unique(pair, return_inverse=True)[1].ravel()
    return out


@dataclass
class Oracle(_Sampling):
    """The oracle row's predictor: the data's own generator per test item, the scenario's true
    process (:func:`focus_tune.data.true_process`: the player's chain of each frame, the FaceMed
    chain from each subject's true age; :func:`has_oracle` says where it is known)."""

    manifest: object
    images: np.ndarray
    extras: dict

    def draw(self, num_samples, rng, first=None, items=None):
        idx = np.arange(len(self.images)) if items is None else np.asarray(items)
        images, extras = self.images[idx], {k: v[idx] for k, v in self.extras.items()}
        samples = oracle_samples(self.manifest, images, extras, num_samples, rng, first=first)
        process = _process(self.manifest)
        chains = process.chains(self.manifest, images, extras, first)  # (n,): one chain per item
        return samples, lambda rows: process.conditionals(chains.take(np.arange(len(idx))[rows]), samples[rows])

    def marginals(self, first: int | None = None, items: np.ndarray | None = None) -> np.ndarray:
        """The exact P(Y_i = a | x) [n, L, c], or given Y_1 = first (entry 1 then certain)."""
        idx = np.arange(len(self.images)) if items is None else np.asarray(items)
        process = _process(self.manifest)
        chains = process.chains(self.manifest, self.images[idx], {k: v[idx] for k, v in self.extras.items()}, first)
        return process.exact_marginals(chains)


@dataclass
class ImageBayes(_Sampling):
    """The best image-only predictor where an image shows its item's chain only in part: each
    draw's chain drawn from its posterior given what the image shows, then a sequence from it
    (the process's ``image_posterior_chains``; procedural FaceMed: an age given the face's
    apparent age). :func:`has_image_bayes` says where it is known."""

    manifest: object
    extras: dict  # [N] each: what the images show (FaceMed: apparent_age)

    def draw(self, num_samples, rng, first=None, items=None):
        extras = self.extras if items is None else {k: v[np.asarray(items)] for k, v in self.extras.items()}
        process = _process(self.manifest)
        chains = process.image_posterior_chains(self.manifest, extras, num_samples, rng, first)  # (n*M,)
        samples = process.sample_sequences(chains, rng).reshape(-1, num_samples, self.manifest.length)
        return samples, _along_own_chains(process, chains, samples)


def _along_own_chains(process, chains, samples: np.ndarray) -> Callable[[slice], np.ndarray]:
    """The conditionals of draws that each have a chain of their own (chains [n*M], item by item;
    samples [n, M, L]): ``along(rows)`` -> [k, M, L, c], each draw a chain with one sequence."""
    n, M, L = samples.shape
    own = np.arange(n * M).reshape(n, M)  # (n, M): each draw's chain

    def along(rows):
        seqs = samples[rows]
        return process.conditionals(chains.take(own[rows].ravel()), seqs.reshape(-1, 1, L)).reshape(*seqs.shape, -1)

    return along


def _true_process(manifest):
    """The true process of the dataset's scenario (``data.builtin.process.ScenarioProcess``), None
    for one's own data."""
    from ..data import true_process

    return true_process(manifest.game)


def _process(manifest):
    """:func:`_true_process`, which the caller needs: a ValueError for one's own data."""
    process = _true_process(manifest)
    if process is None:
        raise ValueError(f"{manifest.scenario!r} is not a built-in scenario: its true process is unknown")
    return process


# ----------------------------------------------------------------------------- oracle


def has_oracle(manifest, split) -> bool:
    """Whether the dataset's true process is known: a built Atari dataset (player model) or FaceMed with ages."""
    process = _true_process(manifest)
    return process is not None and process.known(manifest, split.extras)


def has_image_bayes(manifest, split) -> bool:
    """Whether the best image-only predictor is known: procedural FaceMed, which stores each face's apparent age."""
    process = _true_process(manifest)
    return process is not None and process.image_posterior_known(manifest, split.extras)


def oracle_samples(manifest, images, extras: dict, num_samples: int, rng: np.random.Generator,
                   first: int | None = None, chunk: int = 256) -> np.ndarray:
    """M sequences per item from the true process: [N, M, L] int64.

    ``first``: condition on Y_1 = first (the true conditional process, not a rejection).
    Atari: the player model's chain of each frame (:func:`focus_tune.data.builtin.ale.params_from_manifest`),
    with Y_1 = first given by a sure first action and no END at entry 1. FaceMed: the chain
    from the subject's age; Y_1 = healthy is the chain started healthy one year later.
    ``chunk`` items at a time bound the memory.
    """
    process = _process(manifest)
    L, n = manifest.length, len(images)
    out = np.empty((n, num_samples, L), dtype=np.int64)
    for a in range(0, n, chunk):
        idx = np.arange(a, min(a + chunk, n))
        chains = process.chains(manifest, images[idx], {k: v[idx] for k, v in extras.items()}, first)
        each = chains.take(np.repeat(np.arange(len(idx)), num_samples))  # (k*M,): M draws per item, item by item
        out[idx] = process.sample_sequences(each, rng).reshape(len(idx), num_samples, L)
    return out


# ----------------------------------------------------------------------------- report rows


_SEED_TAGS = {IMAGE_BLIND: 0xB11D, ORACLE: 0x0AC1E, IMAGE_BAYES: 0xBA7E5, EXACT: 0xE8AC7}


def baseline_rows(dataset, scoring: Scoring, seeds: Sequence[int]) -> dict[str, list[dict]]:
    """The reference rows of a dataset's test split, with the keys of the finals' test results.

    ``image-blind`` always, ``oracle`` and ``exact`` where the true process is known,
    ``image-Bayes`` on procedural FaceMed; the sampled rows once per seed in ``seeds`` (the
    finals' seeds), ``exact`` once. A row a dataset cannot have is an empty list.
    """
    from ..data import evaluation_groups

    m, test = dataset.manifest, dataset.test
    n = len(test.sequences) if scoring.items is None else min(scoring.items, len(test.sequences))
    labels, true_t = np.asarray(test.sequences[:n]), np.asarray(test.time_to_event[:n])
    exact = None if test.exact_marginals is None else np.asarray(test.exact_marginals[:n])
    extras = {k: np.asarray(v[:n]) for k, v in test.extras.items()}
    c, event, cond = m.num_classes, m.event_class, m.condition_class
    keep = condition_items(labels, cond)
    groups = evaluation_groups(extras, m.game)
    # Right-censored test data: every row scored over the observed labels, with the censored times weighted.
    observed = None if test.observed is None else test.observed[:n]
    censored = None if observed is None else np.asarray(test.censored[:n])
    weights = None if observed is None else censoring_weights(labels, true_t, observed, censored)

    def row(est: Estimates, seed, samples=None) -> dict:
        out, per_entry = score(est, labels, true_t, scoring.ece_bins, exact, cond, scoring.alpha, groups,
                               observed=observed, censored=censored)
        if samples is not None:
            out["marginal/leak"], _ = montecarlo.leak(samples, event)
        return {**test_result(out, per_entry, est.probs, labels, scoring.ece_bins, weights=weights), "seed": seed}

    def sampled(predictor: Predictor, tag: int) -> list[dict]:
        rows = []
        for seed in seeds:
            rng = np.random.default_rng([seed, tag])
            samples, along = predictor.draw(scoring.num_samples, rng)
            given = None if keep is None else predictor.draw(scoring.num_samples, rng, first=cond, items=keep)
            if scoring.estimator == "rao_blackwell":  # the predictor's conditionals summed along its draws
                drawn = rao_blackwell(samples, along, event)
                given = None if given is None else rao_blackwell(*given, event, first=cond)
            else:
                drawn, given = Drawn(samples), None if given is None else Drawn(given[0])
            est = montecarlo.estimate(drawn, scoring.estimator, event, c, scoring.alpha, given)
            rows.append(row(est, seed, samples))
        return rows

    train = completed_sequences(dataset.train.sequences, dataset.train.observed_length)
    rows: dict[str, list[dict]] = {IMAGE_BLIND: sampled(ImageBlind(train, n, c),
                                                        _SEED_TAGS[IMAGE_BLIND]),
                                   IMAGE_BAYES: [], ORACLE: [], EXACT: []}
    if has_image_bayes(m, test):
        rows[IMAGE_BAYES] = sampled(ImageBayes(m, extras), _SEED_TAGS[IMAGE_BAYES])
    if has_oracle(m, test):
        truth = Oracle(m, np.asarray(test.images[:n]), extras)
        rows[ORACLE] = sampled(truth, _SEED_TAGS[ORACLE])
        cond_exact = None if keep is None else truth.marginals(first=cond, items=keep)[:, 1:]
        exact_probs = truth.marginals()
        rng = np.random.default_rng(_SEED_TAGS[EXACT])
        noise = metrics.label_noise(exact_probs, lambda: truth.draw(1, rng)[0][:, 0], weights=weights)
        rows[EXACT] = [{**row(estimates_from_marginals(exact_probs, cond_exact, event, scoring.alpha), None), **noise}]
    elif exact is not None:  # exact marginals stored without a process: no conditional
        rows[EXACT] = [row(estimates_from_marginals(exact, None, event, scoring.alpha), None)]
    return rows


def with_baselines(finals: dict[str, list[dict]], dataset, scoring: Scoring,
                   seeds: Sequence[int]) -> dict[str, list[dict]]:
    """The finals' results with the baseline families added (the report's input).

    ``finals`` maps a family to its per-seed test results; the ``+conformal`` rows are split
    off each family's results (:func:`split_conformal`), the temperature-scaled rows off the
    'none' results, the reference rows (:func:`baseline_rows`) are computed
    on the test split (the same items as the finals), the sampled ones once per seed.
    """
    out = split_conformal(finals)
    if "none" in out:
        out["none"], scaled = split_temperature_scaled(out["none"])
        out[TEMPERATURE_SCALED] = scaled
        out["none"], staged = split_temperature_scaled(out["none"], TDT_PREFIX)
        if staged:  # a search from before the row existed has none
            out[TIME_DEPENDENT_TEMPERATURE] = staged
    out.update({k: v for k, v in baseline_rows(dataset, scoring, seeds).items() if v})
    return out
