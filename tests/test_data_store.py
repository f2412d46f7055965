"""The Parquet store: round trip, verification of every file, atomic writes, the build cache."""
from __future__ import annotations

import json
import multiprocessing
import os
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from focus_tune.data import DatasetWriter, ensure_dataset, load_dataset, time_to_event
from focus_tune.data.dataset_format import sha256_file
from focus_tune.errors import DataError

SHAPE, L, CLASSES = (3, 4, 5), 6, ["a", "b", "c", "END"]


def _chunk(rng, n, with_marginals=True):
    images = rng.integers(0, 256, (n, *SHAPE), dtype=np.uint8)
    sequences = rng.integers(0, 4, (n, L))
    marginals = rng.dirichlet(np.ones(4), (n, L)) if with_marginals else None
    return images, sequences, marginals


def write_small(out: Path, seed: int = 0, with_marginals: bool = True) -> dict:
    """A tiny dataset, train written in two chunks; returns the arrays written."""
    rng = np.random.default_rng(seed)
    written = {}
    with DatasetWriter(out, class_names=CLASSES, length=L, image_shape=SHAPE, event_class=3,
                       has_exact_marginals=with_marginals) as writer:
        for split, sizes in (("train", (5, 4)), ("val", (3,)), ("test", (2,))):
            parts = [_chunk(rng, n, with_marginals) for n in sizes]
            ids = [np.arange(n) + 100 * i for i, n in enumerate(sizes)]
            for (images, sequences, marginals), extra in zip(parts, ids):
                writer.add(split, images, sequences, marginals, extras={"item": extra})
            written[split] = [np.concatenate(a) if a[0] is not None else None for a in zip(*parts)]
            written[split].append(np.concatenate(ids))
        writer.commit(name="small", source="test", game="toy", profile=None, sampling_freq=2,
                      generator="test", generator_version="1", seed=seed)
    return written


def test_time_to_event_convention():
    sequences = np.array([[0, 1, 3, 3], [3, 3, 3, 3], [0, 1, 2, 0], [1, 3, 0, 3]])
    # T = min{i : Y_i = 3}, counted from 1; L = 4 when 3 never occurs.
    assert time_to_event(sequences, 3).tolist() == [3, 1, 4, 2]


def test_round_trip(tmp_path):
    written = write_small(tmp_path / "ds")
    ds = load_dataset(tmp_path / "ds")
    m = ds.manifest
    assert m.splits == {"train": 9, "val": 3, "test": 2} and m.num_classes == 4 and m["num_classes"] == 4
    assert m.image_shape == SHAPE and m.length == L and m.event_class == 3 and m.sampling_freq == 2
    for split in ("train", "val", "test"):
        images, sequences, marginals, items = written[split]
        s = ds.split(split)
        assert s.images.dtype == np.uint8 and np.array_equal(s.images, images)
        assert s.sequences.dtype == np.int64 and np.array_equal(s.sequences, sequences)
        assert np.array_equal(s.time_to_event, time_to_event(sequences, 3))
        assert np.allclose(s.exact_marginals, marginals, atol=1e-6)
        assert np.array_equal(s.extras["item"], items)
    first = written["train"][1][:, 0]
    non_event = np.bincount(first, minlength=4)[:3]
    assert m.condition_class == int(np.argmax(non_event))
    assert m.files["train.parquet"] == sha256_file(tmp_path / "ds" / "train.parquet")


def test_without_marginals(tmp_path):
    write_small(tmp_path / "ds", with_marginals=False)
    ds = load_dataset(tmp_path / "ds")
    assert ds.test.exact_marginals is None and not ds.manifest.has_exact_marginals


def test_truncated_or_altered_file_is_refused_with_its_name(tmp_path):
    write_small(tmp_path / "ds")
    path = tmp_path / "ds" / "val.parquet"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"val\.parquet: SHA-256 .* truncated or altered"):
        load_dataset(tmp_path / "ds")
    altered = bytearray(data)
    altered[len(altered) // 3] ^= 0xFF
    path.write_bytes(bytes(altered))
    with pytest.raises(DataError, match=r"val\.parquet: SHA-256"):
        load_dataset(tmp_path / "ds")
    path.unlink()
    with pytest.raises(DataError, match=r"val\.parquet: missing split file"):
        load_dataset(tmp_path / "ds")


def _rewrite(folder: Path, split: str, table) -> None:
    """Replace a split file and re-sign it, as if the manifest had been edited to match."""
    pq.write_table(table, folder / f"{split}.parquet")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][f"{split}.parquet"] = sha256_file(folder / f"{split}.parquet")
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_missing_column_or_wrong_shape_is_refused(tmp_path):
    folder = tmp_path / "ds"
    write_small(folder)
    table = pq.read_table(folder / "test.parquet")
    _rewrite(folder, "test", table.drop_columns(["time_to_event"]))
    with pytest.raises(DataError, match=r"test\.parquet: missing column 'time_to_event'"):
        load_dataset(folder)
    _rewrite(folder, "test", table)
    load_dataset(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["image_shape"] = [3, 5, 4]  # same number of bytes, other shape: still refused
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError,
                       match=r"train\.parquet: images have shape \[3, 4, 5\], the manifest says \[3, 5, 4\]"):
        load_dataset(folder)
    manifest["image_shape"] = [3, 4, 4]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"train\.parquet: column 'image' has type fixed_size_binary\[60\]"):
        load_dataset(folder)
    manifest["image_shape"] = list(SHAPE)
    manifest["splits"]["val"] = 4
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"val\.parquet: 3 rows, the manifest says 4"):
        load_dataset(folder)


def test_bad_manifest_is_refused(tmp_path):
    folder = tmp_path / "ds"
    write_small(folder)
    text = (folder / "manifest.json").read_text()
    (folder / "manifest.json").write_text(text[:-20])
    with pytest.raises(DataError, match=r"manifest\.json: unreadable manifest"):
        load_dataset(folder)
    manifest = json.loads(text)
    del manifest["event_class"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"manifest\.json: missing field\(s\) event_class"):
        load_dataset(folder)
    (folder / "manifest.json").unlink()
    with pytest.raises(DataError, match=r"manifest\.json: not found"):
        load_dataset(folder)


def test_failed_write_leaves_nothing(tmp_path):
    rng = np.random.default_rng(0)
    with pytest.raises(RuntimeError):
        with DatasetWriter(tmp_path / "ds", class_names=CLASSES, length=L, image_shape=SHAPE, event_class=3,
                           has_exact_marginals=False) as writer:
            writer.add("train", *_chunk(rng, 4, with_marginals=False))
            assert not (tmp_path / "ds").exists()  # nothing at the destination before commit
            raise RuntimeError("crash mid-write")
    assert list(tmp_path.iterdir()) == []


def test_replaces_a_dataset_but_not_other_folders(tmp_path):
    write_small(tmp_path / "ds", seed=0)
    first = load_dataset(tmp_path / "ds").manifest.files
    write_small(tmp_path / "ds", seed=1)
    assert load_dataset(tmp_path / "ds").manifest.files != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(DataError, match=r"holds files that are not a focus_tune dataset \('notes.txt'\)"):
        write_small(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("extra", [
    {"manifest.json": '{"anything": 1}', "thesis.tex": "years of work"},  # a manifest.json of someone else
    {"manifest.json": "not json", "thesis.tex": "years of work"},
    {"thesis.tex": "years of work"},
])
def test_never_replaces_a_folder_it_did_not_write(tmp_path, extra):
    folder = tmp_path / "out"
    folder.mkdir()
    for name, text in extra.items():
        (folder / name).write_text(text)
    with pytest.raises(DataError, match="not a focus_tune dataset.*nothing was changed"):
        write_small(folder)
    assert {p.name: p.read_text() for p in folder.iterdir()} == extra
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "no temporary folder left"


def test_a_dataset_with_a_foreign_file_added_is_not_replaced(tmp_path):
    write_small(tmp_path / "ds")
    (tmp_path / "ds" / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="notes.txt"):
        write_small(tmp_path / "ds", seed=1)
    assert (tmp_path / "ds" / "notes.txt").read_text() == "mine"
    load_dataset(tmp_path / "ds")  # the old dataset is intact


def test_symlinked_output_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(DataError, match="symbolic link"):
        write_small(tmp_path / "link")
    assert list(target.iterdir()) == [] and (tmp_path / "link").is_symlink()


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["files"].update({"train.parquet": 12345}), "field 'files' must be an object of file name -> SHA-256"),
    (lambda m: m.pop("stats"), "missing field(s) stats"),
    (lambda m: m["stats"].pop("val"), "field 'stats' must be an object with one entry per split"),
    (lambda m: m.update(length="7" * 300), "field 'length' must be an integer, got '77777"),
    (lambda m: m.update(image_shape=[3, 4, "x"]), "field 'image_shape' must be a list of 3 integers"),
    (lambda m: m.update(has_exact_marginals="yes"), "field 'has_exact_marginals' must be true or false"),
    (lambda m: m.update(class_names=["a"] * 300), "class_names must be a list of 1 to 127 strings"),
])
def test_manifest_fields_of_the_wrong_type_name_the_field(tmp_path, edit, message):
    write_small(tmp_path / "ds")
    file = tmp_path / "ds" / "manifest.json"
    raw = json.loads(file.read_text())
    edit(raw)
    file.write_text(json.dumps(raw))
    with pytest.raises(DataError) as err:
        load_dataset(tmp_path / "ds")
    text = str(err.value)
    assert str(file) in text and message in text and len(text) < 400 and "\n" not in text


def _rewrite_marginals(folder: Path, change) -> None:
    """Rewrite test.parquet with altered exact marginals and a manifest hash that matches."""
    file = folder / "test.parquet"
    table = pq.read_table(file)
    marginals = np.array(table.column("exact_marginals").to_pylist(), dtype=np.float32)
    change(marginals)
    import pyarrow as pa

    column = pa.FixedSizeListArray.from_arrays(pa.array(marginals.ravel()), marginals.shape[1])
    table = table.set_column(table.schema.get_field_index("exact_marginals"), "exact_marginals", column)
    pq.write_table(table, file)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["test.parquet"] = sha256_file(file)
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("change, message", [
    (lambda m: m.__setitem__((0, 0), np.nan), "NaN or infinite"),
    (lambda m: m.__setitem__((1, slice(0, 2)), [-0.5, 1.5]), "outside [0, 1]"),
    (lambda m: m.__setitem__((1, slice(None)), m[1] * 0.5), "do not sum to 1"),
])
def test_exact_marginals_must_be_probabilities(tmp_path, change, message):
    write_small(tmp_path / "ds")
    _rewrite_marginals(tmp_path / "ds", change)
    ds = load_dataset(tmp_path / "ds")  # the manifest and hashes agree: only the values are wrong
    with pytest.raises(DataError, match=re.escape(message)):
        ds.test


def _ensure_and_log_builds(root: str, barrier) -> None:
    """ensure_dataset in a fresh process, logging every build; the build is slowed down
    so that the other process arrives while it runs."""
    import time

    import focus_tune.data.builtin.cache as data

    build = data.build_dataset

    def logged(*args, **kwargs):
        with open(Path(root) / "builds.log", "a") as log:
            log.write(f"{os.getpid()}\n")
        time.sleep(0.5)
        return build(*args, **kwargs)

    data.build_dataset = logged
    barrier.wait()
    path = data.ensure_dataset("facemed", "smoke", root)
    (Path(root) / f"result-{os.getpid()}.txt").write_text(str(path))


def test_ensure_dataset_builds_once_under_a_lock(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    workers = [ctx.Process(target=_ensure_and_log_builds, args=(str(tmp_path), barrier)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    paths = [p.read_text() for p in sorted(tmp_path.glob("result-*.txt"))]
    assert paths[0] == paths[1] == str(tmp_path / "facemed-smoke-seed0")
    assert len((tmp_path / "builds.log").read_text().split()) == 1  # the second process reused it
    manifest = Path(paths[0]) / "manifest.json"
    stamp = manifest.stat().st_mtime_ns
    assert str(ensure_dataset("facemed", "smoke", tmp_path)) == paths[0]
    assert manifest.stat().st_mtime_ns == stamp  # cached: not rebuilt
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    for path in [tmp_path / "builds.log", *tmp_path.glob("result-*.txt")]:
        path.unlink()
    assert load_dataset(paths[0]).manifest.splits == {"train": 48, "val": 24, "test": 24}
    # A cache built by another generator version is rebuilt; a crashed build's leftovers go.
    raw = json.loads(manifest.read_text())
    raw["generator_version"] = "0"
    manifest.write_text(json.dumps(raw))
    (tmp_path / ".facemed-smoke-seed0.tmp-1-deadbeef").mkdir()
    ensure_dataset("facemed", "smoke", tmp_path)
    assert load_dataset(paths[0]).manifest.generator_version != "0"
    assert not list(tmp_path.glob(".facemed-smoke-seed0.tmp-*"))


def test_builds_are_reproducible(tmp_path):
    from focus_tune.data import build_dataset

    a = load_dataset(build_dataset("facemed", "smoke", tmp_path / "a", seed=3)).manifest.files
    b = load_dataset(build_dataset("facemed", "smoke", tmp_path / "b", seed=3)).manifest.files
    c = load_dataset(build_dataset("facemed", "smoke", tmp_path / "c", seed=4)).manifest.files
    assert a == b and a != c
    assert os.path.isdir(tmp_path / "a")
