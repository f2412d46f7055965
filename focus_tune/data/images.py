"""Image decoding and resizing shared by the importers and the emulator (Pillow)."""
from __future__ import annotations

import io
import os

import numpy as np
from PIL import Image, UnidentifiedImageError


def resize_rgb(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """Area-style (antialiased bilinear) resize of one RGB frame: uint8 [H, W, 3] -> [3, height, width]."""
    image = Image.fromarray(np.ascontiguousarray(frame, dtype=np.uint8))
    if image.size != (width, height):
        image = image.resize((width, height), Image.Resampling.BILINEAR, reducing_gap=2.0)
    return np.asarray(image, dtype=np.uint8).transpose(2, 0, 1)


def load_rgb_resized(source: str | os.PathLike | bytes, height: int, width: int,
                     square_crop: bool = False) -> np.ndarray | None:
    """Decode an image file (path or bytes) to uint8 [3, height, width]; None if unreadable.

    square_crop takes the central square first, so faces keep their proportions.
    """
    try:
        handle = io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")
        with handle, Image.open(handle) as image:
            image = image.convert("RGB")
            if square_crop:
                side = min(image.size)
                left, top = (image.width - side) // 2, (image.height - side) // 2
                image = image.crop((left, top, left + side, top + side))
            return resize_rgb(np.asarray(image), height, width)
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError):
        return None
