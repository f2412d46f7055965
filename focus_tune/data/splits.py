"""The seeded 70/20/10 split of a dataset's items into train, val and test: of the items, or
of groups of items (one group never spans two splits, sized by items); ``split_counts``, the
sizes of a split of m units, is also the Atari-HEAD importer's split by trial."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import DataError
from ..quote import short
from .dataset_format import SPLITS

SPLIT_FRACTIONS = (0.7, 0.2, 0.1)
_SPLIT_TAG = 0x05E1F  # the split's random stream: [seed, tag]

def split_counts(m: int) -> tuple[int, int]:
    """(train, val) units of a 70/20/10 split of ``m`` >= 3 units: round(0.7 m) to train,
    leaving one each for val and test, round(0.2 m) (at least one) to val, the rest to test."""
    n_train = min(round(SPLIT_FRACTIONS[0] * m), m - 2)
    n_val = min(max(1, round(SPLIT_FRACTIONS[1] * m)), m - n_train - 1)
    return n_train, n_val

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
            n_train, n_val = split_counts(m)
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
