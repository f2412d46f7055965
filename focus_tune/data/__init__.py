"""Datasets: build the built-in ones, import real data or your own, load verified splits.

    ds = load_dataset(ensure_dataset("hero", "quick", root="data"))
    ds.manifest.length, ds.train.images, ds.train.sequences, ds.test.exact_marginals
    write_dataset("data/mine", images=images, sequences=sequences, classes=names, event="END")

``dataset_format`` (what a dataset folder holds: file and column names, the format version),
``manifest`` (``Manifest``, ``read_manifest``) and ``manifest_checks`` (what a manifest must hold),
``dataset_reader`` (``load_dataset``: verify a folder, decode its splits), ``dataset_writer``
(``DatasetWriter``: write one atomically, with its statistics), ``folder_guard`` (never replace
a folder that is not a dataset of ours),
``sequences`` (the rules of a sequence: the time to the event T, the observed entries),
``splits`` (the seeded 70/20/10 split, of items or of groups), ``images`` (the one image
decoder), ``describe`` (``python -m focus_tune.data info``),
``builtin/`` (the built-in scenarios' generators, sizes, cache and true processes), ``own/`` (one's own data:
``write_dataset`` and the importers), ``__main__`` (``python -m focus_tune.data``).
See docs/DATA.md for the generators, the store format and the profile sizes.

Imports: the top-level base modules (names, quote, durable, arguments) only: the data is
the bottom layer, and the only package that knows file formats.
"""

from ..lazy import exports

# Each public name -> the module of this package that defines it (``..errors``: the project's
# errors, focus_tune.errors), imported on first use (PEP 562), so that importing the package
# imports none of them.
_HOME = {
    "build_dataset": "builtin.cache", "dataset_dir": "builtin.cache", "ensure_dataset": "builtin.cache",
    "evaluation_groups": "builtin.cache", "generator_version": "builtin.cache", "is_current": "builtin.cache",
    "true_process": "builtin.cache", "ScenarioProcess": "builtin.process",
    "ATARI_GAMES": "builtin.profiles", "DatasetSpec": "builtin.profiles", "FACEMED": "builtin.profiles",
    "BUILTIN_SCENARIOS": "builtin.profiles", "PROFILES": "builtin.profiles", "SPECS": "builtin.profiles",
    "get_spec": "builtin.profiles",
    "describe_dataset": "describe",
    "write_dataset": "own.write",
    "DataError": "..errors",
    "Dataset": "dataset_reader", "Split": "dataset_reader", "load_dataset": "dataset_reader",
    "DatasetWriter": "dataset_writer", "Manifest": "manifest", "read_manifest": "manifest",
    "time_to_event": "sequences",
}
__all__ = sorted(_HOME)

__getattr__, __dir__ = exports(__name__, _HOME, globals())
