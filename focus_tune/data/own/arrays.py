"""Arrays of one's own in an ``.npz`` into the store format: ``python -m focus_tune.data import-arrays``."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ...errors import DataError
from ...quote import short
from ..dataset_format import STANDARD_COLUMNS
from .write import check_out, default_name, file_info, write_core


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
    name = default_name(out, name, "--name")
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
    details = {"command": command, "arrays": file_info(path, "npz"), "extras": sorted(extras),
               "ignored_arrays": ignored}
    where = lambda r: f"{path}: sequences[{r}]"  # noqa: E731
    try:
        return write_core(out, images=arrays["images"], sequences=arrays["sequences"], classes=names,
                          event=event, absorbing=absorbing, splits=splits, groups=groups,
                          seed=seed, name=name, condition=condition, extras=extras,
                          exact_marginals=arrays.get("exact_marginals"),
                          source=f"arrays {path.resolve()}", details=details, generator="import-arrays",
                          where=where)
    except DataError as err:
        message = str(err)
        raise DataError(message if message.startswith(str(path)) else f"{path}: {message}") from None
