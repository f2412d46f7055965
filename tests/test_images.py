"""One image decoder (focus_tune/data/images.py): an image file gives the same pixels when
`import-table` stores it and when `predict` reads it, whatever its bit depth, palette, alpha
or EXIF orientation; the built-in importers' RGB path is what it was."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageOps

from focus_tune.data import load_dataset
from focus_tune.data.__main__ import main
from focus_tune.data.images import decode, load_rgb_resized, resize_rgb
from focus_tune.predict.inputs import load_image

H, W = 6, 10  # as stored; non-square, so a turn shows


def _ramp16() -> np.ndarray:
    return (np.arange(H * W, dtype=np.uint32).reshape(H, W) * 1111).astype(np.uint16)


def _pattern(channels: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (H, W, channels) if channels > 1 else (H, W), dtype=np.uint8)


def _exif(orientation: int) -> Image.Exif:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif


def _write(kind: str, path) -> None:
    if kind == "16-bit":
        Image.fromarray(_ramp16()).save(path)  # mode I;16
    elif kind == "exif-png":
        Image.fromarray(_pattern()).save(path, exif=_exif(6))
    elif kind == "exif-jpeg":
        Image.fromarray(_pattern()).save(path, quality=95, exif=_exif(8))
    elif kind == "palette-transparent":
        image = Image.fromarray(_pattern(1) // 64 * 64).convert("P")
        image.info["transparency"] = 0
        image.save(path, transparency=0)
    elif kind == "rgba":
        rgba = _pattern(4)
        Image.fromarray(rgba, "RGBA").save(path)
    elif kind == "gray-alpha":
        Image.fromarray(_pattern(2), "LA").save(path)
    else:
        raise AssertionError(kind)


CASES = ["16-bit", "exif-png", "exif-jpeg", "palette-transparent", "rgba", "gray-alpha"]


@pytest.mark.parametrize("kind", CASES)
@pytest.mark.parametrize("resize", [False, True])
def test_an_image_gives_the_same_pixels_at_import_and_at_predict(tmp_path, kind, resize):
    src = tmp_path / "src"
    src.mkdir()
    suffix = ".jpg" if "jpeg" in kind else ".png"
    lines = ["image,sequence"]
    for i in range(3):
        _write(kind, src / f"{i}{suffix}")
        lines.append(f"{i}{suffix},a END")
    (src / "t.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "ds"
    argv = ["import-table", str(src / "t.csv"), "--event", "END", "--out", str(out)]
    if resize:
        argv += ["--image-size", "5", "7"]
    assert main(argv) == 0
    ds = load_dataset(out)
    shape = ds.manifest.image_shape
    stored = np.concatenate([ds.split(s).images for s in ("train", "val", "test")])
    predicted, _ = load_image(src / f"0{suffix}", shape)
    for pixels in stored:
        np.testing.assert_array_equal(pixels, predicted)
    if not resize and kind.startswith("exif"):
        assert shape[1:] == (W, H)  # read upright: the stored 6 x 10 turned a quarter
        with Image.open(src / f"0{suffix}") as image:
            upright = np.asarray(ImageOps.exif_transpose(image).convert("RGB")).transpose(2, 0, 1)
        np.testing.assert_array_equal(predicted, upright)
    if kind == "16-bit" and not resize:
        assert shape[0] == 1
        np.testing.assert_array_equal(predicted[0], _ramp16() >> 8)  # the top 8 bits, never saturated
        assert len(np.unique(predicted)) > 50


def test_16_bit_keeps_the_top_8_bits_in_both_channel_counts(tmp_path):
    path = tmp_path / "r.png"
    Image.fromarray(_ramp16()).save(path)
    gray = decode(path, 1)
    rgb = decode(path, 3)
    np.testing.assert_array_equal(gray[0], _ramp16() >> 8)
    np.testing.assert_array_equal(rgb, np.repeat(gray, 3, axis=0))


def test_transparency_shows_over_black(tmp_path):
    rgba = np.zeros((2, 2, 4), np.uint8)
    rgba[..., :3] = [200, 100, 50]
    rgba[..., 3] = [[0, 255], [128, 51]]
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    got = decode(tmp_path / "a.png", 3)
    expected = (rgba[..., :3].astype(int) * rgba[..., 3:] + 127) // 255
    np.testing.assert_array_equal(got, expected.transpose(2, 0, 1))
    assert got[:, 0, 0].tolist() == [0, 0, 0] and got[:, 0, 1].tolist() == [200, 100, 50]


def test_the_built_in_rgb_path_is_unchanged(tmp_path):
    """load_rgb_resized (Atari-HEAD frames, UTKFace) on plain RGB files: what the decoder
    before EXIF and alpha handling gave (convert RGB, crop, resize_rgb), bit for bit."""
    rng = np.random.default_rng(3)
    for i, (h, w, crop) in enumerate([(37, 53, False), (64, 48, True), (210, 160, False)]):
        path = tmp_path / f"{i}.jpg" if i % 2 else tmp_path / f"{i}.png"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)
        with Image.open(path) as image:
            image = image.convert("RGB")
            if crop:
                side = min(image.size)
                left, top = (image.width - side) // 2, (image.height - side) // 2
                image = image.crop((left, top, left + side, top + side))
            before = resize_rgb(np.asarray(image), 24, 20)
        np.testing.assert_array_equal(load_rgb_resized(path, 24, 20, square_crop=crop), before)
        np.testing.assert_array_equal(load_rgb_resized(path.read_bytes(), 24, 20, square_crop=crop), before)
