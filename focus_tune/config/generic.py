"""The search space of a dataset that is not a built-in scenario (``--data DIR`` without ``--game``).

It is ``search_spaces/generic.yaml``: the paper's procedure and grids with the training budgets
the built-in quick profile was measured on (H.E.R.O.'s, docs/RESULTS.md; a file of its own, so
that retuning a built-in scenario leaves every own-data search unchanged), the paper's lr for
every scenario but H.E.R.O. (1e-5, App. C.3) at the top level, and each profile's grid with k1
and k2 fitted to the data's length L:

* k2's grid was set for L = 100 (FaceMed; the games reuse it at L = 200-300): for L <= 100,
  each k2 keeps its share of the length, 1 + round((k2 - 1) L / 100), capped at L;
  above 100, the grid stays as it is;
* k1 = min(k1, L - 1), so that the joint stage has entries left to regularize.

``python -m focus_tune.search --data DIR --print-config`` writes the result out for editing;
``python -m focus_tune.recipe --data DIR`` searches a training recipe for the data itself and
writes this space with it (``focus_tune.recipe``).
"""

from __future__ import annotations

import copy
from typing import Any

from ..errors import ConfigError
from .space import SPACES_DIR, SearchConfig, parse_search_space
from .strict_yaml import read_yaml

TEMPLATE = "generic.yaml"  # the generic space before its grids are fitted to L
PAPER_LR = 1.0e-5  # App. C.3: every scenario but H.E.R.O. (generic.yaml's top-level lr)
GRID_LENGTH = 100  # the length the paper's k2 grid was set for


def fit_k2(k2: list[int], length: int) -> list[int]:
    """The k2 grid for data of ``length`` entries (the module doc's rule), sorted, no repeats."""
    if length >= GRID_LENGTH:
        return sorted(set(k2))
    return sorted({min(length, 1 + round((k - 1) * length / GRID_LENGTH)) for k in k2})


def fit_grid(grid: dict[str, Any], length: int) -> dict[str, Any]:
    """``grid`` (a raw grid section, whole or a profile's) with k1 and k2 fitted to ``length``."""
    out = dict(grid)
    if "k1" in out:
        out["k1"] = max(1, min(out["k1"], length - 1))
    if "k2" in out:
        k1 = out.get("k1", 1)
        k2 = fit_k2(out["k2"], length)
        out["k2"] = k2 if max(k2) > k1 else sorted(set(k2) | {length})
    return out


def generic_space(name: str, length: int) -> dict[str, Any]:
    """The raw search space (as a YAML file would hold it) of scenario ``name`` with ``length`` entries."""
    if length < 2:
        raise ConfigError(f"{name}: sequences of length {length}: a schedule needs at least 2 entries "
                          "(one chosen alone, one for the joint stage)")
    raw = copy.deepcopy(read_yaml(SPACES_DIR / TEMPLATE, TEMPLATE))
    raw["scenario"] = name
    raw["grid"] = fit_grid(raw["grid"], length)
    for body in raw.get("profiles", {}).values():
        if body and "grid" in body:
            body["grid"] = fit_grid(body["grid"], length)
    return raw


def generic_config(name: str, length: int, profile: str) -> SearchConfig:
    """:func:`generic_space` resolved for ``profile``, validated like a file's."""
    source = SPACES_DIR / f"{TEMPLATE} (fitted to L = {length})"
    return parse_search_space(generic_space(name, length), profile, source)
