"""The inputs: image files, folders of images and dataset folders as the model's uint8
[C, H, W] pixels (converted, resized), the dataset items' indices and the --prefix."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import DataError, ImageError, ImageTooLarge, PredictError
from ..quote import short

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".npy")
DEFAULT_ITEMS = 5  # items of a dataset folder input when --items is not given


@dataclass
class Item:
    """One image to predict for: its name, pixels uint8 [C, H, W], and the truth when known."""

    name: str
    image: np.ndarray
    note: str | None = None  # e.g. "resized from 64x48"
    truth: dict | None = None  # sequence, time_to_event, exact_marginals (dataset items)


def parse_items(spec: str | None, n: int) -> list[int]:
    """"0-4,9" -> [0, 1, 2, 3, 4, 9]; "all" -> every index below n; None -> the first
    DEFAULT_ITEMS (fewer when the split is smaller)."""
    if spec is None:
        return list(range(min(DEFAULT_ITEMS, n)))
    if spec.strip().lower() == "all":
        return list(range(n))
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise PredictError(f"--items {short(spec)[1:-1]}: expected indices like 0-4,9 or 'all'")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise PredictError(f"--items {part}: the range runs backwards")
        out.extend(range(lo, hi + 1))
    bad = [i for i in out if i >= n]
    if bad:
        raise PredictError(f"--items {short(spec)[1:-1]}: index {bad[0]} is out of range (the split has {n} items)")
    return list(dict.fromkeys(out))


def _from_array(array: np.ndarray, shape: tuple[int, int, int], name: str,
                resize: bool) -> tuple[np.ndarray, str | None]:
    """Pixels (a .npy, a decoded image file, a dataset item), uint8 [C, H, W] or [H, W, C] with
    the model's channels, as the model's [C, H, W]: resized as the importer resizes
    (``data.images.resize_chw``: antialiased bilinear, each channel alike) unless ``resize`` is False."""
    C, H, W = shape
    if array.dtype != np.uint8 or array.ndim not in (2, 3):
        raise PredictError(f"{name}: expected uint8 pixels [C, H, W] or [H, W, C], "
                           f"got {array.dtype} {list(array.shape)}")
    if array.ndim == 2:
        array = array[None]
    if array.shape[0] not in (1, 3, 4) and array.shape[-1] in (1, 3, 4):
        array = array.transpose(2, 0, 1)
    if array.shape[0] != C:
        raise PredictError(f"{name}: {array.shape[0]} channel(s), the model reads {C}; convert the image "
                           f"(or save it as PNG/JPEG, which is converted)")
    if array.shape[1:] == (H, W):
        return np.array(array, order="C"), None  # a copy: a decoded image's buffer is read-only (torch warns)
    if not resize:
        raise PredictError(f"{name}: {array.shape[2]}x{array.shape[1]} pixels, the model reads {W}x{H} "
                           "(drop --no-resize to resize it)")
    from ..data.images import resize_chw

    return resize_chw(array, H, W), f"resized from {array.shape[2]}x{array.shape[1]} to {W}x{H}"


def load_image(path: Path, shape: tuple[int, int, int], resize: bool = True) -> tuple[np.ndarray, str | None]:
    """An image file as the model's uint8 [C, H, W], decoded as the importer decodes it
    (``data.images.decode``: EXIF orientation, 16-bit, palette and alpha alike), converted to
    its channels (RGB or grey) and resized to its size (bilinear, antialiased) unless
    ``resize`` is False; a .npy holds the pixels themselves. Raises PredictError naming the
    file otherwise."""
    C = shape[0]
    if path.suffix.lower() == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise PredictError(f"{path}: not a numpy array file ({short(str(err), 120)[1:-1]})") from None
        return _from_array(array, shape, str(path), resize)
    if C not in (1, 3):
        raise PredictError(f"{path}: the model reads {C}-channel images; give them as .npy arrays [C, H, W]")
    from ..data.images import decode

    try:
        array = decode(path, C)
    except ImageTooLarge as err:
        raise PredictError(f"{path}: too large to decode ({short(str(err), 120)[1:-1]})") from None
    except (ImageError, OSError) as err:
        raise PredictError(f"{path}: not a readable image ({short(str(err), 120)[1:-1]})") from None
    return _from_array(array, shape, str(path), resize)


def _dataset_items(folder: Path, split: str, spec: str | None, shape: tuple[int, int, int], resize: bool) -> list[Item]:
    from ..data import load_dataset

    try:
        ds = load_dataset(folder)
        data = ds.split(split)
    except DataError as err:
        raise PredictError(str(err)) from None
    out = []
    for i in parse_items(spec, len(data)):
        image, note = _from_array(data.images[i], shape, f"{folder}:{split}:{i}", resize)
        seen = len(data.sequences[i]) if data.observed_length is None else int(data.observed_length[i])
        truth = {"sequence": data.sequences[i][:seen].tolist(), "time_to_event": int(data.time_to_event[i]),
                 "censored": bool(data.censored[i]),
                 "exact_marginals": None if data.exact_marginals is None else np.asarray(data.exact_marginals[i])}
        out.append(Item(f"{folder.name}/{split}/{i}", image, note, truth))
    return out


def collect(inputs: Sequence[str], shape: tuple[int, int, int], split: str = "test", items: str | None = None,
            resize: bool = True) -> list[Item]:
    """The images named on the command line, in order (a folder's files sorted by name)."""
    out: list[Item] = []
    for text in inputs:
        path = Path(text)
        if path.is_file():
            out.append(Item(str(path), *load_image(path, shape, resize)))
        elif path.is_dir() and (path / "manifest.json").is_file():
            out.extend(_dataset_items(path, split, items, shape, resize))
        elif path.is_dir():
            files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
            if not files:
                raise PredictError(f"{path}: no image files in it ({', '.join(IMAGE_SUFFIXES)})")
            out.extend(Item(str(f), *load_image(f, shape, resize)) for f in files)
        else:
            raise PredictError(f"{text}: no such file or folder")
    return out


def parse_prefix(text: str | None, class_names: Sequence[str], length: int) -> list[int]:
    """"NOOP,RIGHT" or "0,3" -> class ids (names are matched without regard to case)."""
    if not text:
        return []
    lower = {n.lower(): i for i, n in enumerate(class_names)}
    out = []
    for part in (p.strip() for p in text.split(",")):
        if part.lower() in lower:
            out.append(lower[part.lower()])
        elif part.isdigit() and int(part) < len(class_names):
            out.append(int(part))
        else:
            raise PredictError(f"--prefix {short(text)[1:-1]}: {short(part)} is not a class; the classes are "
                               f"{', '.join(class_names[:30])}{' ...' if len(class_names) > 30 else ''} "
                               f"(or ids 0..{len(class_names) - 1})")
    if len(out) >= length:
        raise PredictError(f"--prefix has {len(out)} entries; the sequences have {length}: leave entries to predict")
    return out
