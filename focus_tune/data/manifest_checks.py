"""What a manifest.json must hold, checked once as it is read (``Manifest.from_dict``).

Two passes, each raising one DataError that names the file: ``check_field_types`` (every
field has the JSON type the code reads), then ``check_manifest`` (the parsed manifest agrees
with itself and with the rules of ``sequences``: only the event absorbing, the condition
class not the event). Below ``manifest``, which calls them, so they take its parsed
``Manifest`` without importing it.
"""
from __future__ import annotations

import math
import re
from typing import Any

from ..errors import DataError
from ..quote import short
from .dataset_format import SPLITS
from .sequences import CENSOR_INSTEAD, CONDITION_NOT_EVENT, ONLY_EVENT_ABSORBING

_SHA256 = re.compile(r"[0-9a-f]{64}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_field_types(raw: dict[str, Any], where: str) -> None:
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


def check_manifest(m: Any, raw: dict[str, Any], where: str) -> None:
    """The parsed manifest ``m`` (a ``manifest.Manifest``, which imports this module) agrees with
    itself: class ids in range, only the event absorbing, one size, file and count per split;
    one DataError naming ``where`` and every problem found if not."""
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
    if (not isinstance(m.splits, dict) or set(m.splits) != set(SPLITS)
            or any(not isinstance(n, int) or n < 1 for n in m.splits.values())):
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
