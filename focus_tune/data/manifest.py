"""A dataset's manifest: what its folder holds (``Manifest``), read and checked (``read_manifest``),
and the Arrow type each of its columns must have (``split_schema``)."""
from __future__ import annotations

import json
import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..errors import DataError
from ..quote import short
from .dataset_format import FORMAT_VERSION, MANIFEST, MAX_MANIFEST_BYTES
from .manifest_checks import check_field_types, check_manifest


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
        check_field_types(raw, where)
        kwargs = {k: raw[k] for k in names if k in raw}
        kwargs["image_shape"] = tuple(raw["image_shape"])
        manifest = cls(**kwargs)
        check_manifest(manifest, raw, where)
        return manifest


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
