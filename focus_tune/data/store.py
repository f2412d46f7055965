"""The on-disk dataset format: one folder, three Parquet splits and a verified manifest.

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
`focus_tune.image_shape` holds [C, H, W]. The manifest records the SHA-256 of every split
file; `load_dataset` refuses a folder whose files, shapes or columns disagree with it,
naming the file.

`DatasetWriter` streams chunks into a hidden temporary folder next to the destination and
renames it into place only once everything, manifest last, is written and synced: a crash
mid-write leaves at most a `.NAME.tmp-*` folder, never one that looks complete.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import uuid
from dataclasses import MISSING, asdict, dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..durable import fsync_path, write_atomic
from ..errors import DataError
from ..quote import short
from .sequences import (CENSOR_INSTEAD, CONDITION_NOT_EVENT, ONLY_EVENT_ABSORBING, censored_items, observed_mask,
                        time_to_event)

SPLITS = ("train", "val", "test")
MANIFEST = "manifest.json"
FORMAT_VERSION = 2  # 2: time_to_event counted from 1 (1 counted the entries before the event)
REQUIRED_COLUMNS = ("image", "sequence", "time_to_event")
STANDARD_COLUMNS = (*REQUIRED_COLUMNS, "exact_marginals", "observed_length")  # every other column is an extra
IMAGE_SHAPE_KEY = "focus_tune.image_shape"  # Parquet schema metadata: [C, H, W] as JSON
MAX_MANIFEST_BYTES = 16 << 20  # an Atari-HEAD manifest lists its trials: kilobytes, not megabytes
SPLIT_FILES = tuple(f"{s}.parquet" for s in SPLITS)










@dataclass(frozen=True)
class Manifest:
    """What a dataset folder contains; written as manifest.json.

    `event_class` is the class whose first occurrence is the time to event (END for games,
    dead for FaceMed); `condition_class` is the first-entry class of the paper's conditional
    metrics (by default the most frequent first entry of the training split other than the
    event class). `files` maps each split file name to its SHA-256; `stats` holds per-split
    counts computed at write time; `details` holds what the generator or importer wants to
    record (player model constants, skipped-file counts, an import's provenance...).

    `game` names the built-in scenario a generator or importer made the data for (None for
    a user's own data, whose scenario is its `name`); `profile`, `sampling_freq`,
    `generator_version` and `seed` mean something only for generated data and default to
    null / 1 / "" / 0. `absorbing` lists the classes after which nothing changes (the
    sequence is padded with them): null or [event_class], the event being the only absorbing
    class a dataset may declare (ONLY_EVENT_ABSORBING says why; another is refused on load);
    `censored` says whether the splits hold an
    `observed_length` column (right-censored items).
    """

    name: str
    source: str
    class_names: list[str]
    length: int
    image_shape: tuple[int, int, int]
    splits: dict[str, int]
    generator: str
    event_class: int
    condition_class: int
    has_exact_marginals: bool
    files: dict[str, str]
    stats: dict[str, Any]
    game: str | None = None
    profile: str | None = None
    sampling_freq: int = 1
    generator_version: str = ""
    seed: int = 0
    absorbing: list[int] | None = None  # None: the event class alone
    censored: bool = False
    details: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    @property
    def scenario(self) -> str:
        """What a search calls this data: the built-in scenario (its `game`), or the dataset's name."""
        return self.game or self.name

    @property
    def absorbing_classes(self) -> list[int]:
        return [self.event_class] if self.absorbing is None else list(self.absorbing)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def __getitem__(self, key: str) -> Any:
        """Dict-style access (`manifest["length"]`), for code that treats it as a mapping."""
        if key == "num_classes" or key in self.__dataclass_fields__:
            return getattr(self, key)
        raise KeyError(key)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["image_shape"] = list(self.image_shape)
        out["num_classes"] = self.num_classes
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = MANIFEST) -> "Manifest":
        """Parse and validate a manifest dict; errors name `where`."""
        if not isinstance(raw, dict):
            raise DataError(f"{where}: expected a JSON object")
        if raw.get("format_version") != FORMAT_VERSION:
            raise DataError(
                f"{where}: format_version {raw.get('format_version')!r} is not {FORMAT_VERSION}; "
                "rebuild or re-import the dataset with this version of focus_tune"
            )
        names = set(cls.__dataclass_fields__)
        required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
        missing = sorted(n for n in required | {"format_version"} if n not in raw)
        if missing:
            raise DataError(f"{where}: missing field(s) {', '.join(missing)}")
        _check_field_types(raw, where)
        kwargs = {k: raw[k] for k in names if k in raw}
        kwargs["image_shape"] = tuple(raw["image_shape"])
        manifest = cls(**kwargs)
        _check_manifest(manifest, raw, where)
        return manifest


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_field_types(raw: dict[str, Any], where: str) -> None:
    """Each manifest field has the JSON type the code reads; one line naming the field if not."""
    def bad(name: str, expected: str) -> DataError:
        return DataError(f"{where}: field {name!r} must be {expected}, got {short(raw[name])}")

    for name in ("name", "source", "generator", "generator_version"):
        if name in raw and not isinstance(raw[name], str):
            raise bad(name, "a string")
    for name in ("game", "profile"):
        if raw.get(name) is not None and not isinstance(raw[name], str):
            raise bad(name, "a string or null")
    for name in ("length", "sampling_freq", "seed", "event_class", "condition_class"):
        if name in raw and not _is_int(raw[name]):
            raise bad(name, "an integer")
    if raw["length"] < 1 or raw.get("sampling_freq", 1) < 1:
        raise DataError(f"{where}: length and sampling_freq must be >= 1, got {short(raw['length'])} "
                        f"and {short(raw.get('sampling_freq'))}")
    for name in ("has_exact_marginals", "censored"):
        if name in raw and not isinstance(raw[name], bool):
            raise bad(name, "true or false")
    absorbing = raw.get("absorbing")
    if absorbing is not None and not (isinstance(absorbing, list) and absorbing and all(_is_int(v) for v in absorbing)):
        raise bad("absorbing", "null or a non-empty list of class ids")
    shape = raw["image_shape"]
    if not (isinstance(shape, list) and len(shape) == 3 and all(_is_int(v) and 1 <= v <= 65535 for v in shape)):
        raise bad("image_shape", "a list of 3 integers [C, H, W] in 1..65535")
    files = raw["files"]
    if not isinstance(files, dict) or not all(isinstance(v, str) and _SHA256.fullmatch(v) for v in files.values()):
        raise bad("files", "an object of file name -> SHA-256 (64 lowercase hex digits)")
    if not isinstance(raw["splits"], dict):
        raise bad("splits", "an object of split -> number of items")
    if "details" in raw and not isinstance(raw["details"], dict):
        raise bad("details", "an object")
    stats = raw["stats"]
    if not isinstance(stats, dict) or set(stats) != set(SPLITS):
        raise bad("stats", f"an object with one entry per split ({', '.join(SPLITS)})")
    for split, entry in stats.items():
        counts_ok = isinstance(entry, dict) and all(
            isinstance(entry.get(k), list) and all(_is_int(c) and c >= 0 for c in entry[k])
            for k in ("class_counts", "first_entry_counts"))
        mean = entry.get("mean_time_to_event") if isinstance(entry, dict) else None
        if not counts_ok or not isinstance(mean, (int, float)) or isinstance(mean, bool) or not math.isfinite(mean):
            raise DataError(f"{where}: stats.{split} must hold mean_time_to_event (a number), class_counts and "
                            f"first_entry_counts (lists of counts), got {short(entry)}")


def _check_manifest(m: Manifest, raw: dict[str, Any], where: str) -> None:
    problems = []
    if len(m.image_shape) != 3 or min(m.image_shape) < 1:
        problems.append(f"image_shape {list(m.image_shape)} is not a positive (C, H, W)")
    if (not isinstance(m.class_names, list) or not 1 <= len(m.class_names) <= 127
            or not all(isinstance(c, str) for c in m.class_names)):
        raise DataError(f"{where}: class_names must be a list of 1 to 127 strings")
    if "num_classes" in raw and raw["num_classes"] != m.num_classes:
        problems.append(f"num_classes {short(raw['num_classes'])} != len(class_names) {m.num_classes}")
    for name in ("event_class", "condition_class"):
        value = getattr(m, name)
        if not isinstance(value, int) or not 0 <= value < m.num_classes:
            problems.append(f"{name} {short(value)} is not a class id in [0, {m.num_classes})")
    if m.absorbing is not None and any(not 0 <= a < m.num_classes for a in m.absorbing):
        problems.append(f"absorbing {short(m.absorbing)} holds class ids outside [0, {m.num_classes})")
    elif m.absorbing is not None and 0 <= m.event_class < m.num_classes and set(m.absorbing) != {m.event_class}:
        others = [m.class_names[a] for a in sorted(set(m.absorbing)) if a != m.event_class]
        problems.append(f"absorbing {', '.join(others)}: only the event ({m.class_names[m.event_class]}) may be "
                        f"absorbing, because {ONLY_EVENT_ABSORBING}; re-import it with the event alone absorbing and "
                        f"{CENSOR_INSTEAD}")
    if m.condition_class == m.event_class and isinstance(m.event_class, int):
        problems.append(f"condition_class {m.condition_class} is the event class; {CONDITION_NOT_EVENT}")
    if not isinstance(m.splits, dict) or set(m.splits) != set(SPLITS) or any(not isinstance(n, int) or n < 1 for n in m.splits.values()):
        problems.append(f"splits {short(m.splits)} must give a positive size for each of {SPLITS}")
    if not isinstance(m.files, dict) or set(m.files) != {f"{s}.parquet" for s in SPLITS}:
        problems.append(f"files {short(sorted(m.files))} must list {', '.join(s + '.parquet' for s in SPLITS)}")
    for split, entry in m.stats.items():
        for key in ("class_counts", "first_entry_counts"):
            if len(entry[key]) != m.num_classes:
                problems.append(f"stats.{split}.{key} has {len(entry[key])} entries, not one per class "
                                f"({m.num_classes})")
    if problems:
        raise DataError(f"{where}: " + "; ".join(problems))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def split_schema(manifest: Manifest) -> dict[str, pa.DataType]:
    """The type each standard column must have in the files of this dataset."""
    c, h, w = manifest.image_shape
    types = {
        "image": pa.binary(c * h * w),
        "sequence": pa.list_(pa.int8(), manifest.length),
        "time_to_event": pa.int32(),
    }
    if manifest.has_exact_marginals:
        types["exact_marginals"] = pa.list_(pa.float32(), manifest.length * manifest.num_classes)
    if manifest.censored:
        types["observed_length"] = pa.int32()
    return types


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


def read_manifest(path: str | os.PathLike) -> Manifest:
    """Parse `path/manifest.json`; a missing or malformed manifest raises DataError."""
    file = Path(path) / MANIFEST
    if not file.is_file():
        raise DataError(
            f"{file}: not found; {Path(path)} is not a complete dataset folder "
            "(build one with `python -m focus_tune.data build`, or import your own data with "
            "`python -m focus_tune.data import-table` or `import-arrays`)"
        )
    try:
        if file.stat().st_size > MAX_MANIFEST_BYTES:
            raise DataError(f"{file}: {file.stat().st_size} bytes; a manifest is at most {MAX_MANIFEST_BYTES} bytes")
        raw = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        what = "nested too deeply" if isinstance(err, RecursionError) else short(str(err), 120)
        raise DataError(f"{file}: unreadable manifest ({what})") from err
    return Manifest.from_dict(raw, where=str(file))


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
            values = np.frombuffer(chunk.buffers()[1], np.uint8)[chunk.offset * width:(chunk.offset + len(chunk)) * width]
        elif pa.types.is_fixed_size_list(chunk.type):
            values = chunk.flatten().to_numpy(zero_copy_only=False)
        else:
            values = chunk.to_numpy(zero_copy_only=False)
        out[row:row + len(chunk)] = values.reshape(len(chunk), width)
        row += len(chunk)
    return out


class DatasetWriter:
    """Stream chunks of the three splits into a new dataset folder, atomically.

    Use as a context manager; call `add` for each chunk and `commit` once at the end. If the
    block raises, the temporary folder is removed and nothing appears at `out_dir`.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        *,
        class_names: list[str],
        length: int,
        image_shape: tuple[int, int, int],
        event_class: int,
        has_exact_marginals: bool,
        censored: bool = False,
    ):
        self.out_dir = Path(out_dir)
        if not 1 <= len(class_names) <= 127:
            raise ValueError(f"{len(class_names)} classes: the int8 sequence column holds 1 to 127")
        _check_replaceable(self.out_dir)
        self.class_names = list(class_names)
        self.length = length
        self.image_shape = tuple(image_shape)
        self.event_class = event_class
        self.has_exact_marginals = has_exact_marginals
        self.censored = censored  # the splits carry observed_length (right-censored items)
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self.tmp_dir = self.out_dir.parent / f".{self.out_dir.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.tmp_dir.mkdir()
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._counts = {s: 0 for s in SPLITS}
        self._class_counts = {s: np.zeros(len(class_names), np.int64) for s in SPLITS}
        self._first_counts = {s: np.zeros(len(class_names), np.int64) for s in SPLITS}
        self._tte_sums = {s: 0 for s in SPLITS}
        self._censored_items = {s: 0 for s in SPLITS}
        self._unobserved_entries = {s: 0 for s in SPLITS}

    def __enter__(self) -> "DatasetWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()

    def add(
        self,
        split: str,
        images: np.ndarray,
        sequences: np.ndarray,
        exact_marginals: np.ndarray | None = None,
        extras: dict[str, np.ndarray] | None = None,
        observed_length: np.ndarray | None = None,
    ) -> None:
        """Append one chunk to `split`.

        images uint8 [n, C, H, W]; sequences int [n, L]; exact_marginals [n, L, c] (required
        exactly when the dataset has them); extras: 1-D numeric arrays [n], the same names
        in every chunk; observed_length int [n] in 1..L (required exactly when the dataset
        is ``censored``). time_to_event is derived from the sequences (and observed lengths)
        here, so it is always consistent with them.
        """
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
        n, k = len(sequences), len(self.class_names)
        images = np.ascontiguousarray(images, dtype=np.uint8)
        sequences = np.asarray(sequences)
        if images.shape != (n, *self.image_shape):
            raise ValueError(f"images have shape {images.shape}, expected {(n, *self.image_shape)}")
        if sequences.shape != (n, self.length) or (n and (sequences.min() < 0 or sequences.max() >= k)):
            raise ValueError(f"sequences must be [{n}, {self.length}] class ids in [0, {k})")
        if (exact_marginals is not None) != self.has_exact_marginals:
            raise ValueError("exact_marginals must be given exactly when the dataset has them")
        if (observed_length is not None) != self.censored:
            raise ValueError("observed_length must be given exactly when the dataset is censored")
        if observed_length is not None:
            observed_length = np.asarray(observed_length, dtype=np.int64)
            if observed_length.shape != (n,) or (n and (observed_length.min() < 1 or observed_length.max() > self.length)):
                raise ValueError(f"observed_length must be [{n}] integers in [1, {self.length}]")
        if n == 0:
            return
        tte = time_to_event(sequences, self.event_class, observed_length)
        width = int(np.prod(self.image_shape))
        columns = {
            "image": pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(width), n, [None, pa.py_buffer(images.tobytes())]
            ),
            "sequence": pa.FixedSizeListArray.from_arrays(
                pa.array(sequences.astype(np.int8).ravel()), self.length
            ),
            "time_to_event": pa.array(tte.astype(np.int32)),
        }
        if exact_marginals is not None:
            marginals = np.asarray(exact_marginals, dtype=np.float32)
            if marginals.shape != (n, self.length, k):
                raise ValueError(f"exact_marginals have shape {marginals.shape}, expected {(n, self.length, k)}")
            columns["exact_marginals"] = pa.FixedSizeListArray.from_arrays(
                pa.array(marginals.ravel()), self.length * k
            )
        if observed_length is not None:
            columns["observed_length"] = pa.array(observed_length.astype(np.int32))
        for name, values in (extras or {}).items():
            values = np.asarray(values)
            if values.shape != (n,):
                raise ValueError(f"extra column {name!r} has shape {values.shape}, expected ({n},)")
            columns[name] = pa.array(values)
        # The pixel count alone cannot tell [3, 4, 5] from [3, 5, 4]: record the shape too.
        table = pa.table(columns).replace_schema_metadata({IMAGE_SHAPE_KEY: json.dumps(list(self.image_shape))})
        if split not in self._writers:
            self._writers[split] = pq.ParquetWriter(
                self.tmp_dir / f"{split}.parquet", table.schema, compression="zstd"
            )
        elif table.schema != self._writers[split].schema:
            raise ValueError(f"chunk columns {table.schema.names} differ from the first chunk of {split!r}")
        self._writers[split].write_table(table)
        self._counts[split] += n
        seen = sequences if observed_length is None else sequences[observed_mask(observed_length, self.length)]
        self._class_counts[split] += np.bincount(seen.ravel(), minlength=k)
        self._first_counts[split] += np.bincount(sequences[:, 0], minlength=k)
        self._tte_sums[split] += int(tte.sum())
        if observed_length is not None:
            self._censored_items[split] += int(censored_items(sequences, self.event_class, observed_length).sum())
            self._unobserved_entries[split] += int((self.length - observed_length).sum())

    def commit(
        self,
        *,
        name: str,
        source: str,
        generator: str,
        game: str | None = None,
        profile: str | None = None,
        sampling_freq: int = 1,
        generator_version: str = "",
        seed: int = 0,
        details: dict[str, Any] | None = None,
        condition_class: int | None = None,
        absorbing: list[int] | None = None,
    ) -> Path:
        """Close the files, write the manifest and move the folder to `out_dir`.

        ``condition_class``: the conditional metrics' first-entry class (default: the most
        frequent first entry of train other than the event); ``absorbing``: the classes
        after which nothing changes (default: the event class alone)."""
        empty = [s for s in SPLITS if self._counts[s] == 0]
        if empty:
            raise DataError(f"{self.out_dir}: split(s) {', '.join(empty)} received no rows")
        condition = self._condition_class() if condition_class is None else int(condition_class)
        if condition == self.event_class:
            what = "the condition class" if condition_class is not None else \
                "every item starts with the event, so the condition class (the most frequent first entry)"
            raise DataError(f"{self.out_dir}: {what} is the event {self.class_names[condition]}; {CONDITION_NOT_EVENT}")
        if absorbing is not None and set(absorbing) != {self.event_class}:
            others = [self.class_names[a] for a in sorted(set(absorbing)) if a != self.event_class]
            raise DataError(f"{self.out_dir}: absorbing {', '.join(others)}: only the event "
                            f"({self.class_names[self.event_class]}) may be absorbing, because {ONLY_EVENT_ABSORBING}; "
                            f"{CENSOR_INSTEAD}")
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        files = {}
        for split in SPLITS:
            file = self.tmp_dir / f"{split}.parquet"
            _fsync(file)
            files[file.name] = sha256_file(file)
        stats = {
            split: {
                "mean_time_to_event": self._tte_sums[split] / self._counts[split],
                "class_counts": self._class_counts[split].tolist(),
                "first_entry_counts": self._first_counts[split].tolist(),
                **({"censored_items": self._censored_items[split],
                    "unobserved_entries": self._unobserved_entries[split]} if self.censored else {}),
            }
            for split in SPLITS
        }
        manifest = Manifest(
            name=name,
            source=source,
            game=game,
            profile=profile,
            class_names=self.class_names,
            length=self.length,
            sampling_freq=sampling_freq,
            image_shape=self.image_shape,
            splits=dict(self._counts),
            generator=generator,
            generator_version=generator_version,
            seed=seed,
            event_class=self.event_class,
            condition_class=condition,
            has_exact_marginals=self.has_exact_marginals,
            files=files,
            stats=stats,
            absorbing=None if absorbing is None else [int(a) for a in absorbing],
            censored=self.censored,
            details=details or {},
        )
        write_atomic(self.tmp_dir / MANIFEST, json.dumps(manifest.to_dict(), indent=2) + "\n")
        self._move_into_place()
        return self.out_dir

    def _condition_class(self) -> int:
        """Most frequent first entry in train (in every split, when each of train's starts with
        the event), the event class excluded: conditioning on an already absorbed first entry
        would make every later entry certain."""
        for counts in (self._first_counts["train"], sum(self._first_counts.values())):
            if counts.sum() > counts[self.event_class]:
                counts = counts.copy()
                counts[self.event_class] = -1
                return int(np.argmax(counts))
        return self.event_class  # every item starts with the event: refused by commit

    def abort(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        shutil.rmtree(self.tmp_dir, ignore_errors=True)

    def _move_into_place(self) -> None:
        old = None
        if os.path.lexists(self.out_dir):
            try:
                _check_replaceable(self.out_dir)
            except DataError:
                self.abort()
                raise
            # Moved aside, not deleted, until the new folder is in place; then only the files
            # of our own format are removed (the check above found no other), so a file that
            # appears in it meanwhile survives in the .old- folder.
            old = self.out_dir.parent / f".{self.out_dir.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(self.out_dir, old)
        os.replace(self.tmp_dir, self.out_dir)
        fsync_path(self.out_dir.parent)
        if old is not None:
            for name in (*SPLIT_FILES, MANIFEST):
                (old / name).unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # something was added meanwhile: leave it, it is not ours
                old.rmdir()


def _check_replaceable(folder: Path) -> None:
    """Raise DataError unless ``folder`` is absent, empty, or a dataset folder of ours.

    Ours means: a real folder (not a symlink) holding nothing but the three split files and a
    manifest.json that parses as a focus_tune manifest (a JSON object with its generator and
    the SHA-256 of exactly those three files). Anything else is someone's data and is never
    replaced.
    """
    if not os.path.lexists(folder):
        return
    if folder.is_symlink() or not folder.is_dir():
        kind = "a symbolic link" if folder.is_symlink() else "a file"
        raise DataError(f"{folder}: exists and is {kind}; choose a new or empty folder for the dataset")
    names = sorted(p.name for p in folder.iterdir())
    if not names:
        return
    foreign = [n for n in names if n not in (*SPLIT_FILES, MANIFEST)]
    if not foreign and _is_our_manifest(folder / MANIFEST):
        return
    listed = ", ".join(short(n, 40) for n in (foreign or names)[:3]) + (", ..." if len(foreign or names) > 3 else "")
    raise DataError(f"{folder}: exists and holds files that are not a focus_tune dataset ({listed}); "
                    "nothing was changed: choose a new or empty folder, or move those files away first")


def _is_our_manifest(file: Path) -> bool:
    try:
        if file.is_symlink() or not file.is_file() or file.stat().st_size > MAX_MANIFEST_BYTES:
            return False
        raw = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return (isinstance(raw, dict) and isinstance(raw.get("generator"), str) and "format_version" in raw
            and isinstance(raw.get("files"), dict) and set(raw["files"]) == set(SPLIT_FILES))


def _fsync(path: Path) -> None:
    fsync_path(path)
