"""`import-folder`: Hugging Face datasets' imagefolder layout, and `.jsonl` tables in `import-table`.

A folder of images with a metadata.csv or metadata.jsonl (a ``file_name`` column, relative to
the metadata file's folder, and the sequence column), or train/, validation/ (val/), test/
folders each with its own: round trips through load_dataset, and each bad input refused with
exit 2, one stderr line naming the file (and row or line), nothing left at --out.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from focus_tune.data import load_dataset, read_manifest
from focus_tune.data.__main__ import main
from test_data_import import _refused as refused_import

SEQUENCES = ["a a b", "a END", "b", "a b END", "END", "b b a", "a", "b END", "a a END", "b a"]
SPLITS = ["train"] * 6 + ["val"] * 2 + ["test"] * 2


def _png(path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.full((6, 5), value, np.uint8)
    pixels[0, 0] = 255 - value
    Image.fromarray(pixels, "L").save(path)


def _write_metadata(folder, rows, fmt: str, list_sequences: bool = False):
    """rows: (file_name, sequence, score); metadata.csv or metadata.jsonl in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        lines = ["file_name,sequence,score", *(f"{f},{s},{x}" for f, s, x in rows)]
        (folder / "metadata.csv").write_text("\n".join(lines) + "\n")
        return folder / "metadata.csv"
    lines = [json.dumps({"file_name": f, "sequence": s.split() if list_sequences else s, "score": x})
             for f, s, x in rows]
    (folder / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    return folder / "metadata.jsonl"


def _flat(tmp_path, fmt: str, list_sequences: bool = False):
    """photos/img/i.png (fill 20 i) and photos/metadata.{fmt}."""
    root = tmp_path / "photos"
    rows = []
    for i, seq in enumerate(SEQUENCES):
        _png(root / "img" / f"{i}.png", 20 * i)
        rows.append((f"img/{i}.png", seq, i * 0.5))
    _write_metadata(root, rows, fmt, list_sequences)
    return root


def _items(split) -> dict[int, int]:
    """Item index by its image's fill value / 20."""
    return {int(split.images[j, 0, 1, 1]) // 20: j for j in range(len(split.images))}


def _check_items(ds, expected_split=None):
    """Every item's sequence and extra as written, in the split expected (if given)."""
    ids = {c: k for k, c in enumerate(ds.manifest.class_names)}
    seen = set()
    for name in ("train", "val", "test"):
        s = ds.split(name)
        for i, j in _items(s).items():
            seen.add(i)
            names = SEQUENCES[i].split()
            assert s.sequences[j, :len(names)].tolist() == [ids[c] for c in names], i
            assert s.extras["score"][j] == pytest.approx(i * 0.5)
            if expected_split is not None:
                assert expected_split[i] == name, i
    assert seen == set(range(len(SEQUENCES)))


@pytest.mark.parametrize("fmt, list_sequences", [("csv", False), ("jsonl", False), ("jsonl", True)])
def test_one_metadata_file_at_the_top(tmp_path, capsys, fmt, list_sequences):
    root = _flat(tmp_path, fmt, list_sequences)
    out = tmp_path / "mine"
    assert main(["import-folder", str(root), "--out", str(out), "--event", "END"]) == 0, capsys.readouterr().err
    ds = load_dataset(out)
    assert ds.manifest.class_names == ["END", "a", "b"]  # those seen, sorted
    _check_items(ds)
    manifest = read_manifest(out)
    assert manifest.generator == "import-folder"
    assert ds.manifest.splits == {"train": 7, "val": 2, "test": 1}  # the table importer's seeded 70/20/10
    meta = manifest.details["folder"]["metadata"]
    assert [m["path"] for m in meta] == [str((root / f"metadata.{fmt}").resolve())] and meta[0]["format"] == fmt


def _split_tree(tmp_path, formats=("csv", "jsonl", "csv"), val_name="validation"):
    """photos/{train,validation,test}/ with 6, 2, 2 items, each with its own metadata file."""
    root = tmp_path / "photos"
    expected = {}
    for (split, folder), fmt, items in zip((("train", "train"), ("val", val_name), ("test", "test")), formats,
                                           (range(0, 6), range(6, 8), range(8, 10))):
        rows = []
        for i in items:
            _png(root / folder / "pics" / f"{i}.png", 20 * i)
            rows.append((f"pics/{i}.png", SEQUENCES[i], i * 0.5))
            expected[i] = split
        _write_metadata(root / folder, rows, fmt)
    return root, expected


@pytest.mark.parametrize("val_name", ["validation", "val"])
def test_split_folders_give_the_splits(tmp_path, capsys, val_name):
    root, expected = _split_tree(tmp_path, val_name=val_name)
    out = tmp_path / "mine"
    code = main(["import-folder", str(root), "--out", str(out), "--event", "END", "--classes", "a", "b", "END"])
    assert code == 0, capsys.readouterr().err
    ds = load_dataset(out)
    assert ds.manifest.splits == {"train": 6, "val": 2, "test": 2}
    _check_items(ds, expected)
    details = read_manifest(out).details
    assert details["split"]["rule"] == f"given (split folders train/, {val_name}/, test/)"
    assert [m["split"] for m in details["folder"]["metadata"]] == ["train", "val", "test"]
    assert [m["format"] for m in details["folder"]["metadata"]] == ["csv", "jsonl", "csv"]


def test_a_folder_after_a_list_flag_is_taken_back(tmp_path, capsys):
    root = _flat(tmp_path, "csv")
    out = tmp_path / "mine"
    assert main(["import-folder", "--out", str(out), "--event", "END", "--classes", "a", "b", "END", str(root)]) == 0
    assert load_dataset(out).manifest.class_names == ["a", "b", "END"]


def test_a_jsonl_table(tmp_path, capsys):
    """import-table reads JSON Lines: the image column as given, sequences as lists or strings
    (one or the other per file), a split column, blank lines skipped."""
    src = tmp_path / "src"
    lines = []
    for i, seq in enumerate(SEQUENCES):
        _png(src / f"{i}.png", 20 * i)
        lines.append(json.dumps({"image": f"{i}.png", "sequence": seq.split(), "score": i * 0.5,
                                 "part": SPLITS[i]}))
    lines.insert(3, "")
    (src / "items.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "mine"
    code = main(["import-table", str(src / "items.jsonl"), "--out", str(out), "--event", "END",
                 "--classes", "a,b,END", "--split-column", "part"])
    assert code == 0, capsys.readouterr().err
    ds = load_dataset(out)
    _check_items(ds, dict(enumerate(SPLITS)))
    assert read_manifest(out).details["table"]["format"] == "jsonl"


# -- bad inputs ---------------------------------------------------------------------------------

def _refused(capsys, tmp_path, argv, *needles):
    """import-table's check of a refusal (one line, exit 2, nothing at --out), with the event."""
    return refused_import(capsys, tmp_path, [*argv, "--event", "END"], *needles)


def test_no_file_name_column(tmp_path, capsys):
    root = _flat(tmp_path, "csv")
    meta = root / "metadata.csv"
    meta.write_text(meta.read_text().replace("file_name,", "image,", 1))
    _refused(capsys, tmp_path, ["import-folder", str(root)], str(meta), "no column 'file_name'", "image, sequence")


def test_a_row_naming_a_missing_image(tmp_path, capsys):
    root = _flat(tmp_path, "csv")
    (root / "img" / "4.png").unlink()
    _refused(capsys, tmp_path, ["import-folder", str(root)], f"{root / 'metadata.csv'}: row 5",
             str(root / "img" / "4.png"), "not found")


def test_a_jsonl_row_naming_a_missing_image_names_its_line(tmp_path, capsys):
    root, _ = _split_tree(tmp_path)
    meta = root / "validation" / "metadata.jsonl"
    meta.write_text("\n" + meta.read_text())  # a blank first line: the second item is on line 3
    (root / "validation" / "pics" / "7.png").unlink()
    _refused(capsys, tmp_path, ["import-folder", str(root)], f"{meta}: line 3",
             str(root / "validation" / "pics" / "7.png"), "not found")


def test_a_class_error_in_a_split_folder_names_its_file_and_row(tmp_path, capsys):
    root, _ = _split_tree(tmp_path)
    meta = root / "test" / "metadata.csv"
    meta.write_text(meta.read_text().replace("b a,", "b zz,"))
    _refused(capsys, tmp_path, ["import-folder", str(root), "--classes", "a", "b", "END"],
             f"{meta}: row 2", "class 'zz' (entry 2)")


@pytest.mark.parametrize("line, needle", [('{"file_name": "img/0.png", "sequence": "a b"', "not JSON"),
                                          ('["img/0.png", "a b"]', "a JSON list, expected an object")])
def test_a_malformed_json_line(tmp_path, capsys, line, needle):
    root = _flat(tmp_path, "jsonl")
    meta = root / "metadata.jsonl"
    lines = meta.read_text().splitlines()
    lines[3] = line
    meta.write_text("\n".join(lines) + "\n")
    _refused(capsys, tmp_path, ["import-folder", str(root)], f"{meta}: line 4", needle)


def test_a_key_of_mixed_types(tmp_path, capsys):
    root = _flat(tmp_path, "jsonl")
    meta = root / "metadata.jsonl"
    lines = meta.read_text().splitlines()
    lines[2] = json.dumps({"file_name": "img/2.png", "sequence": ["b"], "score": 1.0})
    meta.write_text("\n".join(lines) + "\n")
    _refused(capsys, tmp_path, ["import-folder", str(root)], str(meta),
             "key 'sequence' holds values of different types")


def test_split_folders_with_different_class_sets(tmp_path, capsys):
    root, _ = _split_tree(tmp_path)
    meta = root / "test" / "metadata.csv"  # items 8 (a a END) and 9 (b a): no b once 9 is "a a"
    meta.write_text(meta.read_text().replace("b a,", "a a,"))
    _refused(capsys, tmp_path, ["import-folder", str(root)], str(meta), "no sequence holds b",
             "class sets differ", "--classes")


def _layout(tmp_path, case):
    root, _ = _split_tree(tmp_path)
    if case == "val and validation":
        (root / "val").mkdir()
        return root, (str(root), "both validation/ and val/")
    if case == "a split folder without metadata":
        (root / "test" / "metadata.csv").unlink()
        return root, (str(root / "test"), "no metadata.csv or metadata.jsonl")
    if case == "no test folder":
        for p in sorted((root / "test").rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        (root / "test").rmdir()
        return root, (str(root), "no test/", "every split needs items")
    if case == "both formats":
        (root / "train" / "metadata.jsonl").write_text("")
        return root, (str(root / "train"), "both metadata.csv and metadata.jsonl")
    if case == "top and split metadata":
        (root / "metadata.csv").write_text("file_name,sequence\ntrain/pics/0.png,a\n")
        return root, (str(root), "at the top and in split folders", "keep one")
    if case == "no metadata":
        for split in ("train", "validation", "test"):
            (root / split / ("metadata.jsonl" if split == "validation" else "metadata.csv")).unlink()
        return root, (str(root), "no metadata.csv or metadata.jsonl at the top or in train/, validation/, test/")
    if case == "not a folder":
        return root / "nothere", (str(root / "nothere"), "no such folder")
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["val and validation", "a split folder without metadata", "no test folder",
                                  "both formats", "top and split metadata", "no metadata", "not a folder"])
def test_a_bad_layout_names_the_folder(tmp_path, capsys, case):
    root, needles = _layout(tmp_path, case)
    _refused(capsys, tmp_path, ["import-folder", str(root)], *needles)


def test_a_split_column_with_split_folders(tmp_path, capsys):
    root, _ = _split_tree(tmp_path)
    _refused(capsys, tmp_path, ["import-folder", str(root), "--split-column", "part"],
             "--split-column", "split folders give the splits")


def test_an_empty_metadata_file(tmp_path, capsys):
    root, _ = _split_tree(tmp_path)
    meta = root / "validation" / "metadata.jsonl"
    meta.write_text("\n")
    _refused(capsys, tmp_path, ["import-folder", str(root)], str(meta), "no rows")
