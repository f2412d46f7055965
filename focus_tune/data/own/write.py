"""One's own arrays into the store format: ``write_dataset`` (public) over ``write_core``, which
the importers (``table``, ``folder``, ``arrays``) write through, and the checks they share.

    write_dataset(out, images=..., sequences=..., classes=[...], event="END")   # arrays

A sequence holds the observed entries, -1 for the unobserved ones (only at the end: a
right-censored suffix). After the event, the one absorbing class, nothing changes: the rest
is padded with it and counts as observed. A sequence that ends before L without the event is
censored at its last entry (`observed_length`); so is one that enters another final class
(lost to follow-up...), ended at that entry: only the event may be declared absorbing
(sequences.ONLY_EVENT_ABSORBING says why).

Every check runs before anything is written; a failure raises DataError naming the file,
the row and the entry, and leaves nothing at the destination.
"""
from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import DataError
from ...names import SCENARIO_NAME
from ...quote import short
from ..builtin.profiles import BUILTIN_SCENARIOS
from ..dataset_format import SPLITS, STANDARD_COLUMNS, sha256_file
from ..dataset_writer import DatasetWriter
from ..folder_guard import check_replaceable
from ..sequences import (
    CENSOR_INSTEAD,
    CONDITION_NOT_EVENT,
    ONLY_EVENT_ABSORBING,
    UNOBSERVED,
    censored_items,
    observed_prefix,
)
from ..splits import assign_splits

MAX_NAME = 64  # the search's limit on a scenario's name (names.SCENARIO_NAME)
MIN_LENGTH = 2  # a search's schedule needs two entries (config.generic)
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
) -> Path:
    """Write a dataset folder at ``out`` from in-memory arrays; returns ``out``.

    images: uint8 [N, C, H, W] or [N, H, W, C] (C = 1 or 3; [N, C, H, W] when both axes could
    be channels) or [N, H, W] (grayscale). sequences: int [N, L], class ids, -1 for an
    unobserved entry; a -1 may only be followed by -1. classes: the c class names (ids 0..c-1).
    event: the class (name or id) whose first occurrence is the time to event. absorbing: the
    classes after which nothing changes: None or [event] (another class is refused: end such
    a sequence at that class's entry, censored there); a sequence is padded with the event up
    to L, and one that ends before L without it is censored at its last entry. splits: 'train'
    / 'val' / 'test' per item, or None for a seeded 70/20/10 split of the items, or of ``groups``
    (per-item keys: one group never spans two splits).
    condition: the conditional metrics' first-entry class, never the event (default: the most
    frequent first entry of train other than the event). extras: per-item 1-D numeric columns.
    exact_marginals: float [N, L, c], P(Y_i = a | x), when the true process is known. name: the
    dataset's (and a search's scenario) name, default the folder's name: [A-Za-z0-9][A-Za-z0-9_.-]*,
    not a built-in scenario's. source, details: what the manifest records of the data's origin;
    the counts (censored items and entries, padded items, split rule and seed) are added to
    ``details``.

    Raises DataError (one line) on bad input; nothing is left at ``out`` then.
    """
    return write_core(out, images=images, sequences=sequences, classes=classes, event=event, absorbing=absorbing,
                      splits=splits, groups=groups, seed=seed, name=name, condition=condition, extras=extras,
                      exact_marginals=exact_marginals, source=source, details=details)


def write_core(
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
    """:func:`write_dataset`, and what an importer adds: the ``generator`` and ``split_rule``
    the manifest names, and ``where(i)``, item i in error messages (default ``sequences[i]``)."""
    where = where or (lambda i: f"sequences[{i}]")
    out = check_out(out, "out")
    name = default_name(out, name, "name")
    classes = check_classes(classes, "classes")
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
        "padded_items": int((absorbed & (observed_prefix(sequences) < L)).sum()),
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
    check_replaceable(path)
    parent = absolute.parent
    while not os.path.lexists(parent) and parent.parent != parent:
        parent = parent.parent
    if not parent.is_dir():
        raise DataError(f"{flag} {given}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise DataError(f"{flag} {given}: {parent} is not writable")
    return path

def default_name(out: Path, name: str | None, flag: str) -> str:
    if name is not None:
        return check_name(name, flag)
    return check_name(out.resolve().name, "the output folder's name")

def check_absorbing(absorbing: Sequence[int], event: int, classes: list[str], flag: str) -> None:
    """Only the event may be absorbing (sequences.ONLY_EVENT_ABSORBING says why); DataError naming
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

def check_classes(classes: Sequence[str], flag: str) -> list[str]:
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

def command_line(argv: Sequence[str]) -> str:
    return "python -m focus_tune.data " + shlex.join(list(argv))

def file_info(path: Path, kind: str) -> dict[str, Any]:
    return {"path": str(path.resolve()), "sha256": sha256_file(path), "format": kind}
