"""The Parquet store: round trip, verification of every file, atomic writes, the build cache."""
from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from focus_tune.data import DataError, DatasetWriter, ensure_dataset, load_dataset, time_to_event
from focus_tune.data.store import sha256_file

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
    with pytest.raises(DataError, match=r"train\.parquet: images have shape \[3, 4, 5\], the manifest says \[3, 5, 4\]"):
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
    with pytest.raises(DataError, match="is not a dataset folder"):
        write_small(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def _ensure_and_log_builds(root: str, barrier) -> None:
    """ensure_dataset in a fresh process, logging every build; the build is slowed down
    so that the other process arrives while it runs."""
    import time

    import focus_tune.data as data

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
