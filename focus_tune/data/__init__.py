"""Datasets: build the default offline datasets, import real data or your own, load verified splits.

    ds = load_dataset(ensure_dataset("hero", "quick", root="data"))
    ds.manifest.length, ds.train.images, ds.train.sequences, ds.test.exact_marginals
    write_dataset("data/mine", images=images, sequences=sequences, classes=names, event="END")

See docs/DATA.md for the generators, the store format and the profile sizes.
"""

from importlib import import_module

# Each public name -> the module of this package that defines it, imported on first use
# (PEP 562), so that importing the package imports none of them.
_HOME = {
    "build_dataset": "cache", "dataset_dir": "cache", "ensure_dataset": "cache",
    "evaluation_groups": "cache", "generator_version": "cache", "is_current": "cache",
    "write_dataset": "importing",
    "ATARI_GAMES": "profiles", "DatasetSpec": "profiles", "FACEMED": "profiles", "GAMES": "profiles",
    "PROFILES": "profiles", "SPECS": "profiles", "get_spec": "profiles",
    "describe_dataset": "summary",
    "DataError": "store", "Dataset": "store", "DatasetWriter": "store", "Manifest": "store", "Split": "store",
    "load_dataset": "store", "read_manifest": "store", "time_to_event": "store",
}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value  # later lookups are plain attributes
    return value


def __dir__():
    return sorted([*globals(), *_HOME])
