"""A user's own image -> event-sequence data into the store format (docs/DATA.md, "Your own data").

    write_dataset(out, images=..., sequences=..., classes=[...], event="END")   # arrays
    python -m focus_tune.data import-table items.csv --out data/mine --event END
    python -m focus_tune.data import-arrays items.npz --out data/mine --event END
    python -m focus_tune.data import-folder photos --out data/mine --event END   # imagefolder layout

A sequence holds the observed entries, -1 for the unobserved ones (only at the end: a
right-censored suffix). After the event, the one absorbing class, nothing changes: the rest
is padded with it and counts as observed. A sequence that ends before L without the event is
censored at its last entry (`observed_length`); so is one that enters another final class
(lost to follow-up...), ended at that entry: only the event may be declared absorbing
(store.ONLY_EVENT_ABSORBING says why).

Every check runs before anything is written; a failure raises DataError naming the file,
the row and the entry, and leaves nothing at the destination.
"""
from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...names import SCENARIO_NAME
from ...quote import short
from ..builtin.profiles import BUILTIN_SCENARIOS
from ..store import (
    CENSOR_INSTEAD, CONDITION_NOT_EVENT, ONLY_EVENT_ABSORBING, SPLITS, STANDARD_COLUMNS, DataError, DatasetWriter,
    _check_replaceable, censored_items, sha256_file)

SPLIT_FRACTIONS = (0.7, 0.2, 0.1)
MAX_NAME = 64  # the search's limit on a scenario's name (names.SCENARIO_NAME)
MIN_LENGTH = 2  # a search's schedule needs two entries (generic_space)
UNOBSERVED = -1
_SPLIT_TAG = 0x05E1F  # the split's random stream: [seed, tag]

ClassRef = str | int


def write_dataset(
    out: str | os.PathLike,
    *,
    images: np.ndarray,
    sequences: np.ndarray,
    classes: Sequence[str],
    event: ClassRef,
    absorbing: Sequence[ClassRef] | None = None,
    splits: Sequence[str] | np.ndarray | None = None,
    groups: Sequence[Any] | np.ndarray | None = None,
    seed: int = 0,
    name: str | None = None,
    condition: ClassRef | None = None,
    extras: dict[str, np.ndarray] | None = None,
    exact_marginals: np.ndarray | None = None,
    source: str = "arrays given to focus_tune.data.write_dataset",
    details: dict[str, Any] | None = None,
    generator: str = "write_dataset",
    split_rule: str | None = None,
    where: Callable[[int], str] | None = None,
) -> Path:
    """Write a dataset folder at ``out`` from in-memory arrays; returns ``out``.

    images: uint8 [N, C, H, W] or [N, H, W, C] (C = 1 or 3; [N, C, H, W] when both axes could
    be channels) or [N, H, W] (grayscale). sequences: int [N, L], class ids, -1 for an
    unobserved entry; a -1 may only be followed by -1. classes: the c class names (ids 0..c-1).
    event: the class (name or id) whose first occurrence is the time to event. absorbing: the
    classes after which nothing changes: None or [event] (another class is refused: end such
    a sequence at that class's entry, censored there); a sequence is padded with the event up
    to L, and one that ends before L without it is censored at its last entry. splits: 'train' / 'val' / 'test' per item, or None for a seeded 70/20/10 split
    of the items, or of ``groups`` (per-item keys: one group never spans two splits).
    condition: the conditional metrics' first-entry class, never the event (default: the most
    frequent first entry of train other than the event). extras: per-item 1-D numeric columns.
    exact_marginals: float [N, L, c], P(Y_i = a | x), when the true process is known. name: the
    dataset's (and a search's scenario) name, default the folder's name: [A-Za-z0-9][A-Za-z0-9_.-]*,
    not a built-in scenario's. source, details: what the manifest records of the data's origin;
    the counts (censored items and entries, padded items, split rule and seed) are added to
    ``details``; ``generator`` and ``split_rule`` name the importer and the split there.
    ``where(i)`` names item i in error messages (default ``sequences[i]``).

    Raises DataError (one line) on bad input; nothing is left at ``out`` then.
    """
    where = where or (lambda i: f"sequences[{i}]")
    out = check_out(out, "out")
    name = _default_name(out, name, "name")
    classes = _check_classes(classes, "classes")
    k = len(classes)
    event_id = class_id(event, classes, "event")
    absorbing_ids = [event_id] if absorbing is None else [class_id(a, classes, "absorbing") for a in absorbing]
    if not absorbing_ids:
        raise DataError("absorbing: give at least one class (the event by default)")
    absorbing_ids = sorted(set(absorbing_ids))
    check_absorbing(absorbing_ids, event_id, classes, "absorbing")
    condition_id = None if condition is None else class_id(condition, classes, "condition")
    if condition_id == event_id:
        raise DataError(f"condition {classes[condition_id]} is the event; {CONDITION_NOT_EVENT}")

    images = as_chw(images, "images")
    n = len(images)
    filled, observed_length = complete_sequences(sequences, classes, absorbing_ids, where)
    if len(filled) != n:
        raise DataError(f"images hold {n} items, sequences {len(filled)}")
    extras = _check_extras(extras or {}, n)
    if exact_marginals is not None:
        exact_marginals = _check_marginals(exact_marginals, filled.shape, k, where)
    assignment, split_info = assign_splits(n, splits=splits, groups=groups, seed=seed, where=where, rule=split_rule)

    L = filled.shape[1]
    check_length(L, "sequences")
    cut_short = observed_length < L
    censored = bool(cut_short.any())
    absorbed = np.isin(filled[:, -1], absorbing_ids) & ~cut_short
    unknown = censored_items(filled, event_id, observed_length)
    recorded = dict(details or {})
    recorded.update({
        "items": n,
        "censored_items": int(unknown.sum()),
        "cut_short_items": int(cut_short.sum()),
        "unobserved_entries": int((L - observed_length).sum()),
        "padded_items": int((absorbed & (_observed_prefix(sequences) < L)).sum()),
        "split": split_info,
    })
    writer = DatasetWriter(out, class_names=classes, length=L, image_shape=images.shape[1:], event_class=event_id,
                           has_exact_marginals=exact_marginals is not None, censored=censored)
    with writer:
        for split in SPLITS:
            idx = np.flatnonzero(assignment == split)
            for start in range(0, len(idx), 1024):
                part = idx[start:start + 1024]
                writer.add(split, images[part], filled[part],
                           exact_marginals=None if exact_marginals is None else exact_marginals[part],
                           extras={key: v[part] for key, v in extras.items()},
                           observed_length=observed_length[part] if censored else None)
        return writer.commit(name=name, source=source, generator=generator, condition_class=condition_id,
                             absorbing=absorbing_ids, details=recorded)


# ----------------------------------------------------------------------------- checks


def check_name(name: str, what: str = "--name") -> str:
    """A dataset name a search can use as its scenario: the search's own rule for a scenario
    name (``names.SCENARIO_NAME``: 1 to 64 letters, digits, '_', '.' and '-', starting with
    a letter or digit; it names folders), not a built-in scenario's. ``what`` says where the name
    came from, for the message."""
    if not isinstance(name, str) or not re.fullmatch(SCENARIO_NAME, name):
        raise DataError(f"{what} {short(name, 60)} is not a dataset name: 1 to {MAX_NAME} letters, digits, '_', "
                        "'.' and '-', starting with a letter or digit (a search names its folders after it; "
                        "give one with --name)") from None
    if name.lower() in BUILTIN_SCENARIOS:
        raise DataError(f"{what} {name!r} is a built-in scenario's name ({', '.join(BUILTIN_SCENARIOS)}); "
                        "give your own data another name (--name)")
    return name


def check_out(out: str | os.PathLike, flag: str = "--out") -> Path:
    """The dataset folder to write, checked before any work: not the current folder or one
    above it, absent, empty or a dataset of ours, below a folder that exists (or can be made)
    and can be written. Returns it normalised ('a/../b' -> 'b'); DataError naming it otherwise."""
    given = str(out)
    if not given.strip():
        raise DataError(f"{flag}: empty; give the dataset folder to write (e.g. {flag} data/mine)")
    path = Path(os.path.normpath(given))
    absolute = Path(os.path.abspath(path))
    cwd = Path(os.path.abspath(os.getcwd()))
    if absolute == cwd or absolute in cwd.parents or absolute.parent == absolute:
        raise DataError(f"{flag} {given}: the current folder or one above it; the dataset is written as a new "
                        f"folder: give its name (e.g. {flag} data/mine)")
    _check_replaceable(path)
    parent = absolute.parent
    while not os.path.lexists(parent) and parent.parent != parent:
        parent = parent.parent
    if not parent.is_dir():
        raise DataError(f"{flag} {given}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise DataError(f"{flag} {given}: {parent} is not writable")
    return path


def _default_name(out: Path, name: str | None, flag: str) -> str:
    if name is not None:
        return check_name(name, flag)
    return check_name(out.resolve().name, "the output folder's name")


def check_absorbing(absorbing: Sequence[int], event: int, classes: list[str], flag: str) -> None:
    """Only the event may be absorbing (store.ONLY_EVENT_ABSORBING says why); DataError naming
    the other classes and what to do instead."""
    others = [classes[a] for a in sorted(set(absorbing)) if a != event]
    if others:
        raise DataError(f"{flag} {' '.join(others)}: only the event ({classes[event]}) may be absorbing, because "
                        f"{ONLY_EVENT_ABSORBING}; {CENSOR_INSTEAD}")


def check_length(length: int, what: str) -> None:
    """L = 1 is refused at import: the search could not use it (its schedule needs 2 entries)."""
    if length < MIN_LENGTH:
        raise DataError(f"{what}: sequences of length {length}; a search needs at least {MIN_LENGTH} entries "
                        "(a schedule of one entry chosen alone and one for the joint stage)")


def _check_classes(classes: Sequence[str], flag: str) -> list[str]:
    names = [str(c) for c in classes] if not isinstance(classes, str) else None
    if not names or not 1 <= len(names) <= 127:
        raise DataError(f"{flag}: give 1 to 127 class names, got {short(classes, 80)}")
    for c in names:
        if not c or any(ch.isspace() for ch in c):
            raise DataError(f"{flag}: class name {c!r} is empty or holds whitespace")
    dup = sorted({c for c in names if names.count(c) > 1})
    if dup:
        raise DataError(f"{flag}: class name(s) {', '.join(dup)} given twice")
    return names


def class_id(ref: ClassRef, classes: list[str], flag: str) -> int:
    """A class given by name (or, when it names none, by id) -> its id; DataError if none."""
    if isinstance(ref, str) and ref in classes:
        return classes.index(ref)
    if isinstance(ref, (int, np.integer)) and not isinstance(ref, bool) and 0 <= ref < len(classes):
        return int(ref)
    listed = ", ".join(classes[:20]) + (", ..." if len(classes) > 20 else "")
    raise DataError(f"{flag} {short(ref, 60)}: not a class (classes: {listed})")


def as_chw(images: np.ndarray, what: str) -> np.ndarray:
    """uint8 [N, C, H, W] from [N, C, H, W], [N, H, W, C] or [N, H, W] (C = 1 or 3)."""
    images = np.asarray(images)
    if images.dtype != np.uint8:
        raise DataError(f"{what}: dtype {images.dtype}, expected uint8 pixels (0-255)")
    if images.ndim == 3:
        images = images[:, None]
    if images.ndim != 4 or images.shape[0] == 0:
        raise DataError(f"{what}: shape {list(images.shape)}, expected [N, C, H, W] or [N, H, W, C] with C = 1 or 3")
    if images.shape[1] not in (1, 3):
        if images.shape[3] not in (1, 3):
            raise DataError(f"{what}: shape {list(images.shape)} has no channel axis of 1 or 3 "
                            "(expected [N, C, H, W] or [N, H, W, C])")
        images = images.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(images)


def _observed_prefix(sequences: np.ndarray) -> np.ndarray:
    return (np.asarray(sequences) != UNOBSERVED).sum(axis=1)


def complete_sequences(sequences: np.ndarray, classes: list[str], absorbing: list[int],
                       where: Callable[[int], str]) -> tuple[np.ndarray, np.ndarray]:
    """Validate sequences with -1 for unobserved entries; fill them in.

    Returns (sequences int64 [N, L] without -1, observed_length int64 [N]): after the first
    absorbing entry the sequence is padded with that class (observed, up to L); a sequence
    ending before L without one is censored at its last entry, the rest filled with that
    entry (never read: ``observed_length`` masks it).
    """
    seqs = np.asarray(sequences)
    if seqs.ndim != 2 or seqs.shape[0] == 0 or seqs.shape[1] == 0 or not (
            np.issubdtype(seqs.dtype, np.integer) and not np.issubdtype(seqs.dtype, np.bool_)):
        raise DataError(f"sequences: shape {list(seqs.shape)} of {seqs.dtype}, expected integers [N, L] "
                        "(class ids, -1 unobserved)")
    seqs = seqs.astype(np.int64)
    n, L = seqs.shape
    k = len(classes)

    def first(mask: np.ndarray) -> tuple[int, int]:
        row, entry = np.argwhere(mask)[0]
        return int(row), int(entry)

    bad = (seqs < UNOBSERVED) | (seqs >= k)
    if bad.any():
        r, i = first(bad)
        raise DataError(f"{where(r)}: entry {i + 1} is {seqs[r, i]}, not a class id in [0, {k}) or -1 (unobserved)")
    unobserved = seqs == UNOBSERVED
    gap = np.logical_or.accumulate(unobserved, axis=1) & ~unobserved
    if gap.any():
        r, i = first(gap)
        raise DataError(f"{where(r)}: entry {i + 1} ({classes[seqs[r, i]]}) follows an unobserved entry (-1); "
                        "only the end of a sequence may be unobserved (a right-censored suffix)")
    observed = (~unobserved).sum(axis=1)
    if (observed == 0).any():
        raise DataError(f"{where(int(np.argmin(observed)))}: empty sequence (no observed entry)")
    rows = np.arange(n)
    hits = np.isin(seqs, absorbing)
    has_absorbing = hits.any(axis=1)
    at = hits.argmax(axis=1)
    absorbed_class = seqs[rows, at]
    after = has_absorbing[:, None] & (np.arange(L)[None, :] > at[:, None]) & ~unobserved
    wrong = after & (seqs != absorbed_class[:, None])
    if wrong.any():
        r, i = first(wrong)
        raise DataError(f"{where(r)}: entry {i + 1} ({classes[seqs[r, i]]}) follows the absorbing class "
                        f"{classes[absorbed_class[r]]} (entry {at[r] + 1}); after an absorbing class nothing changes")
    last = seqs[rows, observed - 1]
    fill = np.where(has_absorbing, absorbed_class, last)
    filled = np.where(unobserved, fill[:, None], seqs)
    observed_length = np.where(has_absorbing, L, observed).astype(np.int64)
    return filled, observed_length


def _check_extras(extras: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    out = {}
    for key, values in extras.items():
        if not isinstance(key, str) or not key or key in STANDARD_COLUMNS:
            raise DataError(f"extras: column name {short(key, 60)} is empty or one of the store's "
                            f"({', '.join(STANDARD_COLUMNS)})")
        values = np.asarray(values)
        if values.shape != (n,) or values.dtype.kind not in "biuf":
            raise DataError(f"extras[{key!r}]: shape {list(values.shape)} of {values.dtype}, "
                            f"expected {n} numbers (one per item)")
        out[key] = values.astype(np.int8) if values.dtype.kind == "b" else values
    return out


def _check_marginals(marginals: np.ndarray, shape: tuple[int, int], k: int,
                     where: Callable[[int], str]) -> np.ndarray:
    """Exact marginals [N, L, c]: finite probabilities summing to 1 over the classes."""
    marginals = np.asarray(marginals, dtype=np.float32)
    if marginals.shape != (*shape, k):
        raise DataError(f"exact_marginals: shape {list(marginals.shape)}, expected {[*shape, k]} [N, L, c]")
    bad = ~np.isfinite(marginals).all(axis=2) | (marginals.min(axis=2) < 0) | (marginals.max(axis=2) > 1 + 1e-3)
    bad |= np.abs(marginals.sum(axis=2) - 1.0) > 1e-3
    if bad.any():
        r, i = np.argwhere(bad)[0]
        raise DataError(f"{where(int(r))}: exact_marginals at entry {i + 1} are not probabilities summing to 1 "
                        f"({short(marginals[r, i].tolist(), 80)})")
    return marginals


def assign_splits(n: int, *, splits=None, groups=None, seed: int = 0,
                  where: Callable[[int], str] = lambda i: f"item {i}", rule: str | None = None
                  ) -> tuple[np.ndarray, dict[str, Any]]:
    """The split of each item (array of 'train' / 'val' / 'test') and what the manifest records.

    Given ``splits``, checked; else a seeded shuffle of the items (or of the distinct
    ``groups``, sorted first): round(0.7 n) to train (leaving one each for val and test),
    round(0.2 n) (at least one) to val, the rest to test. An empty split is an error.
    """
    if splits is not None and groups is not None:
        raise DataError("give the splits or the groups to split by, not both")
    if splits is not None:
        assignment = np.asarray(splits).astype(str)
        if assignment.shape != (n,):
            raise DataError(f"splits: {assignment.shape[0] if assignment.ndim else 0} values for {n} items")
        bad = ~np.isin(assignment, SPLITS)
        if bad.any():
            r = int(np.argmax(bad))
            raise DataError(f"{where(r)}: split {short(assignment[r], 40)} is not one of {', '.join(SPLITS)}")
        info: dict[str, Any] = {"rule": rule or "given per item"}
    else:
        if groups is None:
            units, inverse = np.arange(n), np.arange(n)
            info = {"rule": rule or "seeded random 70/20/10 of the items", "seed": int(seed)}
        else:
            keys = np.asarray(groups)
            if keys.shape != (n,):
                raise DataError(f"groups: {keys.shape[0] if keys.ndim else 0} values for {n} items")
            if keys.dtype.kind == "O":
                keys = keys.astype(str)
            units, inverse = np.unique(keys, return_inverse=True)
            info = {"rule": rule or "seeded random 70/20/10 of the items, whole groups", "seed": int(seed)}
        m = len(units)
        if m < 3:
            what = "groups" if groups is not None else "items"
            raise DataError(f"{m} {what}: a 70/20/10 split needs at least 3, one for each of train, val, test "
                            "(an empty split)")
        order = np.random.default_rng([seed, _SPLIT_TAG]).permutation(m)
        unit_split = np.empty(m, dtype=object)
        if groups is None:
            n_train = min(round(SPLIT_FRACTIONS[0] * m), m - 2)
            n_val = min(max(1, round(SPLIT_FRACTIONS[1] * m)), m - n_train - 1)
            unit_split[order[:n_train]] = "train"
            unit_split[order[n_train:n_train + n_val]] = "val"
            unit_split[order[n_train + n_val:]] = "test"
        else:
            sizes = np.bincount(inverse, minlength=m)
            unit_split[:] = np.array(SPLITS, dtype=object)[_groups_by_items(sizes, order)]
        assignment = unit_split[inverse].astype(str)
        if groups is not None:
            info["groups"] = {s: int((unit_split == s).sum()) for s in SPLITS}
    counts = {s: int((assignment == s).sum()) for s in SPLITS}
    empty = [s for s in SPLITS if counts[s] == 0]
    if empty:
        raise DataError(f"split(s) {', '.join(empty)} would be empty ({counts['train']} train, {counts['val']} val, "
                        f"{counts['test']} test items); every split needs at least one item")
    info["items"] = counts
    return assignment, info


def _groups_by_items(sizes: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Each group's split (0 train, 1 val, 2 test), sized by items: the groups, in the seeded
    ``order``, each go to the split where the items' total distance from 70/20/10 of the
    items ends least (ties: the split furthest below its share, then train, val, test); a
    split left without a group then takes the group whose move costs least. Every split gets
    at least one group (there are at least 3)."""
    target = np.asarray(SPLIT_FRACTIONS) * sizes.sum()
    held = np.zeros(3)
    count = np.zeros(3, np.int64)
    split = np.empty(len(sizes), np.int64)
    for g in order:
        size = sizes[g]
        # |held + size - target| - |held - target|: the change in the total distance.
        cost = np.abs(held + size - target) - np.abs(held - target)
        below = (target - held) / target
        s = min(range(3), key=lambda j: (cost[j], -below[j], j))
        split[g] = s
        held[s] += size
        count[s] += 1
    position = np.empty(len(sizes), np.int64)
    position[order] = np.arange(len(sizes))
    while (count == 0).any():
        empty = int(np.flatnonzero(count == 0)[0])
        best = None
        for g in order:
            s = split[g]
            if count[s] < 2:
                continue
            after = held.copy()
            after[s] -= sizes[g]
            after[empty] += sizes[g]
            key = (np.abs(after - target).sum(), position[g])
            if best is None or key < best[0]:
                best = (key, g)
        g = best[1]
        held[split[g]] -= sizes[g]
        count[split[g]] -= 1
        split[g] = empty
        held[empty] += sizes[g]
        count[empty] += 1
    return split


def command_line(argv: Sequence[str]) -> str:
    return "python -m focus_tune.data " + shlex.join(list(argv))


def _file_info(path: Path, kind: str) -> dict[str, Any]:
    return {"path": str(path.resolve()), "sha256": sha256_file(path), "format": kind}


# ----------------------------------------------------------------------------- a table


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


def _sequence_tokens(table, path: Path, column: str) -> list[list[str]]:
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


def _check_tokens(tokens: list[list[str]], path: Path, column: str) -> None:
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


def _sorted_names(names: set[str]) -> list[str]:
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
    name = _default_name(out, name, "--name")
    if split_column and group_column:
        raise DataError("give --split-column or --group-column, not both")
    _check_table_flags(channels, truncate, length)
    data, kind, lines = read_table(path, (image_column, sequence_column, split_column, group_column))
    if data.num_rows == 0:
        raise DataError(f"{path}: the table has no rows")
    rows = Rows(path)
    rows.add(path, data.num_rows, lines)
    root = Path(images_root) if images_root else path.parent
    paths = _image_paths(data, rows, image_column, root)
    details = {
        "command": command,
        "table": {**_file_info(path, kind), "rows": data.num_rows},
        "images_root": str(root.resolve()),
    }
    return _import_rows(data, rows, paths, out, event=event, absorbing=absorbing, length=length, name=name,
                        classes=classes, condition=condition, image_size=image_size, channels=channels,
                        image_column=image_column, sequence_column=sequence_column, split_column=split_column,
                        group_column=group_column, seed=seed, truncate=truncate, details=details,
                        source=f"table {path.resolve()}", generator="import-table")


def _check_table_flags(channels: int | None, truncate: bool, length: int | None) -> None:
    if channels not in (None, 1, 3):
        raise DataError(f"--channels {channels}: expected 1 or 3")
    if truncate and length is None:
        raise DataError("--truncate cuts sequences at --length: give --length L with it")
    if length is not None:
        check_length(length, f"--length {length}")


def _import_rows(data, rows: Rows, paths: list[Path], out: Path, *, event: str, absorbing: Sequence[str] | None,
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
    tokens = _sequence_tokens(data, path, sequence_column)
    _check_tokens(tokens, path, sequence_column)

    if classes is None:
        seen = {t for row in tokens for t in row}
        if not seen:
            raise DataError(f"{_at(path, 0)}: empty sequence (no entry in column {sequence_column!r})")
        names = _sorted_names(seen)
        for flag, refs in (("--event", [event]), ("--absorbing", absorbing or []), ("--condition", [condition])):
            for ref in refs:
                if ref is not None and ref not in seen:
                    raise DataError(f"{flag} {ref}: no sequence of {path} holds it (classes seen: "
                                    f"{', '.join(names[:20])}); name classes that never occur with --classes")
    else:
        names = _check_classes(classes, "--classes")
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
        return write_dataset(out, images=images, sequences=sequences, classes=names, event=event,
                             absorbing=absorbing, splits=splits, groups=groups, seed=seed, name=name,
                             condition=condition, extras=extras, source=source,
                             details=details, generator=generator, split_rule=rule, where=where)
    except DataError as err:
        raise DataError(_prefixed(str(err), path)) from None


def _prefixed(message: str, rows: Rows) -> str:
    """``message``, prefixed with the source's name unless it names one of its files first."""
    return message if message.startswith(rows.files()) else f"{rows}: {message}"


# ----------------------------------------------------------------------------- an imagefolder

METADATA_FILES = ("metadata.csv", "metadata.jsonl")
IMAGE_COLUMN = "file_name"  # the imagefolder layout's (Hugging Face datasets)
# The split folders of the layout, by the store's split: the names it takes.
SPLIT_FOLDERS = {"train": ("train",), "val": ("validation", "val"), "test": ("test",)}


def _metadata_file(folder: Path) -> Path | None:
    found = [folder / f for f in METADATA_FILES if (folder / f).is_file()]
    if len(found) > 1:
        raise DataError(f"{folder}: both metadata.csv and metadata.jsonl; keep one")
    return found[0] if found else None


def find_metadata(root: Path) -> list[tuple[str | None, Path]]:
    """The metadata files of an imagefolder tree: [(split, file)] of its split folders (train/,
    validation/ or val/, test/, each with its own metadata.csv or metadata.jsonl), or
    [(None, file)] of one at the top. DataError naming the folder when there is none, when
    both are there, or when a split folder is missing or lacks its file."""
    if not root.is_dir():
        raise DataError(f"{root}: no such folder (the imagefolder layout: a folder of images with a "
                        "metadata.csv or metadata.jsonl)")
    top = _metadata_file(root)
    folders: dict[str, Path] = {}
    for split, names in SPLIT_FOLDERS.items():
        present = [root / d for d in names if (root / d).is_dir()]
        if len(present) > 1:
            raise DataError(f"{root}: both {present[0].name}/ and {present[1].name}/; keep one validation folder")
        if present:
            folders[split] = present[0]
    with_files = {split: _metadata_file(d) for split, d in folders.items()}
    with_files = {split: f for split, f in with_files.items() if f is not None}
    if top is not None:
        if with_files:
            inner = ", ".join(str(f.relative_to(root)) for f in with_files.values())
            raise DataError(f"{root}: a {top.name} at the top and in split folders ({inner}); keep one: the top "
                            "one for a 70/20/10 split (or its own split column), or one per split folder")
        return [(None, top)]
    if not with_files:
        where = f" or in {', '.join(d.name + '/' for d in folders.values())}" if folders else ""
        raise DataError(f"{root}: no metadata.csv or metadata.jsonl at the top{where}; the imagefolder layout "
                        f"lists each image ({IMAGE_COLUMN} column) and its sequence in one (docs/DATA.md)")
    for split, d in folders.items():
        if split not in with_files:
            raise DataError(f"{d}: no metadata.csv or metadata.jsonl (each split folder holds its own, "
                            f"{IMAGE_COLUMN} relative to it)")
    missing = [" or ".join(f"{n}/" for n in SPLIT_FOLDERS[s]) for s in SPLIT_FOLDERS if s not in with_files]
    if missing:
        have = ", ".join(f"{d.name}/" for d in folders.values())
        raise DataError(f"{root}: split folders {have} but no {', '.join(missing)}: every split needs items; give "
                        "the three, or one metadata file at the top for a seeded 70/20/10 split")
    return [(split, with_files[split]) for split in SPLIT_FOLDERS]


def import_folder(
    folder: str | os.PathLike,
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
    sequence_column: str = "sequence",
    split_column: str | None = None,
    group_column: str | None = None,
    seed: int = 0,
    truncate: bool = False,
    command: str | None = None,
) -> Path:
    """Import a folder in Hugging Face datasets' imagefolder layout (the `import-folder`
    command; docs/DATA.md): images with a metadata.csv or metadata.jsonl whose ``file_name``
    column holds each image's path relative to the metadata file's folder, and the sequence
    column as in a table (``import_table``, whose checks and messages it shares). The splits
    are the split folders' (train/, validation/ or val/, test/, each with its own metadata
    file) when there are any, else the table importer's (seeded 70/20/10, or ``split_column``
    / ``group_column``). Without ``classes`` the split folders must hold the same classes.
    """
    import pyarrow as pa

    root = Path(folder)
    out = check_out(out)
    name = _default_name(out, name, "--name")
    if split_column and group_column:
        raise DataError("give --split-column or --group-column, not both")
    _check_table_flags(channels, truncate, length)
    found = find_metadata(root)
    by_folders = found[0][0] is not None
    if by_folders and (split_column or group_column):
        raise DataError(f"--{'split' if split_column else 'group'}-column: {root}'s split folders give the splits")
    rows = Rows(root if by_folders else found[0][1])
    tables, paths, splits, seen, files = [], [], [], [], []
    for split, meta in found:
        data, kind, lines = read_table(meta, (IMAGE_COLUMN, sequence_column, split_column, group_column))
        if data.num_rows == 0:
            raise DataError(f"{meta}: no rows")
        own = Rows(meta)
        own.add(meta, data.num_rows, lines)
        paths += _image_paths(data, own, IMAGE_COLUMN, meta.parent)
        tokens = _sequence_tokens(data, own, sequence_column)
        _check_tokens(tokens, own, sequence_column)
        if by_folders:  # one sequence type whatever each file's format: a list of class names
            data = data.drop_columns([IMAGE_COLUMN])
            data = data.set_column(data.column_names.index(sequence_column), sequence_column,
                                   pa.array(tokens, pa.list_(pa.string())))
        tables.append(data)
        rows.add(meta, data.num_rows, lines)
        splits += [split] * data.num_rows
        seen.append({t for row in tokens for t in row})
        files.append({**_file_info(meta, kind), "rows": data.num_rows, **({"split": split} if split else {})})
    if by_folders and classes is None:
        every = set().union(*seen)
        for (_, meta), mine in zip(found, seen):
            if mine != every:
                lacking = ", ".join(_sorted_names(every - mine)[:10])
                raise DataError(f"{meta}: no sequence holds {lacking}, which the other split folders' do: the split "
                                "folders' class sets differ (a typo?); name every class with --classes to allow it")
    if by_folders:
        try:
            data = pa.concat_tables(tables, promote_options="permissive")
        except (pa.ArrowException, ValueError, TypeError) as err:
            raise DataError(f"{root}: the split folders' metadata files do not agree on their columns' types "
                            f"({short(' '.join(str(err).split()), 120)})") from None
        used = {s: "/".join(f"{n}/" for n in SPLIT_FOLDERS[s] if (root / n).is_dir()) for s in SPLIT_FOLDERS}
        rule = f"given (split folders {', '.join(used.values())})"
    else:
        data, rule = tables[0], None
    details = {"command": command, "folder": {"path": str(root.resolve()), "metadata": files}}
    return _import_rows(data, rows, paths, out, event=event, absorbing=absorbing, length=length, name=name,
                        classes=classes, condition=condition, image_size=image_size, channels=channels,
                        image_column=IMAGE_COLUMN, sequence_column=sequence_column, split_column=split_column,
                        group_column=group_column, seed=seed, truncate=truncate, details=details,
                        source=f"imagefolder {root.resolve()}", generator="import-folder",
                        splits=np.array(splits) if by_folders else None, split_rule=rule)


def _image_paths(data, table: Path, column: str, root: Path) -> list[Path]:
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

    from ..images import DECODE_ERRORS, MAX_PIXELS, ImageError, decode, is_gray, resize_chw, upright_size

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
            raise DataError(f"{table}: images differ in size ({_rel(table, 0)}: {a[0]}x{a[1]}, {_rel(table, rb)}: {b[0]}x{b[1]}, "
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


# ----------------------------------------------------------------------------- arrays


def _text_values(array: np.ndarray, path: Path, key: str) -> list[str]:
    """A 1-D str or bytes array as Python strings: bytes are decoded as UTF-8 (b'END' -> 'END')."""
    if array.dtype.kind != "S":
        return [str(v) for v in array.tolist()]
    out = []
    for i, v in enumerate(array.tolist()):
        try:
            out.append(v.decode("utf-8"))
        except UnicodeDecodeError:
            raise DataError(f"{path}: {key}[{i}] {short(v, 40)} is not UTF-8 text") from None
    return out


def import_arrays(
    file: str | os.PathLike,
    out: str | os.PathLike,
    *,
    event: str,
    absorbing: Sequence[str] | None = None,
    name: str | None = None,
    classes: Sequence[str] | None = None,
    condition: str | None = None,
    seed: int = 0,
    command: str | None = None,
) -> Path:
    """Import an .npz of `images`, `sequences` (-1 unobserved), `classes` and optionally
    `split` or `groups` and `exact_marginals` (the `import-arrays` command); other [N] numeric
    arrays become extras."""
    path = Path(file)
    out = check_out(out)
    name = _default_name(out, name, "--name")
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    import zipfile

    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as err:
        raise DataError(f"{path}: unreadable .npz ({short(' '.join(str(err).split()), 160)})") from None
    for key in ("images", "sequences"):
        if key not in arrays:
            raise DataError(f"{path}: no array {key!r} (it holds: {', '.join(sorted(arrays)) or 'nothing'})")
    if "classes" in arrays:
        stored = arrays["classes"]
        if stored.dtype.kind not in "US" or stored.ndim != 1:
            raise DataError(f"{path}: 'classes' is {stored.dtype} {list(stored.shape)}; expected a 1-D array of "
                            "class names (np.array(names, dtype=str))")
        names = _text_values(stored, path, "classes")
        if classes is not None and list(classes) != names:
            raise DataError(f"{path}: --classes {' '.join(classes)} differ from the file's classes {' '.join(names)}")
    elif classes is not None:
        names = list(classes)
    else:
        raise DataError(f"{path}: no array 'classes'; store the class names in it or give --classes")
    n = len(arrays["sequences"]) if arrays["sequences"].ndim else 0
    standard = {"images", "sequences", "classes", "split", "groups", "exact_marginals"}
    extras = {k: v for k, v in arrays.items() if k not in standard and k not in STANDARD_COLUMNS
              and v.shape == (n,) and v.dtype.kind in "biuf"}
    ignored = sorted(set(arrays) - standard - set(extras))
    splits = arrays.get("split")
    if splits is not None and splits.dtype.kind not in "US":
        raise DataError(f"{path}: 'split' is {splits.dtype}; expected strings 'train', 'val', 'test'")
    if splits is not None and splits.ndim == 1:
        splits = np.array(_text_values(splits, path, "split"), dtype=str)
    groups = arrays.get("groups")
    if groups is not None and groups.dtype.kind == "S" and groups.ndim == 1:
        groups = np.array(_text_values(groups, path, "groups"), dtype=str)
    details = {"command": command, "arrays": _file_info(path, "npz"), "extras": sorted(extras),
               "ignored_arrays": ignored}
    where = lambda r: f"{path}: sequences[{r}]"  # noqa: E731
    try:
        return write_dataset(out, images=arrays["images"], sequences=arrays["sequences"], classes=names,
                             event=event, absorbing=absorbing, splits=splits, groups=groups,
                             seed=seed, name=name, condition=condition, extras=extras,
                             exact_marginals=arrays.get("exact_marginals"),
                             source=f"arrays {path.resolve()}", details=details, generator="import-arrays",
                             where=where)
    except DataError as err:
        message = str(err)
        raise DataError(message if message.startswith(str(path)) else f"{path}: {message}") from None
