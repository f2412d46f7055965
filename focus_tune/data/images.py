"""The one image decoder: image files (or bytes) as uint8 [C, H, W] pixels, for the built-in
importers (Atari-HEAD frames, UTKFace), one's own data (`import-table`) and `predict`, so
that an image gives the same pixels at import and at prediction. Pillow.

The rules, in order (docs/DATA.md, "Images"):

1. EXIF orientation applied (``PIL.ImageOps.exif_transpose``): a phone photo stored sideways
   is read upright; sizes are the upright ones.
2. More than 8 bits per pixel (16-bit grayscale PNG, mode I;16 or I): the top 8 bits,
   ``value >> 8`` clipped to 0-255; a float image (F): its values clipped to 0-255.
3. Transparency (LA, RGBA, PA, a palette or a grayscale with a transparent colour): the image
   as it shows over black, ``(value * alpha + 127) // 255``; a transparent pixel is black
   whatever colour it stores.
4. Other modes (palette, bilevel, CMYK, YCbCr...) to grayscale or RGB by Pillow.
5. Channels: grayscale to RGB repeats the plane; RGB to grayscale is Pillow's ITU-R 601-2 luma
   (``convert("L")``).
6. Size: antialiased bilinear (Pillow's BILINEAR, ``reducing_gap=2.0``) to (height, width).
"""
from __future__ import annotations

import io
import os
from collections import Counter

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ..errors import ImageError, ImageTooLarge

MAX_PIXELS = 4096 * 4096  # a larger image is refused before it is decoded (a decompression bomb)
WIDE_MODES = {"I", "I;16", "I;16B", "I;16L", "I;16N", "F"}  # more than 8 bits per pixel
GRAY_MODES = {"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"}
_ORIENTATION = 0x0112  # EXIF tag
_TURNED = {5, 6, 7, 8}  # orientations that swap width and height
DECODE_ERRORS = (OSError, UnidentifiedImageError, ValueError, SyntaxError, Image.DecompressionBombError,
                 EOFError)


def resize_rgb(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """Area-style (antialiased bilinear) resize of one RGB frame: uint8 [H, W, 3] -> [3, height, width]."""
    image = Image.fromarray(np.ascontiguousarray(frame, dtype=np.uint8))
    if image.size != (width, height):
        image = image.resize((width, height), Image.Resampling.BILINEAR, reducing_gap=2.0)
    return np.asarray(image, dtype=np.uint8).transpose(2, 0, 1)


def resize_chw(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 [C, H, W] -> [C, height, width], antialiased bilinear (each channel alike; RGB
    through :func:`resize_rgb`); the pixels themselves (a C-ordered copy) when the size is right."""
    pixels = np.asarray(pixels, dtype=np.uint8)
    if pixels.shape[1:] == (height, width):
        return np.array(pixels, order="C")
    if pixels.shape[0] == 3:
        return resize_rgb(pixels.transpose(1, 2, 0), height, width)
    planes = [np.asarray(Image.fromarray(np.ascontiguousarray(p)).resize(
        (width, height), Image.Resampling.BILINEAR, reducing_gap=2.0), dtype=np.uint8) for p in pixels]
    return np.stack(planes)


def orientation(image: Image.Image) -> int:
    """The EXIF orientation (1-8; 1: upright) as far as the header tells without decoding
    (a PNG's eXIf chunk after its pixels is seen only by :func:`pixels`)."""
    try:
        if image.format == "PNG" and "exif" not in image.info:
            return 1  # getexif() would decode the whole image to look for a late eXIf chunk
        value = image.getexif().get(_ORIENTATION, 1)
    except DECODE_ERRORS:
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def upright_size(image: Image.Image) -> tuple[int, int]:
    """(H, W) of an opened image once its EXIF orientation is applied, from its header."""
    if orientation(image) in _TURNED:
        return image.width, image.height
    return image.height, image.width


def is_gray(mode: str) -> bool:
    """Whether an image of this Pillow mode is grayscale (a palette counts as colour)."""
    return mode in GRAY_MODES


def pixels(image: Image.Image, channels: int) -> np.ndarray:
    """An opened image as uint8 [channels, H, W] (channels 1 or 3) by the module's rules 1-5,
    at its upright size. Raises what Pillow raises on a broken file."""
    if channels not in (1, 3):
        raise ImageError(f"{channels} channels: the decoder writes 1 (grayscale) or 3 (RGB)")
    image.load()
    upright = ImageOps.exif_transpose(image)
    image = upright if upright is not None else image
    if image.mode in WIDE_MODES:
        values = np.asarray(image)
        if image.mode == "F":
            eight = np.clip(np.nan_to_num(values.astype(np.float64)), 0, 255).astype(np.uint8)
        else:
            eight = np.clip(values.astype(np.int64) >> 8, 0, 255).astype(np.uint8)
        image = Image.fromarray(eight, "L")
    if image.mode not in ("L", "RGB") or image.has_transparency_data:
        gray = is_gray(image.mode)
        if image.has_transparency_data:
            rgba = np.asarray(image.convert("LA" if gray else "RGBA"), dtype=np.uint16)
            shown = (rgba[..., :-1] * rgba[..., -1:] + 127) // 255
            array = shown.astype(np.uint8)
            array = array[..., 0] if gray else array
            image = Image.fromarray(array, "L" if gray else "RGB")
        else:
            image = image.convert("L" if gray else "RGB")
    if image.mode == "RGB" and channels == 1:
        image = image.convert("L")
    array = np.asarray(image, dtype=np.uint8)
    if array.ndim == 2:
        return np.repeat(array[None], channels, axis=0)
    return np.ascontiguousarray(array.transpose(2, 0, 1))


def decode(source: str | os.PathLike | bytes, channels: int, size: tuple[int, int] | None = None,
           square_crop: bool = False) -> np.ndarray:
    """Decode an image file (path or bytes) to uint8 [channels, H, W] by the module's rules:
    at ``size`` (H, W) when given (antialiased bilinear), else its upright size; square_crop
    takes the central square first. Raises ImageTooLarge (more than MAX_PIXELS, not decoded),
    FileNotFoundError, or ImageError saying why it is unreadable."""
    try:
        handle = io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")
        with handle, Image.open(handle) as image:
            if image.width * image.height > MAX_PIXELS:
                raise ImageTooLarge(f"{image.width}x{image.height} pixels, more than {MAX_PIXELS}")
            out = pixels(image, channels)
    except (ImageError, FileNotFoundError):
        raise
    except Image.DecompressionBombError as err:  # Pillow's own limit, met before ours for some formats
        raise ImageTooLarge(" ".join(str(err).split())) from None
    except DECODE_ERRORS as err:
        raise ImageError(" ".join(str(err).split()) or type(err).__name__) from None
    if square_crop:
        side = min(out.shape[1:])
        top, left = (out.shape[1] - side) // 2, (out.shape[2] - side) // 2
        out = out[:, top:top + side, left:left + side]
    return out if size is None else resize_chw(out, *size)


def load_rgb_resized(source: str | os.PathLike | bytes, height: int, width: int,
                     square_crop: bool = False, skipped: Counter | None = None) -> np.ndarray | None:
    """Decode an image file (path or bytes) to uint8 [3, height, width] (:func:`decode`); None
    if unreadable.

    square_crop takes the central square first, so faces keep their proportions. An image
    whose header claims more than MAX_PIXELS pixels is not decoded: None, and
    ``skipped["too_large"]`` is counted when ``skipped`` is given.
    """
    try:
        return decode(source, 3, (height, width), square_crop=square_crop)
    except ImageTooLarge:
        if skipped is not None:
            skipped["too_large"] += 1
        return None
    except (ImageError, OSError):
        return None
