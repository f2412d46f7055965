"""Image decoding and resizing shared by the importers and the emulator (Pillow)."""
from __future__ import annotations

import io
import os
from collections import Counter

import numpy as np
from PIL import Image, UnidentifiedImageError


def resize_rgb(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """Area-style (antialiased bilinear) resize of one RGB frame: uint8 [H, W, 3] -> [3, height, width]."""
    image = Image.fromarray(np.ascontiguousarray(frame, dtype=np.uint8))
    if image.size != (width, height):
        image = image.resize((width, height), Image.Resampling.BILINEAR, reducing_gap=2.0)
    return np.asarray(image, dtype=np.uint8).transpose(2, 0, 1)


MAX_PIXELS = 4096 * 4096  # a larger image is refused before it is decoded (a decompression bomb)


def load_rgb_resized(source: str | os.PathLike | bytes, height: int, width: int,
                     square_crop: bool = False, skipped: Counter | None = None) -> np.ndarray | None:
    """Decode an image file (path or bytes) to uint8 [3, height, width]; None if unreadable.

    square_crop takes the central square first, so faces keep their proportions. An image
    whose header claims more than MAX_PIXELS pixels is not decoded: None, and
    ``skipped["too_large"]`` is counted when ``skipped`` is given.
    """
    try:
        handle = io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")
        with handle, Image.open(handle) as image:
            if image.width * image.height > MAX_PIXELS:
                if skipped is not None:
                    skipped["too_large"] += 1
                return None
            image = image.convert("RGB")
            if square_crop:
                side = min(image.size)
                left, top = (image.width - side) // 2, (image.height - side) // 2
                image = image.crop((left, top, left + side, top + side))
            return resize_rgb(np.asarray(image), height, width)
    except Image.DecompressionBombError:  # Pillow's own limit, met before ours for some formats
        if skipped is not None:
            skipped["too_large"] += 1
        return None
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError):
        return None
