"""A user's own data: write_dataset, `import-table` (CSV, Parquet) and `import-arrays`.

Round trips check that what load_dataset returns is what was written (sequences padded after
an absorbing class, censored items' observed_length and time to event, split sizes); every
bad input fails with exit 2, one stderr line naming the file and the row, and no folder.
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from focus_tune.data import describe_dataset, load_dataset, read_manifest, write_dataset
from focus_tune.data.__main__ import main
from focus_tune.data.dataset_format import sha256_file
from focus_tune.data.sequences import censored_items
from focus_tune.errors import DataError

H, W = 12, 20  # non-square on purpose

# (sequence as written, expected stored sequence over L = 5 with a, b, END = 0, 1, 2,
#  observed_length, time to event, censored)
ROWS = [
    ("a a b b a", [0, 0, 1, 1, 0], 5, 5, False),   # full length, no event: T = L, not censored
    ("a b END", [0, 1, 2, 2, 2], 5, 3, False),     # padded with the absorbing event
    ("a b", [0, 1, 1, 1, 1], 2, 2, True),          # censored at its last entry
    ("END", [2, 2, 2, 2, 2], 5, 1, False),
    ("b", [1, 1, 1, 1, 1], 1, 1, True),
    ("a a a a END", [0, 0, 0, 0, 2], 5, 5, False),
    ("b a END END", [1, 0, 2, 2, 2], 5, 3, False),
    ("a b a", [0, 1, 0, 0, 0], 3, 3, True),
    ("b b b b b", [1, 1, 1, 1, 1], 5, 5, False),
    ("a END", [0, 2, 2, 2, 2], 5, 2, False),
]


def _png(path, value: int, size=(H, W), mode="L"):
    pixels = np.full((*size, 3) if mode == "RGB" else size, value, np.uint8)
    pixels[0, 0] = 255 - value  # not flat: the orientation shows
    Image.fromarray(pixels, mode).save(path)


def _table_folder(tmp_path, rows=ROWS, extra=None):
    """images/IMG.png (grayscale, H x W) and items.csv: image, sequence, subject, score."""
    folder = tmp_path / "src"
    (folder / "images").mkdir(parents=True)
    lines = ["image,sequence,subject,score,note"]
    for i, row in enumerate(rows):
        _png(folder / "images" / f"{i}.png", 10 * i)
        lines.append(f"images/{i}.png,{row[0]},{i // 2},{i * 0.5},text{i}")
    (folder / "items.csv").write_text("\n".join(lines) + "\n")
    return folder


def _by_value(split):
    """Each item keyed by its image's fill value (10 * row)."""
    return {int(img[0, 1, 1]) // 10: i for i, img in enumerate(split.images)}


def test_png_csv_round_trip_with_censored_items(tmp_path, capsys):
    src = _table_folder(tmp_path)
    out = tmp_path / "mine"
    assert main(["import-table", str(src / "items.csv"), "--out", str(out), "--event", "END"]) == 0
    printed = capsys.readouterr().out
    assert "importer       import-table" in printed and "entries unobserved" in printed
    ds = load_dataset(out)
    m = ds.manifest
    assert m.name == "mine" and m.game is None and m.scenario == "mine" and m.censored
    assert m.class_names == ["END", "a", "b"]  # sorted as seen
    assert m.image_shape == (1, H, W) and m.length == 5
    assert sum(m.splits.values()) == len(ROWS) and m.splits == {"train": 7, "val": 2, "test": 1}
    ids = {c: i for i, c in enumerate(m.class_names)}
    names = ["a", "b", "END"]
    seen = set()
    for split in ("train", "val", "test"):
        s = ds.split(split)
        for row, i in _by_value(s).items():
            text, expected, observed, tte, censored = ROWS[row]
            seen.add(row)
            assert s.sequences[i, :observed].tolist() == [ids[names[c]] for c in expected[:observed]], row
            assert s.observed_length[i] == observed and s.time_to_event[i] == tte, row
            assert bool(s.censored[i]) == censored, row
            assert s.extras["subject"][i] == row // 2 and s.extras["score"][i] == pytest.approx(row * 0.5)
            assert "note" not in s.extras
            assert s.images[i, 0, 0, 0] == 255 - 10 * row  # the pixel order survived
    assert seen == set(range(len(ROWS)))
    details = m.details
    assert details["censored_items"] == 3 and details["cut_short_items"] == 3
    assert details["unobserved_entries"] == 3 + 4 + 2
    assert details["table"]["sha256"] == sha256_file(src / "items.csv")
    assert details["table"]["path"] == str((src / "items.csv").resolve())
    assert details["command"].startswith("python -m focus_tune.data import-table ")
    assert details["split"]["rule"].startswith("seeded random 70/20/10") and details["split"]["seed"] == 0
    assert details["ignored_columns"] == ["note"]
    assert sum(m.stats[s]["censored_items"] for s in m.stats) == 3

    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mean time-to-event" in text and "entries" in text and " s\n" not in text
    assert "censored_items 3" in text and "sampling freq" not in text


def test_classes_order_condition_and_lost_items_censored_at_their_lost_entry(tmp_path):
    """LOST is not absorbing: a sequence ending in LOST is censored there (the documented way)."""
    rows = [("a b", None), ("a LOST", None), ("b a END", None), ("a", None), ("b LOST", None)]
    src = _table_folder(tmp_path, rows)
    out = tmp_path / "mine"
    assert main(["import-table", str(src / "items.csv"), "--out", str(out), "--event", "END",
                 "--absorbing", "END", "--classes", "a", "b", "LOST", "END", "--condition", "b",
                 "--length", "4"]) == 0
    ds = load_dataset(out)
    m = ds.manifest
    assert m.class_names == ["a", "b", "LOST", "END"] and m.event_class == 3 and m.condition_class == 1
    assert m.absorbing == [3] and m.length == 4
    rows_back = {}
    for split in ("train", "val", "test"):
        s = ds.split(split)
        for row, i in _by_value(s).items():
            rows_back[row] = (s.sequences[i].tolist(), int(s.observed_length[i]), int(s.time_to_event[i]),
                              bool(s.censored[i]))
    assert rows_back[1] == ([0, 2, 2, 2], 2, 2, True)  # censored at its LOST entry: T > 2
    assert rows_back[2] == ([1, 0, 3, 3], 4, 3, False)
    assert rows_back[0][1:] == (2, 2, True) and rows_back[3][1:] == (1, 1, True)


def test_an_absorbing_class_other_than_the_event_is_refused(tmp_path, capsys):
    src = _table_folder(tmp_path, [("a b", None), ("a LOST", None), ("b a END", None)])
    line = _refused(capsys, tmp_path, ["import-table", str(src / "items.csv"), "--event", "END",
                                       "--absorbing", "END", "LOST"],
                    "--absorbing LOST: only the event (END) may be absorbing", "forced mode", "exact row",
                    "censored there", "observed_length")
    assert str(src) not in line or "row" not in line  # refused from the flags, before any image is read
    _, chw, seqs = _arrays()
    with pytest.raises(DataError, match="absorbing down: only the event"):
        write_dataset(tmp_path / "w", images=chw, sequences=seqs, classes=["up", "down", "crash"], event="crash",
                      absorbing=["crash", "down"])
    assert not (tmp_path / "w").exists()
    for k, absorbing in enumerate((None, ["crash"], [2])):
        out = write_dataset(tmp_path / f"ok{k}", images=chw,
                            sequences=seqs, classes=["up", "down", "crash"], event="crash", absorbing=absorbing)
        assert read_manifest(out).absorbing_classes == [2]


def test_the_condition_class_is_never_the_event(tmp_path, capsys):
    src = _table_folder(tmp_path, [("a b", None), ("a END", None), ("b a END", None)])
    _refused(capsys, tmp_path, ["import-table", str(src / "items.csv"), "--event", "END", "--condition", "END"],
             "--condition END is the event")
    _, chw, seqs = _arrays()
    with pytest.raises(DataError, match="condition crash is the event"):
        write_dataset(tmp_path / "w", images=chw, sequences=seqs, classes=["up", "down", "crash"], event="crash",
                      condition=2)
    seqs[:] = 2  # every item absorbed at entry 1: the default condition class would be the event
    with pytest.raises(DataError, match="every item starts with the event"):
        write_dataset(tmp_path / "w", images=chw, sequences=seqs, classes=["up", "down", "crash"], event="crash")
    assert list(tmp_path.iterdir()) == [tmp_path / "src"]


@pytest.mark.parametrize("field, value, message", [
    ("absorbing", [0, 2], "absorbing up: only the event (crash) may be absorbing"),
    ("condition_class", 2, "condition_class 2 is the event class"),
])
def test_a_manifest_with_another_absorbing_class_or_the_event_as_condition_is_refused(tmp_path, field, value,
                                                                                       message):
    _, chw, seqs = _arrays()
    out = write_dataset(tmp_path / "ds", images=chw, sequences=seqs, classes=["up", "down", "crash"], event="crash")
    raw = json.loads((out / "manifest.json").read_text())
    raw[field] = value
    (out / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(DataError) as err:
        load_dataset(out)
    assert message in str(err.value) and len(str(err.value).splitlines()) == 1


def test_group_split_keeps_groups_together(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    lines = ["image,sequence,patient"]
    for i in range(40):
        _png(folder / f"{i}.png", i)
        lines.append(f"{i}.png,{'a ' * (i % 4)}END,p{i % 10}")
    (folder / "t.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "grouped"
    assert main(["import-table", str(folder / "t.csv"), "--out", str(out), "--event", "END",
                 "--group-column", "patient", "--seed", "3"]) == 0
    ds = load_dataset(out)
    assert not ds.manifest.censored and ds.train.observed_length is None
    where = {}
    for split in ("train", "val", "test"):
        for img in ds.split(split).images:
            where.setdefault(f"p{int(img[0, 1, 1]) % 10}", set()).add(split)
    assert all(len(s) == 1 for s in where.values()) and len(where) == 10
    info = ds.manifest.details["split"]
    assert info["groups"] == {"train": 7, "val": 2, "test": 1} and info["seed"] == 3
    assert ds.manifest.splits == {"train": 28, "val": 8, "test": 4}
    assert "patient" in info["rule"]


def test_parquet_list_column_given_splits_and_rgb(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    paths, seqs, splits = [], [], []
    for i in range(6):
        _png(folder / f"{i}.png", 20 * i, size=(8, 6), mode="RGB")
        paths.append(str(folder / f"{i}.png"))  # absolute paths
        seqs.append([["go"], ["go", "stop"], ["go", "go", "wait"]][i % 3])
        splits.append(["train", "train", "train", "val", "test", "test"][i])
    pq.write_table(pa.table({"img": paths, "seq": seqs, "fold": splits, "weight": np.arange(6.0)}),
                   folder / "items.parquet")
    out = tmp_path / "pq"
    assert main(["import-table", str(folder / "items.parquet"), "--out", str(out), "--event", "stop",
                 "--image-column", "img", "--sequence-column", "seq", "--split-column", "fold",
                 "--name", "my_data.v1"]) == 0
    ds = load_dataset(out)
    m = ds.manifest
    assert m.name == "my_data.v1" and m.image_shape == (3, 8, 6) and m.splits == {"train": 3, "val": 1, "test": 2}
    assert m.class_names == ["go", "stop", "wait"] and m.length == 3 and m.censored
    s = ds.train  # rows 0, 1, 2 (their images' fill value is 20 * row)
    by = {row // 2: i for row, i in _by_value(s).items()}
    assert s.sequences[by[0]][0] == 0 and s.observed_length[by[0]] == 1 and s.censored[by[0]]
    assert s.sequences[by[1]].tolist() == [0, 1, 1] and s.time_to_event[by[1]] == 2
    assert s.sequences[by[2]].tolist() == [0, 0, 2] and s.observed_length[by[2]] == 3
    assert m.details["split"]["rule"] == "given (column 'fold')"
    assert m.details["table"]["format"] == "parquet"


def test_mixed_sizes_resized_with_image_size_and_channels(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    lines = ["image,sequence"]
    for i in range(5):
        _png(folder / f"{i}.png", 40 * i, size=(10 + i, 14), mode="RGB" if i == 2 else "L")
        lines.append(f"{i}.png,x y")
    (folder / "t.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "resized"
    assert main(["import-table", str(folder / "t.csv"), "--out", str(out), "--event", "y",
                 "--image-size", "9", "7"]) == 0
    m = read_manifest(out)
    assert m.image_shape == (3, 9, 7)  # one colour image: 3 channels
    out1 = tmp_path / "gray"
    assert main(["import-table", str(folder / "t.csv"), "--out", str(out1), "--event", "y",
                 "--image-size", "9", "7", "--channels", "1"]) == 0
    assert read_manifest(out1).image_shape == (1, 9, 7)


def _arrays(n=12, L=4, hwc=False):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, 3, 5, 7), dtype=np.uint8)
    seqs = rng.integers(0, 2, (n, L))
    seqs[0] = [0, 2, -1, -1]   # the event: padded
    seqs[1] = [1, 0, -1, -1]   # censored at 2
    seqs[2] = [1, -1, -1, -1]  # censored at 1
    return (images.transpose(0, 2, 3, 1) if hwc else images), images, seqs


@pytest.mark.parametrize("hwc", [False, True])
def test_import_arrays_hwc_and_chw(tmp_path, hwc):
    given, chw, seqs = _arrays(hwc=hwc)
    file = tmp_path / "items.npz"
    groups = np.arange(12) // 3
    np.savez(file, images=given, sequences=seqs, classes=np.array(["up", "down", "crash"]), groups=groups,
             speed=np.linspace(0, 1, 12), matrix=np.zeros((12, 2)))
    out = tmp_path / "arr"
    assert main(["import-arrays", str(file), "--out", str(out), "--event", "crash"]) == 0
    ds = load_dataset(out)
    m = ds.manifest
    assert m.image_shape == (3, 5, 7) and m.class_names == ["up", "down", "crash"] and m.censored
    assert m.details["arrays"]["sha256"] == sha256_file(file) and m.details["ignored_arrays"] == ["matrix"]
    found = {}
    for split in ("train", "val", "test"):
        s = ds.split(split)
        for i, speed in enumerate(s.extras["speed"]):
            found[int(round(speed * 11))] = (s, i)
    assert len(found) == 12
    for item in range(12):
        s, i = found[item]
        np.testing.assert_array_equal(s.images[i], chw[item])
    s, i = found[0]
    assert s.sequences[i].tolist() == [0, 2, 2, 2] and s.observed_length[i] == 4 and s.time_to_event[i] == 2
    s, i = found[1]
    assert s.observed_length[i] == 2 and s.time_to_event[i] == 2 and s.censored[i]
    s, i = found[2]
    assert s.observed_length[i] == 1 and s.censored[i]
    assert m.details["split"]["groups"] == {"train": 2, "val": 1, "test": 1}


def test_write_dataset_api(tmp_path):
    _, chw, seqs = _arrays()
    splits = np.array(["train"] * 8 + ["val"] * 2 + ["test"] * 2)
    out = write_dataset(tmp_path / "api", images=chw, sequences=seqs, classes=["up", "down", "crash"],
                        event=2, splits=splits, condition="down", extras={"k": np.arange(12)},
                        details={"note": "mine"})
    ds = load_dataset(out)
    m = ds.manifest
    assert m.splits == {"train": 8, "val": 2, "test": 2} and m.condition_class == 1
    assert m.details["note"] == "mine" and m.details["split"]["rule"] == "given per item"
    assert m.source == "arrays given to focus_tune.data.write_dataset" and m.generator == "write_dataset"
    np.testing.assert_array_equal(ds.train.extras["k"], np.arange(8))
    np.testing.assert_array_equal(ds.train.time_to_event[:3], [2, 2, 1])
    assert ds.train.censored[:3].tolist() == [False, True, True]
    assert censored_items(ds.train.sequences, 2, ds.train.observed_length).sum() == m.stats["train"]["censored_items"]


def test_write_dataset_without_censoring_has_no_observed_length(tmp_path):
    _, chw, seqs = _arrays()
    seqs[1:3] = [0, 0, 0, 1]
    out = write_dataset(tmp_path / "full", images=chw, sequences=seqs, classes=["up", "down", "crash"],
                        event="crash")
    m = read_manifest(out)
    assert not m.censored and m.details["censored_items"] == 0 and m.details["padded_items"] >= 1
    assert "observed_length" not in pq.read_schema(out / "train.parquet").names


def test_write_dataset_with_exact_marginals(tmp_path):
    _, chw, seqs = _arrays()
    marginals = np.full((12, 4, 3), 1 / 3, np.float32)
    out = write_dataset(tmp_path / "truth", images=chw, sequences=seqs, classes=["up", "down", "crash"],
                        event="crash", exact_marginals=marginals)
    ds = load_dataset(out)
    assert ds.manifest.has_exact_marginals and ds.test.exact_marginals.shape == (len(ds.test), 4, 3)
    assert "exact_marginals stored" in describe_dataset(out) and "censored" in describe_dataset(out)
    marginals[7, 2] = [0.5, 0.5, 0.5]
    with pytest.raises(DataError, match=r"sequences\[7\]: exact_marginals at entry 3"):
        write_dataset(tmp_path / "bad", images=chw, sequences=seqs, classes=["up", "down", "crash"],
                      event="crash", exact_marginals=marginals)
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("sequences, message", [
    ([[0, -1, 1, -1]], "sequences[0]: entry 3 (down) follows an unobserved entry (-1)"),
    ([[-1, -1, -1, -1]], "sequences[0]: empty sequence"),
    ([[0, 2, 1, -1]], "sequences[0]: entry 3 (down) follows the absorbing class crash (entry 2)"),
    ([[0, 3, 1, -1]], "sequences[0]: entry 2 is 3, not a class id in [0, 3)"),
])
def test_write_dataset_refuses_bad_sequences(tmp_path, sequences, message):
    _, chw, seqs = _arrays()
    seqs[5] = sequences[0]
    with pytest.raises(DataError) as err:
        write_dataset(tmp_path / "bad", images=chw, sequences=seqs, classes=["up", "down", "crash"], event="crash")
    assert message.replace("[0]", "[5]") in str(err.value)
    assert not (tmp_path / "bad").exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["hero", "FaceMed", "-x", "a b", "../up"])
def test_names_of_built_in_games_and_unsafe_names_are_refused(tmp_path, name):
    _, chw, seqs = _arrays()
    with pytest.raises(DataError, match="name"):
        write_dataset(tmp_path / "x", images=chw, sequences=seqs, classes=["up", "down", "crash"], event=2, name=name)
    assert list(tmp_path.iterdir()) == []


def test_the_out_folder_name_must_be_safe_without_name(tmp_path, capsys):
    src = _table_folder(tmp_path)
    assert main(["import-table", str(src / "items.csv"), "--out", str(tmp_path / "hero"), "--event", "END"]) == 2
    err = capsys.readouterr().err
    assert "'hero' is a built-in scenario's name" in err and not (tmp_path / "hero").exists()


# ----------------------------------------------------------------------------- bad input


def _refused(capsys, tmp_path, argv, *needles):
    out = tmp_path / "out"
    code = main([*argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    return lines[0]


def _write_csv(folder, rows, header="image,sequence"):
    folder.mkdir(exist_ok=True)
    (folder / "t.csv").write_text("\n".join([header, *rows]) + "\n")
    return folder / "t.csv"


def _images(folder, n, size=(H, W)):
    folder.mkdir(exist_ok=True)
    for i in range(n):
        _png(folder / f"{i}.png", i, size=size)


def test_missing_image_names_row_and_path(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 3)
    table = _write_csv(src, ["0.png,a END", "1.png,a", "nothere.png,a", "2.png,END"])
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END"],
             str(table), "row 3", str(src / "nothere.png"), "not found")


def test_unreadable_image_names_row_and_path(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 3)
    (src / "bad.png").write_bytes(b"not a png at all")
    table = _write_csv(src, ["0.png,a END", "1.png,a", "2.png,END", "bad.png,a"])
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END"],
             str(table), "row 4", str(src / "bad.png"), "unreadable")


def test_truncated_image_names_row_and_path(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 3)
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64), dtype=np.uint8)).save(src / "big.png")
    (src / "cut.png").write_bytes((src / "big.png").read_bytes()[:300])
    table = _write_csv(src, ["0.png,a END", "cut.png,a", "1.png,a", "2.png,END"])
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END", "--image-size", "8", "8"],
             str(table), "row 2", "cut.png", "unreadable")


def test_mixed_sizes_without_image_size(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 3)
    _png(src / "odd.png", 5, size=(7, 9))
    table = _write_csv(src, ["0.png,a END", "1.png,a", "odd.png,a", "2.png,END"])
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END"],
             str(table), "row 3: 7x9", "row 1: 12x20", "--image-size")


def test_class_not_in_classes(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 4)
    table = _write_csv(src, ["0.png,a END", "1.png,a", "2.png,a b c", "3.png,END"])
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END", "--classes", "a", "b", "END"],
             str(table), "row 3", "class 'c' (entry 3)", "--classes")


def test_sequence_longer_than_length(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 4)
    table = _write_csv(src, ["0.png,a END", "1.png,a", "2.png,a b a b", "3.png,END"])
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END", "--length", "3"],
             str(table), "row 3", "4 entries", "--length 3", "--truncate")
    out = tmp_path / "cut"
    assert main(["import-table", str(table), "--event", "END", "--length", "3", "--truncate", "--out", str(out)]) == 0
    m = read_manifest(out)
    assert m.length == 3 and m.details["truncated_items"] == 1


def test_class_after_an_absorbing_class(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 4)
    table = _write_csv(src, ["0.png,a END", "1.png,a", "2.png,END", "3.png,a END a"])
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END"],
             str(table), "row 4", "entry 3 (a) follows the absorbing class END (entry 2)")


def test_empty_split(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 4)
    table = _write_csv(src, ["0.png,a END,train", "1.png,a,train", "2.png,END,test", "3.png,a,test"],
                       header="image,sequence,fold")
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END", "--split-column", "fold"],
             str(table), "split(s) val would be empty")


def test_too_few_groups_is_an_empty_split(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 4)
    table = _write_csv(src, ["0.png,a END,x", "1.png,a,x", "2.png,END,y", "3.png,a,y"], header="image,sequence,g")
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END", "--group-column", "g"],
             str(table), "2 groups", "empty split")


def test_bad_split_value_names_the_row(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 4)
    table = _write_csv(src, ["0.png,a END,train", "1.png,a,val", "2.png,END,tset", "3.png,a,test"],
                       header="image,sequence,fold")
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END", "--split-column", "fold"],
             str(table), "row 3", "'tset'")


@pytest.mark.parametrize("flag, column", [("--image-column", "img"), ("--sequence-column", "seq"),
                                          ("--split-column", "fold"), ("--group-column", "who")])
def test_table_without_the_named_column(tmp_path, capsys, flag, column):
    src = tmp_path / "src"
    _images(src, 3)
    table = _write_csv(src, ["0.png,a END", "1.png,a", "2.png,END"])
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END", flag, column],
             str(table), f"no column {column!r}", flag, "image, sequence")


def test_empty_sequence(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 4)
    table = _write_csv(src, ["0.png,a END", "1.png,a", '2.png,""', "3.png,END"])
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END"],
             str(table), "row 3", "empty sequence")


@pytest.mark.parametrize("content", [b"", b"PAR1 not really parquet", b"a,b\n1,2,3,4\n"])
def test_unreadable_table(tmp_path, capsys, content):
    src = tmp_path / "src"
    src.mkdir()
    table = src / "t.csv"
    table.write_bytes(content)
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END"], str(table), "unreadable table")


def test_missing_table(tmp_path, capsys):
    _refused(capsys, tmp_path, ["import-table", str(tmp_path / "none.csv"), "--event", "END"],
             str(tmp_path / "none.csv"), "no such table file")


def test_event_not_seen_and_not_in_classes(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 3)
    table = _write_csv(src, ["0.png,a END", "1.png,a", "2.png,END"])
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "ENDD"], "--event ENDD", "--classes")
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END", "--classes", "a", "END",
                                "--condition", "b"], "--condition b", "not one of --classes")


def test_import_arrays_errors_name_the_file(tmp_path, capsys):
    _, chw, seqs = _arrays()
    seqs[4] = [0, -1, 1, -1]
    file = tmp_path / "a.npz"
    np.savez(file, images=chw, sequences=seqs, classes=np.array(["up", "down", "crash"]))
    _refused(capsys, tmp_path, ["import-arrays", str(file), "--event", "crash"],
             str(file), "sequences[4]: entry 3 (down) follows an unobserved entry")
    np.savez(file, images=chw[:, :2], sequences=seqs)
    _refused(capsys, tmp_path, ["import-arrays", str(file), "--event", "crash"], str(file), "'classes'")
    (tmp_path / "b.npz").write_bytes(b"junk")
    _refused(capsys, tmp_path, ["import-arrays", str(tmp_path / "b.npz"), "--event", "crash"],
             str(tmp_path / "b.npz"), "unreadable .npz")


def test_command_line_subprocess_and_info(tmp_path):
    src = _table_folder(tmp_path)
    out = tmp_path / "sub"
    run = subprocess.run([sys.executable, "-m", "focus_tune.data", "import-table", str(src / "items.csv"),
                          "--out", str(out), "--event", "END"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    info = subprocess.run([sys.executable, "-m", "focus_tune.data", "info", str(out)], capture_output=True,
                          text=True, timeout=120)
    assert info.returncode == 0 and "censored" in info.stdout and "scenario sub" in info.stdout
    bad = subprocess.run([sys.executable, "-m", "focus_tune.data", "import-table", str(src / "items.csv"),
                          "--out", str(tmp_path / "x"), "--event", "END", "--length", "2"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "row 1" in bad.stderr
    assert json.loads((out / "manifest.json").read_text())["game"] is None


# ----------------------------------------------------------------------------- inputs that cannot mislead


@pytest.mark.parametrize("row, needle", [("2.png,a -1", "entry 2 of column 'sequence' is -1"),
                                         ("2.png,-1", "entry 1 of column 'sequence' is -1")])
def test_minus_one_in_a_table_is_refused_naming_the_row(tmp_path, capsys, row, needle):
    src = tmp_path / "src"
    _images(src, 4)
    table = _write_csv(src, ["0.png,a END", "1.png,a", row, "3.png,END"])
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END"], str(table), "row 3", needle,
             "end it early")


def test_an_empty_class_name_in_a_parquet_list_is_refused(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 4)
    seqs = [["a", "END"], ["a"], ["a", "", "b"], ["END"]]
    pq.write_table(pa.table({"image": [f"{i}.png" for i in range(4)], "sequence": seqs}), src / "t.parquet")
    _refused(capsys, tmp_path, ["import-table", str(src / "t.parquet"), "--event", "END"],
             "row 3", "entry 2", "empty class name")


def test_bytes_class_names_and_splits_of_an_npz_are_decoded(tmp_path):
    _, chw, seqs = _arrays()
    file = tmp_path / "b.npz"
    split = np.array([b"train", b"val", b"test"] * (len(seqs) // 3) + [b"train"] * (len(seqs) % 3))
    np.savez(file, images=chw, sequences=seqs, classes=np.array([b"up", b"down", b"END"]), split=split)
    out = tmp_path / "decoded"
    assert main(["import-arrays", str(file), "--event", "END", "--out", str(out)]) == 0
    m = read_manifest(out)
    assert m.class_names == ["up", "down", "END"] and m.event_class == 2
    assert m.splits["val"] == (split == b"val").sum()


def test_a_class_not_in_classes_is_refused_with_comma_separated_classes(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 4)
    table = _write_csv(src, ["0.png,a END", "1.png,a", "2.png,a b", "3.png,END"])
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END", "--classes", "a,bb,END"],
             str(table), "row 3", "class 'b' (entry 2) is not one of --classes (a, bb, END)")


def test_the_table_after_a_list_flag_is_taken_back(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 4)
    table = _write_csv(src, ["0.png,ok fail", "1.png,ok", "2.png,warn ok", "3.png,fail"])
    out = tmp_path / "after"
    assert main(["import-table", "--event", "fail", "--out", str(out), "--classes", "ok", "warn", "fail",
                 str(table)]) == 0
    assert read_manifest(out).class_names == ["ok", "warn", "fail"]
    out2 = tmp_path / "commas"
    assert main(["import-table", "--event", "fail", "--classes", "ok,warn,fail", "--out", str(out2), str(table)]) == 0
    assert read_manifest(out2).class_names == ["ok", "warn", "fail"]
    with pytest.raises(SystemExit) as exit_:
        main(["import-table", "--event", "fail", "--out", str(tmp_path / "x"), "--classes", "ok", "warn", "fail"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "TABLE is missing" in err and "give it first" in err and "--classes ok,warn,fail" in err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("out", [".", "sub/..", ".."])
def test_out_at_the_current_folder_is_refused_before_any_image_is_read(tmp_path, capsys, monkeypatch, out):
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    monkeypatch.chdir(work)
    table = _write_csv(tmp_path / "src", ["missing.png,a END", "1.png,a", "2.png,END"])
    code = main(["import-table", str(table), "--event", "END", "--out", out])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"--out {out}: the current folder or one above it" in err and "tmp" not in err
    assert sorted(p.name for p in work.iterdir()) == ["sub"] and not list((work / "sub").iterdir())


def test_out_below_a_file_is_refused_first(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    table = _write_csv(tmp_path / "src", ["missing.png,a END", "1.png,a", "2.png,END"])
    code = main(["import-table", str(table), "--event", "END", "--out", str(tmp_path / "afile" / "ds")])
    err = capsys.readouterr().err
    assert code == 2 and "is not a folder" in err and "missing.png" not in err


def test_a_name_the_search_would_refuse_is_refused_at_import(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 3)
    table = _write_csv(src, ["0.png,a END", "1.png,a", "2.png,END"])
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END", "--name", "n" * 65],
             "--name", "1 to 64 letters")
    out = tmp_path / ("n" * 64)
    assert main(["import-table", str(table), "--event", "END", "--out", str(out)]) == 0


def test_sequences_of_length_one_are_refused_at_import(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 3)
    table = _write_csv(src, ["0.png,a", "1.png,END", "2.png,a"])
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END"],
             str(table), "longest sequence has 1 entries", "at least 2", "--length")
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END", "--length", "1"], "--length 1",
             "at least 2")
    out = tmp_path / "padded"
    assert main(["import-table", str(table), "--event", "END", "--length", "2", "--out", str(out)]) == 0
    _, chw, _ = _arrays()
    with pytest.raises(DataError, match="length 1; a search needs at least 2"):
        write_dataset(tmp_path / "one", images=chw, sequences=np.zeros((len(chw), 1), int), classes=["a", "b"],
                      event="b")


def test_truncate_without_length_is_refused(tmp_path, capsys):
    src = tmp_path / "src"
    _images(src, 3)
    table = _write_csv(src, ["0.png,a END", "1.png,a", "2.png,END"])
    _refused(capsys, tmp_path, ["import-table", str(table), "--event", "END", "--truncate"],
             "--truncate", "give --length")


def test_group_splits_are_sized_by_items_not_by_group_count(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    lines = ["image,sequence,site"]
    sizes = {"big": 80, "mid": 12, "small": 8}
    i = 0
    for site, count in sizes.items():
        for _ in range(count):
            _png(folder / f"{i}.png", i % 250)
            lines.append(f"{i}.png,a END,{site}")
            i += 1
    (folder / "t.csv").write_text("\n".join(lines) + "\n")
    for seed in range(4):
        out = tmp_path / f"sites{seed}"
        assert main(["import-table", str(folder / "t.csv"), "--out", str(out), "--event", "END",
                     "--group-column", "site", "--seed", str(seed)]) == 0
        m = read_manifest(out)
        assert m.splits["train"] == 80 and sorted((m.splits["val"], m.splits["test"])) == [8, 12]
        assert m.details["split"]["groups"] == {"train": 1, "val": 1, "test": 1}
