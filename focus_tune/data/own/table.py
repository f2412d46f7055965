"""A table of one's own into the store format: ``python -m focus_tune.data import-table``.

One row per item (CSV, Parquet or JSON Lines): a column of image paths and one of each
item's sequence of class names; ``import_rows`` is also the imagefolder importer's
(``folder``): the tokens, the classes, the images read and checked, then ``write_core``.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import DataError
from ...quote import short
from ..dataset_format import STANDARD_COLUMNS
from ..sequences import CONDITION_NOT_EVENT, UNOBSERVED
from ..splits import assign_splits
from .write import (
    check_absorbing,
    check_classes,
    check_length,
    check_out,
    complete_sequences,
    default_name,
    file_info,
    write_core,
)

JSONL_SUFFIXES = (".jsonl", ".ndjson")

def read_table(path: Path, text_columns: Sequence[str]):
    """A CSV, Parquet or JSON Lines file as (pyarrow Table, format, line numbers): Parquet by
    suffix or magic bytes, JSON Lines by suffix (.jsonl, .ndjson; its rows' line numbers, for
    messages; else None), else CSV; in a CSV the ``text_columns`` stay strings."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if not path.is_file():
        raise DataError(f"{path}: no such table file")
    if path.suffix.lower() in JSONL_SUFFIXES:
        return read_jsonl(path)
    try:
        with open(path, "rb") as handle:
            parquet = handle.read(4) == b"PAR1" or path.suffix.lower() in (".parquet", ".pq")
        if parquet:
            return pq.read_table(path), "parquet", None
        types = {c: pa.string() for c in text_columns if c}
        return pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types=types)), "csv", None
    except (pa.ArrowException, OSError, ValueError) as err:
        raise DataError(f"{path}: unreadable table ({short(' '.join(str(err).split()), 160)})") from err

def read_jsonl(path: Path):
    """A JSON Lines file, one object per line (blank lines skipped), as (pyarrow Table, "jsonl",
    the rows' line numbers); a key missing from a row is null there. DataError naming the line
    of a malformed one, or the key whose values mix types."""
    import pyarrow as pa

    rows, lines, keys = [], [], {}
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise DataError(f"{path}: line {number}: not JSON ({err.msg} at column {err.colno})") from None
                if not isinstance(row, dict):
                    raise DataError(f"{path}: line {number}: a JSON {type(row).__name__}, expected an object "
                                    '({"file_name": ..., "sequence": ...})')
                rows.append(row)
                lines.append(number)
                keys.update(dict.fromkeys(row))
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text ({short(str(err), 100)})") from None
    except OSError as err:
        raise DataError(f"{path}: unreadable ({short(str(err), 100)})") from None
    columns = {}
    for key in keys:
        try:
            columns[key] = pa.array([row.get(key) for row in rows])
        except (pa.ArrowException, ValueError, TypeError, OverflowError) as err:
            raise DataError(f"{path}: key {short(key, 40)} holds values of different types "
                            f"({short(' '.join(str(err).split()), 100)})") from None
    return pa.table(columns) if columns else pa.table({}), "jsonl", lines

class Rows:
    """Where row r of the rows imported comes from, for messages: a table's row (counted from
    1, a CSV header not counted) or a JSON Lines file's line; the split folders' metadata files
    read as one table. ``str()`` names the source as a whole (the file, or the folder)."""

    def __init__(self, name: str | os.PathLike):
        self.name = str(name)
        self.parts: list[tuple[str, int, list[int] | None]] = []  # (file, its first row, its line numbers)
        self.n = 0

    def add(self, file: str | os.PathLike, count: int, lines: list[int] | None = None) -> None:
        self.parts.append((str(file), self.n, lines))
        self.n += count

    def __str__(self) -> str:
        return self.name

    def _locate(self, r: int) -> tuple[str, str]:
        for file, start, lines in reversed(self.parts):
            if r >= start:
                k = r - start
                return file, (f"line {lines[k]}" if lines is not None else f"row {k + 1}")
        return self.name, f"row {r + 1}"

    def at(self, r: int) -> str:
        """'FILE: row k' (or 'FILE: line k')."""
        file, where = self._locate(r)
        return f"{file}: {where}"

    def rel(self, r: int) -> str:
        """'row k' within the one file, else 'FILE row k'."""
        file, where = self._locate(r)
        return where if len(self.parts) <= 1 else f"{file} {where}"

    def files(self) -> tuple[str, ...]:
        return (self.name, *(file for file, _, _ in self.parts))

def _at(source, r: int) -> str:
    return source.at(r) if isinstance(source, Rows) else f"{source}: row {r + 1}"

def _rel(source, r: int) -> str:
    return source.rel(r) if isinstance(source, Rows) else f"row {r + 1}"

def _column(table, path: Path, column: str, flag: str):
    if column not in table.column_names:
        listed = ", ".join(table.column_names[:12]) + (", ..." if len(table.column_names) > 12 else "")
        raise DataError(f"{path}: no column {column!r} ({flag}; the table has: {listed})")
    return table.column(column)

def sequence_tokens(table, path: Path, column: str) -> list[list[str]]:
    import pyarrow as pa

    col = _column(table, path, column, "--sequence-column")
    typ = col.type
    rows = col.to_pylist()
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return [[] if v is None else v.split() for v in rows]
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        value = typ.value_type
        if not (pa.types.is_string(value) or pa.types.is_large_string(value) or pa.types.is_integer(value)):
            raise DataError(f"{path}: column {column!r} is a list of {value}; expected class names (strings)")
        out = []
        for r, v in enumerate(rows):
            if v is not None and any(t is None for t in v):
                raise DataError(f"{_at(path, r)}: column {column!r} holds a null entry")
            out.append([] if v is None else [str(t) for t in v])
        return out
    raise DataError(f"{path}: column {column!r} has type {typ}; expected class names separated by spaces "
                    "(CSV) or a list of class names (Parquet)")

def check_tokens(tokens: list[list[str]], path: Path, column: str) -> None:
    """A table's sequence lists the observed class names: an empty name, or -1 (the arrays'
    'unobserved'), is refused, naming the row and entry."""
    for r, row in enumerate(tokens):
        for i, t in enumerate(row):
            if not t.strip():
                raise DataError(f"{_at(path, r)}: entry {i + 1} of column {column!r} is an empty class name")
            if t.strip() == str(UNOBSERVED):
                raise DataError(f"{_at(path, r)}: entry {i + 1} of column {column!r} is -1; a table's "
                                "sequence lists the observed classes by name: end it early to leave the rest "
                                "unobserved (-1 means unobserved only in import-arrays)")

def sorted_names(names: set[str]) -> list[str]:
    if all(re.fullmatch(r"-?\d+", n) for n in names):
        return sorted(names, key=int)
    return sorted(names)

def import_table(
    table: str | os.PathLike,
    out: str | os.PathLike,
    *,
    event: str,
    absorbing: Sequence[str] | None = None,
    length: int | None = None,
    name: str | None = None,
    classes: Sequence[str] | None = None,
    condition: str | None = None,
    image_size: tuple[int, int] | None = None,
    channels: int | None = None,
    images_root: str | os.PathLike | None = None,
    image_column: str = "image",
    sequence_column: str = "sequence",
    split_column: str | None = None,
    group_column: str | None = None,
    seed: int = 0,
    truncate: bool = False,
    command: str | None = None,
) -> Path:
    """Import a CSV, Parquet or JSON Lines table, one row per item (the `import-table` command;
    docs/DATA.md).

    The image column holds a PNG or JPEG path (relative to the table's folder or to
    ``images_root``, or absolute), the sequence column class names (separated by spaces in
    a CSV, a list in Parquet; either in JSON Lines); other numeric columns become per-item
    extras. Rows in error messages count from 1, the CSV header not counted; a JSON Lines
    file's are named by their line.
    """
    path = Path(table)
    out = check_out(out)
    name = default_name(out, name, "--name")
    if split_column and group_column:
        raise DataError("give --split-column or --group-column, not both")
    check_table_flags(channels, truncate, length)
    data, kind, lines = read_table(path, (image_column, sequence_column, split_column, group_column))
    if data.num_rows == 0:
        raise DataError(f"{path}: the table has no rows")
    rows = Rows(path)
    rows.add(path, data.num_rows, lines)
    root = Path(images_root) if images_root else path.parent
    paths = image_paths(data, rows, image_column, root)
    details = {
        "command": command,
        "table": {**file_info(path, kind), "rows": data.num_rows},
        "images_root": str(root.resolve()),
    }
    return import_rows(data, rows, paths, out, event=event, absorbing=absorbing, length=length, name=name,
                        classes=classes, condition=condition, image_size=image_size, channels=channels,
                        image_column=image_column, sequence_column=sequence_column, split_column=split_column,
                        group_column=group_column, seed=seed, truncate=truncate, details=details,
                        source=f"table {path.resolve()}", generator="import-table")

def check_table_flags(channels: int | None, truncate: bool, length: int | None) -> None:
    if channels not in (None, 1, 3):
        raise DataError(f"--channels {channels}: expected 1 or 3")
    if truncate and length is None:
        raise DataError("--truncate cuts sequences at --length: give --length L with it")
    if length is not None:
        check_length(length, f"--length {length}")

def import_rows(data, rows: Rows, paths: list[Path], out: Path, *, event: str, absorbing: Sequence[str] | None,
                 length: int | None, name: str, classes: Sequence[str] | None, condition: str | None,
                 image_size: tuple[int, int] | None, channels: int | None, image_column: str,
                 sequence_column: str, split_column: str | None, group_column: str | None, seed: int,
                 truncate: bool, details: dict[str, Any], source: str, generator: str,
                 splits: np.ndarray | None = None, split_rule: str | None = None) -> Path:
    """The rows of a table (or of the split folders' tables read as one; ``splits`` then gives
    each row's split) into a dataset at ``out``: the sequences' classes, the splits and the
    extras checked before any image is decoded; DataError naming ``rows``' file and row."""
    path = rows
    n = data.num_rows
    tokens = sequence_tokens(data, path, sequence_column)
    check_tokens(tokens, path, sequence_column)

    if classes is None:
        seen = {t for row in tokens for t in row}
        if not seen:
            raise DataError(f"{_at(path, 0)}: empty sequence (no entry in column {sequence_column!r})")
        names = sorted_names(seen)
        for flag, refs in (("--event", [event]), ("--absorbing", absorbing or []), ("--condition", [condition])):
            for ref in refs:
                if ref is not None and ref not in seen:
                    raise DataError(f"{flag} {ref}: no sequence of {path} holds it (classes seen: "
                                    f"{', '.join(names[:20])}); name classes that never occur with --classes")
    else:
        names = check_classes(classes, "--classes")
    index = {c: i for i, c in enumerate(names)}
    for flag, refs in (("--event", [event]), ("--absorbing", absorbing or []), ("--condition", [condition])):
        for ref in refs:
            if ref is not None and ref not in index:
                raise DataError(f"{flag} {ref}: not one of --classes ({', '.join(names[:20])})")
    check_absorbing([index[a] for a in absorbing or [event]], index[event], names, "--absorbing")
    if condition is not None and condition == event:
        raise DataError(f"--condition {condition} is the event; {CONDITION_NOT_EVENT}")

    longest = max(len(t) for t in tokens)
    L = length or longest
    try:
        check_length(L, f"{path}: the longest sequence has {L} entries")
    except DataError as err:
        raise DataError(f"{err} (give --length to pad them)") from None
    truncated = 0
    sequences = np.full((n, max(L, 1)), UNOBSERVED, dtype=np.int64)
    for r, row in enumerate(tokens):
        if len(row) > L:
            if not truncate:
                raise DataError(f"{_at(path, r)}: {len(row)} entries, longer than --length {L} "
                                "(cut sequences at L with --truncate)")
            row = row[:L]
            truncated += 1
        for i, t in enumerate(row):
            c = index.get(t)
            if c is None:
                raise DataError(f"{_at(path, r)}: class {short(t, 40)} (entry {i + 1}) is not one of "
                                f"--classes ({', '.join(names[:20])})")
            sequences[r, i] = c

    groups = None
    if split_column:
        splits = np.array([str(v).strip() if v is not None else "" for v in
                           _column(data, path, split_column, "--split-column").to_pylist()])
    if group_column:
        values = _column(data, path, group_column, "--group-column").to_pylist()
        if None in values:
            raise DataError(f"{_at(path, values.index(None))}: no group in column {group_column!r}")
        groups = np.array([str(v) for v in values])
    used = {image_column, sequence_column, split_column}
    extras, ignored = _numeric_columns(data, used)

    where = lambda r: _at(path, r)  # noqa: E731
    # Everything cheap is checked before a single image is decoded.
    complete_sequences(sequences, names, [index[a] for a in (absorbing or [event])], where)
    rule = split_rule or (f"given (column {split_column!r})" if split_column else
                          f"seeded random 70/20/10 of the groups (column {group_column!r})" if group_column
                          else None)
    try:
        assign_splits(n, splits=splits, groups=groups, seed=seed, where=where, rule=rule)
    except DataError as err:
        raise DataError(_prefixed(str(err), path)) from None
    images, image_info = read_images(paths, path, image_size=image_size, channels=channels)

    details = {
        **details,
        "columns": {"image": image_column, "sequence": sequence_column,
                    **({"split": split_column} if split_column else {}),
                    **({"group": group_column} if group_column else {})},
        "extras": sorted(extras),
        "ignored_columns": ignored,
        "truncated_items": truncated,
        **image_info,
    }
    try:
        return write_core(out, images=images, sequences=sequences, classes=names, event=event,
                          absorbing=absorbing, splits=splits, groups=groups, seed=seed, name=name,
                          condition=condition, extras=extras, source=source,
                          details=details, generator=generator, split_rule=rule, where=where)
    except DataError as err:
        raise DataError(_prefixed(str(err), path)) from None

def _prefixed(message: str, rows: Rows) -> str:
    """``message``, prefixed with the source's name unless it names one of its files first."""
    return message if message.startswith(rows.files()) else f"{rows}: {message}"

def image_paths(data, table: Path, column: str, root: Path) -> list[Path]:
    import pyarrow as pa

    col = _column(data, table, column, "--image-column")
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise DataError(f"{table}: column {column!r} has type {col.type}; expected image file paths")
    out = []
    for r, v in enumerate(col.to_pylist()):
        if v is None or not v.strip():
            raise DataError(f"{_at(table, r)}: no image path in column {column!r}")
        p = Path(v.strip()).expanduser()
        out.append(p if p.is_absolute() else root / p)
    return out

def _numeric_columns(data, used: set) -> tuple[dict[str, np.ndarray], list[str]]:
    """The table's other numeric columns as extras, and the names of the columns left out."""
    import pyarrow as pa

    extras, ignored = {}, []
    for column in data.column_names:
        if column in used:
            continue
        typ = data.column(column).type
        numeric = pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ)
        if not numeric or column in STANDARD_COLUMNS:
            ignored.append(column)
            continue
        col = data.column(column)
        if pa.types.is_boolean(typ):
            values = np.array([np.nan if v is None else float(v) for v in col.to_pylist()]) if col.null_count \
                else col.to_numpy(zero_copy_only=False).astype(np.int8)
        elif col.null_count:
            values = col.cast(pa.float64()).to_numpy(zero_copy_only=False)  # nulls -> NaN
        else:
            values = col.to_numpy(zero_copy_only=False)
        extras[column] = values
    return extras, ignored

def read_images(paths: list[Path], table: Path, *, image_size: tuple[int, int] | None = None,
                channels: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """Decode every image to uint8 [N, C, H, W] with the one decoder (``images.decode``, which
    ``predict`` uses too); DataError naming the row and path.

    A first pass reads only the headers (upright sizes and modes): mixed sizes need
    ``image_size`` (H, W), then every image is resized (antialiased bilinear); channels
    default to 1 when every image is grayscale, else 3.
    """
    from PIL import Image

    from ...errors import ImageError
    from ..images import DECODE_ERRORS, MAX_PIXELS, decode, is_gray, resize_chw, upright_size

    sizes, modes = [], []
    for r, p in enumerate(paths):
        try:
            with Image.open(p) as image:
                if image.format not in ("PNG", "JPEG", "MPO"):
                    raise DataError(f"{_at(table, r)}: image {p} is {image.format}, not PNG or JPEG")
                if image.width * image.height > MAX_PIXELS:
                    raise DataError(f"{_at(table, r)}: image {p} is {image.width}x{image.height} pixels, "
                                    f"more than {MAX_PIXELS}")
                sizes.append(upright_size(image))
                modes.append(image.mode)
        except FileNotFoundError:
            raise DataError(f"{_at(table, r)}: image {p} not found") from None
        except DataError:
            raise
        except DECODE_ERRORS as err:
            raise DataError(f"{_at(table, r)}: image {p} unreadable ({short(str(err), 100)})") from None
    distinct = sorted(set(sizes))
    if image_size is None:
        if len(distinct) > 1:
            a, b = sizes[0], next(s for s in sizes if s != sizes[0])
            rb = sizes.index(b)
            raise DataError(f"{table}: images differ in size ({_rel(table, 0)}: {a[0]}x{a[1]}, "
                            f"{_rel(table, rb)}: {b[0]}x{b[1]}, "
                            f"H x W; {len(distinct)} sizes); give --image-size H W to resize them")
        height, width = distinct[0]
    else:
        height, width = image_size
    c = channels or (1 if all(is_gray(m) for m in modes) else 3)
    out = np.empty((len(paths), c, height, width), np.uint8)
    resized = 0
    for r, p in enumerate(paths):
        try:
            pixels = decode(p, c)
        except (ImageError, OSError) as err:
            raise DataError(f"{_at(table, r)}: image {p} unreadable ({short(str(err), 100)})") from None
        if pixels.shape[1:] != (height, width):
            resized += 1
        out[r] = resize_chw(pixels, height, width)
    info = {"channels": c, "image_modes": sorted(set(modes)), "image_sizes": len(distinct),
            "resized_images": resized}
    return out, info
