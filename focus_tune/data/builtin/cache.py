"""The built-in datasets: build one, cache it under a root per (scenario, profile, seed), and what
the report needs to know of a built-in scenario (its generator's version, FaceMed's age groups,
its true process)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...errors import DataError
from ..manifest import read_manifest
from .process import ScenarioProcess, registered
from .profiles import FACEMED, get_spec


def evaluation_groups(extras: dict, scenario: str | None) -> dict:
    """Groups of items whose coverage the report shows apart (name -> mask [N]), from a
    split's extras: FaceMed's age regimes of the chain where FaceMed's split has ages
    (`facemed.age_bands`), else none (a column named `age` in one's own data is metadata)."""
    if scenario == FACEMED and "age" in extras:
        from .facemed import age_bands

        return age_bands(extras["age"])
    return {}


def true_process(scenario: str | None) -> ScenarioProcess | None:
    """The true process of a built-in scenario (``process.ScenarioProcess``): what the report's
    oracle, image-Bayes and exact rows draw from; None for any other name (one's own data)."""
    from . import ale, facemed  # noqa: F401  (each registers its process as it is imported)

    return registered(scenario)


def generator_version(scenario: str) -> str:
    """Version of the generator that builds `scenario`'s default dataset."""
    if scenario == FACEMED:
        from .facemed import GENERATOR_VERSION
    else:
        from .ale import GENERATOR_VERSION
    return GENERATOR_VERSION


def build_dataset(scenario: str, profile: str, out_dir: str | os.PathLike, seed: int = 0) -> Path:
    """Build the default offline dataset of `scenario` at `profile` sizes into out_dir (the dataset folder).

    scenario: facemed | hero | seaquest | riverraid | bankheist | roadrunner;
    profile: smoke | quick | paper. The folder appears atomically when complete; an existing
    dataset there is replaced. Deterministic given seed.
    """
    spec = get_spec(scenario, profile)
    if scenario == FACEMED:
        from .facemed import build_facemed

        return build_facemed(spec, out_dir, seed)
    from .ale import build_atari

    return build_atari(spec, out_dir, seed)


def dataset_dir(root: str | os.PathLike, scenario: str, profile: str, seed: int = 0) -> Path:
    """Where `ensure_dataset` caches (scenario, profile, seed) under root."""
    get_spec(scenario, profile)
    return Path(root) / f"{scenario}-{profile}-seed{seed}"


def is_current(folder: str | os.PathLike, scenario: str, profile: str, seed: int = 0) -> bool:
    """Whether folder holds the dataset the current code and profile table would build."""
    try:
        manifest = read_manifest(folder)
    except DataError:
        return False
    spec = get_spec(scenario, profile)
    return (
        manifest.game == scenario
        and manifest.profile == profile
        and manifest.seed == seed
        and manifest.generator_version == generator_version(scenario)
        and manifest.splits == spec.split_sizes
        and tuple(manifest.image_shape) == spec.image_shape
        and manifest.length == spec.length
        and manifest.sampling_freq == spec.sampling_freq
    )


def ensure_dataset(scenario: str, profile: str, root: str | os.PathLike, seed: int = 0) -> Path:
    """The cached dataset folder of (scenario, profile, seed) under root, built first if missing.

    A cached folder built by another generator version or for other profile sizes is
    rebuilt. A file lock serialises builders, so concurrent processes build once and the
    others wait and reuse it; the lock holder also removes temporary folders left by a
    crashed build. Checksums are verified by `load_dataset`, not here.
    """
    from filelock import FileLock

    folder = dataset_dir(root, scenario, profile, seed)
    if is_current(folder, scenario, profile, seed):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder.parent / f".{folder.name}.lock")):
        if not is_current(folder, scenario, profile, seed):
            # Holding the lock, any temporary folder of this name is a crashed build's leftover.
            for leftover in folder.parent.glob(f".{folder.name}.tmp-*"):
                shutil.rmtree(leftover, ignore_errors=True)
            build_dataset(scenario, profile, folder, seed)
    return folder
