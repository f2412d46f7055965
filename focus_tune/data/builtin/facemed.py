"""FaceMed: a face image -> yearly health states {healthy, ill, dead} (paper App. B).

The chain, exactly as in the paper. The subject is healthy at the image (Y_0, not part
of the sequence). Entry i (i = 1..L) is the state i years after the image, reached from
Y_{i-1} by the transition for the subject's age at entry i-1, `age + i - 1`:

    age < 40         the state never changes
    40 <= age <= 80  healthy -> (0.9, 0.1, 0), ill -> (0.1, 0.9, 0)
    age > 80         healthy -> (0.6, 0.4, 0), ill -> (0.1, 0.7, 0.2)
    dead             absorbing (sequences of those who die are padded with dead)

Ages are whole years. Images come from the procedural generator in `faces.py` (the
default) or from a UTKFace folder (`import_utkface`). `FaceMedProcess` is the chain as the
report's reference rows use it (`process.ScenarioProcess`), registered for FaceMed.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from ..dataset_writer import DatasetWriter
from ..images import load_rgb_resized
from ..manifest import Manifest
from .faces import APPARENT_LOG_SD, APPARENT_MAX, APPARENT_SD, apparent_age, render_looks
from .process import ScenarioProcess, register
from .profiles import FACEMED, DatasetSpec, get_spec

HEALTHY, ILL, DEAD = 0, 1, 2
CLASS_NAMES = ["healthy", "ill", "dead"]
GENERATOR_VERSION = "2"  # 2: the apparent age of each face is stored (extras "apparent_age")
MAX_AGE = 116
# Paper split sizes (16641 / 4738 / 2329) as fractions, used to split imported folders.
PAPER_FRACTIONS = (16641 / 23708, 4738 / 23708, 2329 / 23708)

_MIDDLE = np.array([[0.9, 0.1, 0.0], [0.1, 0.9, 0.0], [0.0, 0.0, 1.0]])
_OLD = np.array([[0.6, 0.4, 0.0], [0.1, 0.7, 0.2], [0.0, 0.0, 1.0]])


def transition_matrix(age: float) -> np.ndarray:
    """P(next state | current state) for a subject of this age: float64 [3, 3], rows sum to 1."""
    if age < 40:
        return np.eye(3)
    if age <= 80:
        return _MIDDLE.copy()
    return _OLD.copy()


def _transition_matrices(ages: np.ndarray) -> np.ndarray:
    """Vectorised `transition_matrix`: ages [...] -> [..., 3, 3]."""
    ages = np.asarray(ages)[..., None, None]
    return np.where(ages < 40, np.eye(3), np.where(ages <= 80, _MIDDLE, _OLD))


def exact_marginals(age: float, length: int = 100) -> np.ndarray:
    """P(Y_i = a) for i = 1..length given the age at the image: float64 [length, 3]."""
    return exact_marginals_batch(np.array([age]), length)[0]


def exact_marginals_batch(ages: np.ndarray, length: int) -> np.ndarray:
    """`exact_marginals` for many subjects: ages [N] -> float64 [N, length, 3]."""
    ages = np.asarray(ages, dtype=np.float64)
    out = np.empty((len(ages), length, 3))
    p = np.tile([1.0, 0.0, 0.0], (len(ages), 1))  # Y_0 = healthy
    for i in range(length):
        p = np.einsum("nb,nba->na", p, _transition_matrices(ages + i))
        out[:, i] = p
    return out


def conditionals(sequences: np.ndarray, ages: np.ndarray) -> np.ndarray:
    """p(Y_i = a | Y_{i-1}, age) along given sequences: [..., L] states and ages [...] -> [..., L, 3].

    Entry i (0-based) is reached by the transition for `age + i` from the previous entry
    (from healthy, Y_0, at i = 0): the chain's own probability of each next state.
    """
    seqs = np.asarray(sequences)
    L = seqs.shape[-1]
    prev = np.concatenate([np.full(seqs.shape[:-1] + (1,), HEALTHY), seqs[..., :-1]], axis=-1)
    moves = _transition_matrices(np.asarray(ages, dtype=np.float64)[..., None] + np.arange(L))  # [..., L, 3, 3]
    return np.take_along_axis(moves, prev[..., None, None], axis=-2)[..., 0, :]


def sample_sequences(ages: np.ndarray, length: int, rng: np.random.Generator) -> np.ndarray:
    """Draw one health trajectory per subject: ages [N] -> int64 [N, length]."""
    ages = np.asarray(ages, dtype=np.float64)
    state = np.full(len(ages), HEALTHY)
    out = np.empty((len(ages), length), dtype=np.int64)
    for i in range(length):
        rows = _transition_matrices(ages + i)[np.arange(len(ages)), state]  # [N, 3]
        u = rng.random(len(ages))[:, None]
        state = (u >= np.cumsum(rows, axis=1)[:, :2]).sum(axis=1)
        out[:, i] = state
    return out


# Relative frequency of each age 0..116, shaped like UTKFace's histogram: a peak of
# babies around 1 year, most faces between 20 and 40, a broad shoulder to ~70 and a thin
# tail to 116. The statistics it yields are in docs/DATA.md.
def _age_weights() -> np.ndarray:
    a = np.arange(MAX_AGE + 1, dtype=np.float64)
    babies = np.exp(-np.abs(a - 1) / 2.5)
    children = np.where((a >= 4) & (a <= 17), 1.0, 0.0)
    adults = np.exp(-0.5 * ((np.log(np.maximum(a, 1)) - np.log(28)) / 0.22) ** 2) / np.maximum(a, 1)
    older = np.exp(-0.5 * ((a - 56) / 14) ** 2)
    tail = np.where(a >= 75, np.exp(-(a - 75) / 12), 0.0)
    mix = (0.09 * babies / babies.sum() + 0.06 * children / children.sum() + 0.55 * adults / adults.sum()
           + 0.26 * older / older.sum() + 0.04 * tail / tail.sum())
    return mix / mix.sum()


AGE_WEIGHTS = _age_weights()


def sample_ages(n: int, rng: np.random.Generator) -> np.ndarray:
    """Ages 0..116 drawn from `AGE_WEIGHTS`: int64 [n]."""
    return rng.choice(MAX_AGE + 1, size=n, p=AGE_WEIGHTS)


# ----------------------------------------------------------------------------- what the image shows

AGE_BANDS = ("age_under_40", "age_40_to_80", "age_over_80")  # the chain's regimes, by the age at the image


def age_bands(ages: np.ndarray) -> dict[str, np.ndarray]:
    """Masks [N] of the subjects in each of the chain's age regimes at the image (:data:`AGE_BANDS`)."""
    ages = np.asarray(ages)
    return dict(zip(AGE_BANDS, (ages < 40, (ages >= 40) & (ages <= 80), ages > 80)))


def age_posterior(looks: np.ndarray, grid: int = 241, chunk: int = 256) -> np.ndarray:
    """P(true age = a | apparent age) for a = 0..MAX_AGE: looks [N] -> float64 [N, MAX_AGE + 1].

    A procedural face shows the true age only through its apparent age
    (``faces.apparent_age``: look = clip(age * exp(e1) + e2, 0, 120), e1 ~ N(0, 0.15),
    e2 ~ N(0, 2.5)), so this posterior, under the ages' prior :data:`AGE_WEIGHTS`, is all an
    image can tell of the age. The likelihood integrates e1 on a grid of ``grid`` points over
    +-6 SD (trapezoid rule); a look clipped to 0 or 120 has the probability mass of the clip.
    """
    looks = np.asarray(looks, dtype=np.float64)
    ages = np.arange(MAX_AGE + 1, dtype=np.float64)
    e1 = np.linspace(-6 * APPARENT_LOG_SD, 6 * APPARENT_LOG_SD, grid)
    w = np.exp(-0.5 * (e1 / APPARENT_LOG_SD) ** 2)
    w[[0, -1]] *= 0.5
    w /= w.sum()
    scaled = ages[:, None] * np.exp(e1)[None, :]  # (A, G): age * exp(e1)
    out = np.empty((len(looks), len(ages)))
    from scipy.special import ndtr  # the normal cdf, vectorized

    for a in range(0, len(looks), chunk):
        look = looks[a:a + chunk, None, None]  # (n, 1, 1)
        z = (look - scaled[None]) / APPARENT_SD  # (n, A, G)
        density = np.exp(-0.5 * z ** 2) / (APPARENT_SD * np.sqrt(2 * np.pi))
        low, high = look[:, 0, 0] <= 0, look[:, 0, 0] >= APPARENT_MAX  # clipped looks: the clip's mass
        if low.any():
            density[low] = ndtr(z[low])
        if high.any():
            density[high] = ndtr(-z[high])
        out[a:a + chunk] = (density @ w) * AGE_WEIGHTS[None, :]
    total = out.sum(axis=1, keepdims=True)
    if (total <= 0).any():
        raise ValueError("an apparent age has zero likelihood under every true age")
    return out / total


def healthy_at_first(ages: np.ndarray) -> np.ndarray:
    """P(Y_1 = healthy | age): ages [N] -> float64 [N] (the condition of the conditional metrics)."""
    return exact_marginals_batch(np.asarray(ages, dtype=np.float64), 1)[:, 0, HEALTHY]


# ----------------------------------------------------------------------------- the true process


@dataclass(frozen=True)
class AgeChains:
    """FaceMed's chains of n subjects (``process.Chains``): each from its age at the image.

    ages float64 [n]; length L; first: None, or HEALTHY for the chain given Y_1 = healthy (the
    chain started healthy a year later, entry 1 certain).
    """

    ages: np.ndarray
    length: int
    first: int | None = None

    def take(self, index: np.ndarray) -> "AgeChains":
        return AgeChains(self.ages[index], self.length, self.first)


def _check_first(first: int | None) -> None:
    if first is not None and first != HEALTHY:
        raise ValueError(f"the FaceMed chain conditions on Y_1 = healthy only, not class {first}")


class FaceMedProcess(ScenarioProcess):
    """FaceMed's true process (``process.ScenarioProcess``): the chain from each subject's age,
    stored as the extra ``age``; procedural faces also store what the face shows of it
    (``apparent_age``), from which ``age_posterior`` gives the best image-only predictor."""

    def known(self, manifest: Manifest, extras: dict[str, np.ndarray]) -> bool:
        return "age" in extras

    def chains(self, manifest: Manifest, images: np.ndarray, extras: dict[str, np.ndarray],
               first: int | None = None) -> AgeChains:
        _check_first(first)
        return AgeChains(np.asarray(extras["age"], dtype=np.float64), manifest.length, first)

    def sample_sequences(self, chains: AgeChains, rng: np.random.Generator) -> np.ndarray:
        if chains.first is None:
            return sample_sequences(chains.ages, chains.length, rng)
        rest = sample_sequences(chains.ages + 1, chains.length - 1, rng)  # the chain started healthy a year later
        return np.concatenate([np.full((len(chains.ages), 1), chains.first), rest], axis=1)

    def conditionals(self, chains: AgeChains, sequences: np.ndarray) -> np.ndarray:
        seqs = np.asarray(sequences)  # (n, M, L): every draw of a subject from its age
        return conditionals(seqs, np.repeat(chains.ages[:, None], seqs.shape[1], 1))

    def exact_marginals(self, chains: AgeChains) -> np.ndarray:
        if chains.first is None:
            return exact_marginals_batch(chains.ages, chains.length)
        rest = exact_marginals_batch(chains.ages + 1, chains.length - 1)  # the chain started healthy a year later
        certain = np.broadcast_to(np.eye(3)[chains.first], (len(chains.ages), 1, 3))
        return np.concatenate([certain, rest], axis=1)

    def image_posterior_known(self, manifest: Manifest, extras: dict[str, np.ndarray]) -> bool:
        return "apparent_age" in extras

    def image_posterior_chains(self, manifest: Manifest, extras: dict[str, np.ndarray], num_samples: int,
                               rng: np.random.Generator, first: int | None = None) -> AgeChains:
        """M ages per subject from the posterior given its apparent age (``age_posterior``),
        drawn by inverting its CDF with one uniform each: n * M chains, subject by subject."""
        post = age_posterior(extras["apparent_age"])  # (n, A)
        if first is not None:  # seeing Y_1 = healthy also tells something of the age
            _check_first(first)
            post = post * healthy_at_first(np.arange(post.shape[1]))[None, :]
            post /= post.sum(axis=1, keepdims=True)
        cdf = np.cumsum(post, axis=1)  # (n, A)
        u = rng.random((len(cdf), num_samples))
        ages = np.minimum((u[..., None] >= cdf[:, None, :]).sum(axis=2), cdf.shape[1] - 1).ravel()  # (n*M,)
        return AgeChains(ages.astype(np.float64), manifest.length, first)


register(FaceMedProcess(), FACEMED)


def build_facemed(spec: DatasetSpec, out_dir: str | os.PathLike, seed: int = 0,
                  chunk: int = 1024) -> Path:
    """Build FaceMed with procedural faces at the sizes of `spec`; returns out_dir."""
    rng = np.random.default_rng([seed, 0xFACE])
    channels, height, width = spec.image_shape
    if channels != 3 or height != width:
        raise ValueError(f"procedural faces are square RGB, not {spec.image_shape}")
    with _writer(out_dir, spec.length, spec.image_shape) as writer:
        for split, n in spec.split_sizes.items():
            for start in range(0, n, chunk):
                ages = sample_ages(min(chunk, n - start), rng)
                looks = apparent_age(ages, rng)
                _add_subjects(writer, split, render_looks(looks, height, rng), ages, spec.length, rng, looks)
        return writer.commit(
            name=f"facemed-{spec.profile}-seed{seed}", source="procedural faces (focus_tune.data.builtin.faces)",
            game="facemed", profile=spec.profile, sampling_freq=1, generator="facemed-procedural",
            generator_version=GENERATOR_VERSION, seed=seed,
            details={"age_distribution": "focus_tune.data.builtin.facemed.AGE_WEIGHTS"},
        )


def _writer(out_dir: str | os.PathLike, length: int, image_shape: tuple[int, int, int]) -> DatasetWriter:
    return DatasetWriter(out_dir, class_names=CLASS_NAMES, length=length, image_shape=image_shape,
                         event_class=DEAD, has_exact_marginals=True)


def _add_subjects(writer: DatasetWriter, split: str, images: np.ndarray, ages: np.ndarray,
                  length: int, rng: np.random.Generator, looks: np.ndarray | None = None) -> None:
    extras = {"age": ages.astype(np.int16)}
    if looks is not None:  # procedural faces: how old each face looks (what the image shows of the age)
        extras["apparent_age"] = looks.astype(np.float32)
    writer.add(split, images, sample_sequences(ages, length, rng),
               exact_marginals=exact_marginals_batch(ages, length), extras=extras)


# UTKFace names: AGE_GENDER_RACE_DATETIME.jpg, the aligned crops add ".chip.jpg".
_UTKFACE_NAME = re.compile(r"^(\d{1,3})_([01])_([0-4])_(\d+)\.jpg(\.chip\.jpg)?$", re.IGNORECASE)


def parse_utkface_name(name: str) -> int | None:
    """The age in a UTKFace file name, or None when the name does not follow the pattern."""
    match = _UTKFACE_NAME.match(name)
    if match is None or int(match.group(1)) > MAX_AGE:
        return None
    return int(match.group(1))


def scan_utkface(folder: str | os.PathLike) -> tuple[list[tuple[Path, int]], list[str]]:
    """(path, age) of every well-named UTKFace image under `folder`, and the skipped names.

    Files that are not images (no .jpg suffix) are ignored silently; .jpg files whose name
    does not follow AGE_GENDER_RACE_DATETIME are returned as skipped.
    """
    found, skipped = [], []
    for path in sorted(Path(folder).rglob("*")):
        if not path.is_file() or not path.name.lower().endswith(".jpg"):
            continue
        age = parse_utkface_name(path.name)
        if age is None:
            skipped.append(path.name)
        else:
            found.append((path, age))
    return found, skipped


def import_utkface(folder: str | os.PathLike, out_dir: str | os.PathLike, *, image_size: int | None = None,
                   length: int | None = None, seed: int = 0, chunk: int = 512) -> Path:
    """Build FaceMed from a UTKFace folder: real faces, chain sequences, exact marginals.

    Images are center-cropped to squares and resized to image_size (default: the paper
    profile's); the split is random with the paper's proportions (70.2 / 20.0 / 9.8 %).
    Malformed names and unreadable images are skipped and counted in the manifest details.
    """
    paper = get_spec("facemed", "paper")
    size = image_size or paper.image_shape[1]
    length = length or paper.length
    found, malformed = scan_utkface(folder)
    if len(found) < 3:
        raise ValueError(f"{folder}: found {len(found)} UTKFace images (AGE_GENDER_RACE_DATETIME.jpg); need at least 3")
    rng = np.random.default_rng([seed, 0x07F])
    order = rng.permutation(len(found))
    bounds = np.round(np.cumsum(PAPER_FRACTIONS) * len(found)).astype(int)
    bounds = np.maximum(bounds, [1, 2, 3])  # every split gets at least one image
    parts = dict(zip(("train", "val", "test"), np.split(order, bounds[:2])))
    unreadable: list[str] = []
    with _writer(out_dir, length, (3, size, size)) as writer:
        for split, indices in parts.items():
            for batch in _chunks(indices, chunk):
                images, ages = [], []
                for i in batch:
                    path, age = found[i]
                    image = load_rgb_resized(path, size, size, square_crop=True)
                    if image is None:
                        unreadable.append(path.name)
                        continue
                    images.append(image)
                    ages.append(age)
                if images:
                    _add_subjects(writer, split, np.stack(images), np.array(ages), length, rng)
        return writer.commit(
            name=f"facemed-utkface-seed{seed}", source=f"UTKFace folder {Path(folder).resolve()}",
            game="facemed", profile=None, sampling_freq=1, generator="facemed-utkface",
            generator_version=GENERATOR_VERSION, seed=seed,
            details={
                "images_found": len(found), "skipped_malformed_names": len(malformed),
                "skipped_unreadable": len(unreadable), "examples_malformed": malformed[:10],
                "examples_unreadable": unreadable[:10],
            },
        )


def _chunks(indices: np.ndarray, size: int) -> Iterator[np.ndarray]:
    for start in range(0, len(indices), size):
        yield indices[start:start + size]
