"""Baselines beside the regularized families: image-blind, oracle and temperature-scaled.

Pure functions (numpy, torch, the data generators' own samplers; no Ray, no MLflow). Each
baseline produces :class:`~focus_tune.train.Estimates` that :func:`~focus_tune.train.score`
turns into the same metrics, under the same keys, as the trained families:

* ``image-blind``: ignores the image. Every item gets the per-entry class frequencies of the
  training sequences; conditional on Y_1 = b, the frequencies among the training sequences
  whose first entry is b; its interval is the quantile pair of the pooled training
  time-to-event distribution and its point estimate that distribution's mean. Needs only
  sequences, so it works on any data, imported Atari-HEAD and UTKFace included.
* ``oracle``: M sequences per test item sampled from the *true* process (the player model's
  chain of a built Atari dataset, the FaceMed chain given the subject's age), pushed through
  the Monte Carlo estimators of the models. It scores what a perfect simulator scores with
  the same M, one row per final seed.
* ``temperature-scaled``: the unregularized final model with one temperature T_i per entry,
  fitted on the validation split by minimising the teacher-forced NLL of entry i alone (no
  retraining); :func:`fit_temperatures` here, the sampling in the trainable.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import torch

from . import montecarlo
from .train import Estimates, condition_items, estimates_from_samples, score, test_result

IMAGE_BLIND = "image-blind"
ORACLE = "oracle"
TEMPERATURE_SCALED = "temperature-scaled"
BASELINES = (TEMPERATURE_SCALED, IMAGE_BLIND, ORACLE)
TS_PREFIX = f"test/{TEMPERATURE_SCALED}/"  # keys of the temperature-scaled metrics in a 'none' final's result
TEMPERATURE_BOUNDS = (0.05, 20.0)


# ----------------------------------------------------------------------------- temperature


def fit_temperatures(logits, labels, bounds: tuple[float, float] = TEMPERATURE_BOUNDS, iters: int = 50,
                     chunk: int = 32) -> np.ndarray:
    """One temperature per entry: T_i = argmin_T mean_n -log softmax(z_ni / T)[y_ni].

    logits [N, L, c] (teacher forced), labels [N, L] -> float64 [L]. The NLL is convex in
    beta = 1/T, so its derivative mean_n (E_{p_beta}[z] - z_y) is increasing in beta: each
    entry's root is found by bisection on log beta inside ``bounds`` (an optimum outside
    them, e.g. an entry where every label is the model's sure top class, gives the bound).
    ``chunk`` entries at a time bound the memory.
    """
    z_all = torch.as_tensor(logits)
    y_all = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    if z_all.ndim != 3 or y_all.shape != z_all.shape[:2]:
        raise ValueError(f"logits [N, L, c] and labels [N, L] do not match: {tuple(z_all.shape)}, {tuple(y_all.shape)}")
    lo_t, hi_t = bounds
    if not 0 < lo_t < 1 < hi_t:
        raise ValueError(f"temperature bounds must satisfy 0 < low < 1 < high, got {bounds}")
    L = z_all.shape[1]
    out = np.empty(L)
    for a in range(0, L, chunk):
        z = z_all[:, a : a + chunk].double()  # (N, l, c)
        zy = torch.gather(z, 2, y_all[:, a : a + chunk, None])[..., 0]  # (N, l)
        lo = torch.full((z.shape[1],), -np.log(hi_t), dtype=torch.float64)  # log beta
        hi = torch.full((z.shape[1],), -np.log(lo_t), dtype=torch.float64)
        for _ in range(iters):
            mid = 0.5 * (lo + hi)
            p = torch.softmax(z * mid.exp().view(1, -1, 1), dim=-1)
            # d NLL / d beta = E_p[z] - z_y, written as E_p[z - z_y] so that a nearly sure
            # entry keeps its (tiny, negative) sign instead of cancelling to 0.
            grad = (p * (z - zy[..., None])).sum(-1).mean(0)  # (l,)
            lo, hi = torch.where(grad < 0, mid, lo), torch.where(grad < 0, hi, mid)
        out[a : a + chunk] = np.exp(-0.5 * (lo + hi).numpy())
    return out


def split_temperature_scaled(rows: Sequence[dict]) -> tuple[list[dict], list[dict]]:
    """Split the 'none' finals' results into their own rows and the temperature-scaled rows.

    A 'none' final reports its temperature-scaled evaluation under ``test/temperature-scaled/...``
    (see the trainable); the report wants those as a family of their own, keyed ``test/...``.
    """
    own, scaled = [], []
    for row in rows:
        mine = {k: v for k, v in row.items() if not k.startswith(TS_PREFIX)}
        ts = {"test/" + k.removeprefix(TS_PREFIX): v for k, v in row.items() if k.startswith(TS_PREFIX)}
        own.append(mine)
        if ts:
            ts["test_per_entry"] = ts.pop("test/per_entry", None)
            ts["seed"] = row.get("seed")
            scaled.append(ts)
    return own, scaled


# ----------------------------------------------------------------------------- image-blind


def image_blind_estimates(train_sequences, num_items: int, num_classes: int, event: int, alpha: float,
                          condition_class: int | None = None, test_labels=None) -> Estimates:
    """The image-blind predictor's estimates for ``num_items`` test items.

    train_sequences [N_train, L]; test_labels [N, L] pick the conditional items (their
    true Y_1 is the condition). Frequencies, not Monte Carlo samples: every item gets the
    same P(Y_i = a) = mean over training sequences of 1[y_i = a].
    """
    seqs = np.asarray(train_sequences, dtype=np.int64)
    n_train, L = seqs.shape
    freq = montecarlo.marginal_probs(seqs[None], num_classes)[0]  # (L, c)
    times = montecarlo.time_to_event(seqs[None], event)  # (1, N_train): the pooled distribution
    lo, hi = montecarlo.interval(times, alpha)
    cond = None
    keep = None if test_labels is None else condition_items(np.asarray(test_labels), condition_class)
    if keep is not None:
        given = seqs[seqs[:, 0] == condition_class]
        if len(given):
            cfreq = montecarlo.marginal_probs(given[None], num_classes)[0, 1:]  # (L-1, c)
            cond = np.repeat(cfreq[None], len(keep), axis=0)
    ones = np.ones(num_items)
    return Estimates(np.repeat(freq[None], num_items, axis=0), lo[0] * ones, hi[0] * ones,
                     times.mean() * ones, cond)


# ----------------------------------------------------------------------------- oracle


def has_oracle(manifest, split) -> bool:
    """Whether the dataset's true process is known: a built Atari dataset (player model) or FaceMed with ages."""
    if manifest.game == "facemed":
        return "age" in split.extras
    return "player_model" in manifest.details


def oracle_samples(manifest, images, extras: dict, num_samples: int, rng: np.random.Generator,
                   first: int | None = None, chunk: int = 256) -> np.ndarray:
    """M sequences per item from the true process: [N, M, L] int64.

    ``first``: condition on Y_1 = first (the true conditional process, not a rejection).
    Atari: the player model's chain of each frame (:func:`focus_tune.data.ale.params_from_manifest`),
    with Y_1 = first given by a sure first action and no END at entry 1. FaceMed: the chain
    from the subject's age; Y_1 = healthy is the chain started healthy one year later.
    ``chunk`` items at a time bound the memory.
    """
    L, n = manifest.length, len(images)
    out = np.empty((n, num_samples, L), dtype=np.int64)
    for a in range(0, n, chunk):
        idx = np.arange(a, min(a + chunk, n))
        out[idx] = _oracle_chunk(manifest, images[idx], {k: v[idx] for k, v in extras.items()},
                                 num_samples, rng, first).reshape(len(idx), num_samples, L)
    return out


def _oracle_chunk(manifest, images, extras, M, rng, first):
    L = manifest.length
    if manifest.game == "facemed":
        from .data import facemed

        ages = np.repeat(np.asarray(extras["age"], dtype=np.float64), M)
        if first is None:
            return facemed.sample_sequences(ages, L, rng)
        if first != facemed.HEALTHY:
            raise ValueError(f"the FaceMed oracle conditions on Y_1 = healthy only, not class {first}")
        rest = facemed.sample_sequences(ages + 1, L - 1, rng)
        return np.concatenate([np.full((len(ages), 1), facemed.HEALTHY), rest], axis=1)
    from .data import ale

    params = ale.params_from_manifest(np.asarray(images), manifest)
    params = params.take(np.repeat(np.arange(len(images)), M))
    if first is not None:
        if not 0 <= first < ale.END:
            raise ValueError(f"the player oracle conditions on an action in [0, {ale.END}), not class {first}")
        hazard = params.hazard.copy()
        hazard[:, 0] = 0.0  # Y_1 is the action, not END
        params = dataclasses.replace(params, first=np.eye(ale.END)[np.full(len(hazard), first)], hazard=hazard)
    return ale.sample_sequences(params, rng)


# ----------------------------------------------------------------------------- report rows


def baseline_rows(dataset, train: dict, seeds: Sequence[int]) -> dict[str, list[dict]]:
    """The image-blind row and the oracle rows (one per seed) of a dataset's test split.

    ``train`` is the TrainConfig as a dict (test_items, num_samples, ece_bins, alpha); the
    rows have the keys of the finals' test results (``test/marginal/ece``, ...,
    ``test_per_entry``). The oracle is left out (empty list) where the data has no true process.
    """
    m = dataset.manifest
    test = dataset.test
    n = len(test.sequences) if train["test_items"] is None else min(train["test_items"], len(test.sequences))
    labels, true_t = np.asarray(test.sequences[:n]), np.asarray(test.time_to_event[:n])
    exact = None if test.exact_marginals is None else np.asarray(test.exact_marginals[:n])
    bins, alpha, c, event, cond = train["ece_bins"], train["alpha"], m.num_classes, m.event_class, m.condition_class

    def row(est: Estimates, seed, samples=None) -> dict:
        out, extras = score(est, labels, true_t, bins, exact, cond)
        if samples is not None:
            out["marginal/leak"], _ = montecarlo.leak(samples, event)
        return {**test_result(out, extras, est.probs, labels, bins), "seed": seed}

    blind = image_blind_estimates(dataset.train.sequences, n, c, event, alpha, cond, labels)
    rows: dict[str, list[dict]] = {IMAGE_BLIND: [row(blind, None)], ORACLE: []}
    if has_oracle(m, test):
        images = test.images[:n]
        extras = {k: np.asarray(v[:n]) for k, v in test.extras.items()}
        keep = condition_items(labels, cond)
        for seed in seeds:
            rng = np.random.default_rng([seed, 0x0AC1E])
            samples = oracle_samples(m, images, extras, train["num_samples"], rng)
            cond_samples = None
            if keep is not None:
                cond_samples = oracle_samples(m, images[keep], {k: v[keep] for k, v in extras.items()},
                                              train["num_samples"], rng, first=cond)
            est = estimates_from_samples(samples, cond_samples, event, c, alpha)
            rows[ORACLE].append(row(est, seed, samples))
    return rows


def with_baselines(finals: dict[str, list[dict]], dataset, train: dict, seeds: Sequence[int]) -> dict[str, list[dict]]:
    """The finals' results with the baseline families added (the report's input).

    ``finals`` maps a family to its per-seed test results; the temperature-scaled rows are
    split off the 'none' results, the image-blind and oracle rows are computed on the test
    split (the same items as the finals), the oracle once per seed in ``seeds``.
    """
    out = dict(finals)
    if "none" in out:
        out["none"], scaled = split_temperature_scaled(out["none"])
        out[TEMPERATURE_SCALED] = scaled
    out.update(baseline_rows(dataset, train, seeds))
    return out
