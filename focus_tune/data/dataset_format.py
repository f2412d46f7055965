"""The on-disk dataset format: what a dataset folder holds, by name.

A dataset folder holds `train.parquet`, `val.parquet`, `test.parquet` and `manifest.json`.
Every split has the columns

    image            fixed_size_binary(C*H*W)   uint8 pixels, C-major ([C, H, W] row-major)
    sequence         fixed_size_list<int8>[L]   class ids, padded with the event class
    time_to_event    int32                      T = min{i : Y_i = event}, 1-based (L if none);
                                                on a censored item, its last observed entry
    exact_marginals  fixed_size_list<float32>[L*c]  P(Y_i = a | x), row-major [L, c]; only
                                                when the generator knows the truth
    observed_length  int32                      entries observed, 1..L (right-censored data
                                                only: entries after it are unknown)
and optional 1-D numeric extra columns (e.g. `age`, `episode`); the schema metadata key
`focus_tune.image_shape` holds [C, H, W]. The manifest (`manifest.Manifest`) records the
SHA-256 of every split file (`sha256_file`).

Who does what with it: `manifest` (the manifest and each dataset's column types),
`manifest_checks` (what a manifest.json must hold), `dataset_reader` (`load_dataset`: verify
and decode), `dataset_writer` (`DatasetWriter`: write atomically, count the statistics),
`folder_guard` (never replace a folder that is not a dataset of ours).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

SPLITS = ("train", "val", "test")
MANIFEST = "manifest.json"
FORMAT_VERSION = 2  # 2: time_to_event counted from 1 (1 counted the entries before the event)
REQUIRED_COLUMNS = ("image", "sequence", "time_to_event")
STANDARD_COLUMNS = (*REQUIRED_COLUMNS, "exact_marginals", "observed_length")  # every other column is an extra
IMAGE_SHAPE_KEY = "focus_tune.image_shape"  # Parquet schema metadata: [C, H, W] as JSON
MAX_MANIFEST_BYTES = 16 << 20  # an Atari-HEAD manifest lists its trials: kilobytes, not megabytes
SPLIT_FILES = tuple(f"{s}.parquet" for s in SPLITS)


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file, as 64 lowercase hex digits (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
