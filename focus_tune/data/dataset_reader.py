"""Read a dataset folder: verify it against its manifest (``load_dataset``), then decode each
split on first access into numpy (``Dataset``, ``Split``).

``load_dataset`` refuses a folder whose files, shapes or columns disagree with its manifest,
naming the file: a missing or altered split file (SHA-256), a missing column or one of another
type, an image shape or a row count other than the manifest's. Decoding a split checks what
the checksum cannot: class ids in range, T as the sequences give it, exact marginals that are
probabilities.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DataError
from .dataset_format import IMAGE_SHAPE_KEY, SPLITS, STANDARD_COLUMNS, sha256_file
from .manifest import Manifest, read_manifest, split_schema
from .sequences import censored_items, observed_mask, time_to_event


@dataclass
class Split:
    """One split held in memory.

    images uint8 [N, C, H, W]; sequences int64 [N, L]; time_to_event int64 [N];
    exact_marginals float32 [N, L, c] or None; extras: per-item columns, each [N];
    observed_length int64 [N] (entries 1..n of item n observed) or None when every entry
    of every item is observed. On a censored item, ``time_to_event`` is its last observed
    entry (T exceeds it: ``censored``); the sequence beyond ``observed_length`` is filler.
    """

    name: str
    images: np.ndarray
    sequences: np.ndarray
    time_to_event: np.ndarray
    exact_marginals: np.ndarray | None
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    observed_length: np.ndarray | None = None
    event_class: int | None = None  # the manifest's, for `censored`

    def __len__(self) -> int:
        return len(self.sequences)

    @property
    def observed(self) -> np.ndarray | None:
        """bool [N, L]: which entries are observed; None when all are."""
        if self.observed_length is None:
            return None
        return observed_mask(self.observed_length, self.sequences.shape[1])

    @property
    def censored(self) -> np.ndarray:
        """bool [N]: items whose time to event is right-censored at ``time_to_event``."""
        if self.observed_length is None:
            return np.zeros(len(self), bool)
        return censored_items(self.sequences, self.event_class, self.observed_length)


class Dataset:
    """A verified dataset folder. Splits are decoded from Parquet on first access."""

    def __init__(self, path: Path, manifest: Manifest):
        self.path = path
        self.manifest = manifest

    def __repr__(self) -> str:
        return f"Dataset({str(self.path)!r}, splits={self.manifest.splits})"

    def split(self, name: str) -> Split:
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; choose one of {', '.join(SPLITS)}")
        return getattr(self, name)

    @cached_property
    def train(self) -> Split:
        return _read_split(self.path, "train", self.manifest)

    @cached_property
    def val(self) -> Split:
        return _read_split(self.path, "val", self.manifest)

    @cached_property
    def test(self) -> Split:
        return _read_split(self.path, "test", self.manifest)


def load_dataset(path: str | os.PathLike) -> Dataset:
    """Open a dataset folder after verifying checksums, column types and row counts.

    Raises DataError naming the offending file when the manifest is missing or malformed,
    a split file is missing, truncated or altered (SHA-256 mismatch), a column is missing,
    or a shape or row count differs from the manifest.
    """
    path = Path(path)
    manifest = read_manifest(path)
    expected = split_schema(manifest)
    for split in SPLITS:
        file = path / f"{split}.parquet"
        if not file.is_file():
            raise DataError(f"{file}: missing split file")
        digest = sha256_file(file)
        if digest != manifest.files[file.name]:
            raise DataError(
                f"{file}: SHA-256 {digest[:12]}... does not match the manifest's "
                f"{manifest.files[file.name][:12]}...; the file is truncated or altered, rebuild the dataset"
            )
        try:
            meta = pq.read_metadata(file)
            schema = meta.schema.to_arrow_schema()
        except (pa.ArrowException, OSError) as err:
            raise DataError(f"{file}: not a readable Parquet file ({err})") from err
        for column, dtype in expected.items():
            if column not in schema.names:
                raise DataError(f"{file}: missing column {column!r}")
            if schema.field(column).type != dtype:
                raise DataError(
                    f"{file}: column {column!r} has type {schema.field(column).type}, expected {dtype} "
                    f"(image shape {list(manifest.image_shape)}, L = {manifest.length}, c = {manifest.num_classes})"
                )
        stored_shape = (schema.metadata or {}).get(IMAGE_SHAPE_KEY.encode())
        if stored_shape is None or json.loads(stored_shape) != list(manifest.image_shape):
            raise DataError(
                f"{file}: images have shape {stored_shape.decode() if stored_shape else 'unknown'}, "
                f"the manifest says {list(manifest.image_shape)}"
            )
        if meta.num_rows != manifest.splits[split]:
            raise DataError(f"{file}: {meta.num_rows} rows, the manifest says {manifest.splits[split]}")
    return Dataset(path, manifest)


def _read_split(path: Path, split: str, manifest: Manifest) -> Split:
    file = path / f"{split}.parquet"
    n, (c, h, w), length, k = manifest.splits[split], manifest.image_shape, manifest.length, manifest.num_classes
    try:
        parquet = pq.ParquetFile(file)
        images = _read_column(parquet, file, "image", c * h * w, np.uint8).reshape(n, c, h, w)
        sequences = _read_column(parquet, file, "sequence", length, np.int64)
        tte = _read_column(parquet, file, "time_to_event", 1, np.int64)[:, 0]
        marginals = None
        if manifest.has_exact_marginals:
            marginals = _read_column(parquet, file, "exact_marginals", length * k, np.float32).reshape(n, length, k)
        observed = _read_column(parquet, file, "observed_length", 1, np.int64)[:, 0] if manifest.censored else None
        extras = {name: parquet.read(columns=[name]).column(0).to_numpy()
                  for name in parquet.schema_arrow.names if name not in STANDARD_COLUMNS}
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"{file}: not a readable Parquet file ({err})") from err
    if sequences.size and (sequences.min() < 0 or sequences.max() >= k):
        raise DataError(f"{file}: sequence holds class ids outside [0, {k})")
    if observed is not None and observed.size and (observed.min() < 1 or observed.max() > length):
        raise DataError(f"{file}: observed_length holds values outside [1, {length}]")
    if not np.array_equal(tte, time_to_event(sequences, manifest.event_class, observed)):
        raise DataError(f"{file}: time_to_event disagrees with the sequences (event class {manifest.event_class})")
    if marginals is not None:
        _check_marginals(file, marginals)
    return Split(split, images, sequences, tte, marginals, extras, observed, manifest.event_class)


def _check_marginals(file: Path, marginals: np.ndarray) -> None:
    """Exact marginals are probabilities: finite, in [0, 1], summing to 1 over the classes."""
    finite = np.isfinite(marginals)
    if not finite.all():
        item, entry, _ = np.argwhere(~finite)[0]
        raise DataError(f"{file}: exact_marginals hold {int((~finite).sum())} NaN or infinite value(s) "
                        f"(first at item {item}, entry {entry + 1}); expected probabilities")
    if marginals.min() < 0 or marginals.max() > 1 + 1e-3:
        raise DataError(f"{file}: exact_marginals hold values outside [0, 1] (min {marginals.min():.4g}, "
                        f"max {marginals.max():.4g}); expected probabilities")
    sums = marginals.sum(axis=2)
    off = np.abs(sums - 1.0) > 1e-3
    if off.any():
        item, entry = np.argwhere(off)[0]
        raise DataError(f"{file}: exact_marginals do not sum to 1 over the classes ({int(off.sum())} entries; "
                        f"item {item}, entry {entry + 1} sums to {sums[item, entry]:.4g})")


def _read_column(parquet: pq.ParquetFile, file: Path, name: str, width: int, dtype) -> np.ndarray:
    """A fixed-width column as a numpy array [rows, width], decoded one row group at a time
    so that peak memory stays near the size of the result."""
    out = np.empty((parquet.metadata.num_rows, width), dtype)
    row = 0
    for group in range(parquet.num_row_groups):
        chunk = parquet.read_row_group(group, columns=[name]).column(0).combine_chunks()
        if chunk.null_count:
            raise DataError(f"{file}: column {name!r} has null values")
        if pa.types.is_fixed_size_binary(chunk.type):
            start, stop = chunk.offset * width, (chunk.offset + len(chunk)) * width
            values = np.frombuffer(chunk.buffers()[1], np.uint8)[start:stop]
        elif pa.types.is_fixed_size_list(chunk.type):
            values = chunk.flatten().to_numpy(zero_copy_only=False)
        else:
            values = chunk.to_numpy(zero_copy_only=False)
        out[row:row + len(chunk)] = values.reshape(len(chunk), width)
        row += len(chunk)
    return out
