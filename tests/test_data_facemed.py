"""FaceMed: the paper's chain exactly, its exact marginals, the faces and the UTKFace import."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from scipy import stats

from focus_tune.data import build_dataset, load_dataset
from focus_tune.data.builtin.facemed import (
    DEAD,
    HEALTHY,
    ILL,
    exact_marginals,
    exact_marginals_batch,
    import_utkface,
    parse_utkface_name,
    sample_ages,
    sample_sequences,
    transition_matrix,
)
from focus_tune.data.builtin.faces import render_faces


def test_transition_matrix_bands():
    assert np.array_equal(transition_matrix(0), np.eye(3))
    assert np.array_equal(transition_matrix(39), np.eye(3))
    middle = [[0.9, 0.1, 0], [0.1, 0.9, 0], [0, 0, 1]]
    assert np.allclose(transition_matrix(40), middle) and np.allclose(transition_matrix(80), middle)
    old = [[0.6, 0.4, 0], [0.1, 0.7, 0.2], [0, 0, 1]]
    assert np.allclose(transition_matrix(81), old) and np.allclose(transition_matrix(116), old)


def test_exact_marginals_known_answers():
    assert np.allclose(exact_marginals(30, 10), [[1, 0, 0]] * 10)  # reaches 40 only at entry 11
    assert np.allclose(exact_marginals(39, 2), [[1, 0, 0], [0.9, 0.1, 0]])
    assert np.allclose(exact_marginals(40, 2), [[0.9, 0.1, 0], [0.82, 0.18, 0]])
    # Entry 1 uses age 80 (middle band), entry 2 age 81 (old band).
    assert np.allclose(exact_marginals(80, 2), [[0.9, 0.1, 0], [0.55, 0.43, 0.02]])
    assert np.allclose(exact_marginals(81, 2), [[0.6, 0.4, 0], [0.40, 0.52, 0.08]])
    m = exact_marginals(25)
    assert m.shape == (100, 3) and np.allclose(m.sum(axis=1), 1)
    assert np.all(np.diff(m[:, DEAD]) >= 0)  # dead is absorbing


def test_batch_matches_matrix_products():
    ages = np.array([0, 17, 39, 40, 55, 79, 80, 81, 99, 116])
    batch = exact_marginals_batch(ages, 60)
    for age, rows in zip(ages, batch):
        p = np.array([1.0, 0, 0])
        for i in range(60):
            p = p @ transition_matrix(age + i)
            assert np.allclose(rows[i], p)


def test_exact_marginals_match_long_run_frequencies():
    rng = np.random.default_rng(0)
    n = 20_000
    for age in (15, 45, 72, 85):
        sequences = sample_sequences(np.full(n, age), 100, rng)
        freq = np.stack([(sequences == c).mean(axis=0) for c in range(3)], axis=1)  # [100, 3]
        exact = exact_marginals(age)
        tolerance = 5 * np.sqrt(exact * (1 - exact) / n) + 1e-9
        assert np.all(np.abs(freq - exact) <= tolerance), age


def test_sampled_transitions_follow_the_chain():
    """Chi-square test of the empirical transition counts per (age band, previous state)."""
    rng = np.random.default_rng(1)
    ages = rng.integers(0, 117, 4000)
    sequences = sample_sequences(ages, 100, rng)
    previous = np.concatenate([np.zeros((len(ages), 1), int), sequences[:, :-1]], axis=1)
    age_at = ages[:, None] + np.arange(100)[None, :]  # the age used by the transition into entry i
    counts = np.zeros((3, 3, 3))
    for band, mask in enumerate((age_at < 40, (age_at >= 40) & (age_at <= 80), age_at > 80)):
        np.add.at(counts[band], (previous[mask], sequences[mask]), 1)
    for band, age in enumerate((20, 60, 90)):
        matrix = transition_matrix(age)
        for state in (HEALTHY, ILL, DEAD):
            row = counts[band, state]
            if row.sum() == 0:
                continue
            expected = matrix[state] * row.sum()
            assert np.all(row[expected == 0] == 0), (band, state)  # impossible moves never happen
            support = expected > 0
            if support.sum() > 1:
                chi2 = ((row[support] - expected[support]) ** 2 / expected[support]).sum()
                assert stats.chi2.sf(chi2, support.sum() - 1) > 1e-3, (band, state, row, expected)
    assert counts[1, HEALTHY].sum() > 10_000 and counts[2, ILL].sum() > 1_000


def test_ages_spread_like_utkface():
    ages = sample_ages(50_000, np.random.default_rng(2))
    assert ages.min() == 0 and ages.max() <= 116
    assert 0.08 < (ages < 10).mean() < 0.15  # many babies and children
    assert 27 <= np.median(ages) <= 33
    assert 0.02 < (ages > 80).mean() < 0.05  # a long thin tail
    assert np.array_equal(sample_ages(10, np.random.default_rng(7)), sample_ages(10, np.random.default_rng(7)))


def test_age_is_readable_from_faces_but_noisily():
    """A ridge probe on 16x16 pixels reads age clearly better than chance but not perfectly."""
    rng = np.random.default_rng(3)
    ages = sample_ages(1300, rng)
    images = render_faces(ages, 32, rng)
    assert images.shape == (1300, 3, 32, 32) and images.dtype == np.uint8
    features = images.reshape(1300, 3, 16, 2, 16, 2).mean(axis=(3, 5)).reshape(1300, -1) / 255
    features = np.hstack([features, np.ones((1300, 1))])
    train, test = slice(0, 1000), slice(1000, None)
    weights = np.linalg.solve(features[train].T @ features[train] + np.eye(features.shape[1]),
                              features[train].T @ ages[train])
    error = features[test] @ weights - ages[test]
    r2 = 1 - (error ** 2).mean() / ages[test].var()
    assert 0.4 < r2 < 0.95


def test_build_smoke_dataset(tmp_path):
    ds = load_dataset(build_dataset("facemed", "smoke", tmp_path / "fm"))
    m = ds.manifest
    assert m.class_names == ["healthy", "ill", "dead"] and m.event_class == DEAD and m.condition_class == HEALTHY
    assert m.image_shape == (3, 32, 32) and m.length == 20 and m.sampling_freq == 1
    for split in (ds.train, ds.val, ds.test):
        ages = split.extras["age"].astype(int)
        assert np.allclose(split.exact_marginals, exact_marginals_batch(ages, 20), atol=1e-6)
        young = ages + 19 < 40  # never reach 40 within the sequence: always healthy
        assert np.all(split.sequences[young] == HEALTHY)
        dead = split.sequences == DEAD
        assert np.all(dead[:, 1:] >= dead[:, :-1])  # padded with dead once dead


def _jpeg(path, colour):
    Image.fromarray(np.full((60, 50, 3), colour, np.uint8)).save(path, format="JPEG")


def test_parse_utkface_names():
    assert parse_utkface_name("26_0_1_20170116174525125.jpg") == 26
    assert parse_utkface_name("1_1_2_20161219140623097.jpg.chip.jpg") == 1
    assert parse_utkface_name("39_1_20170116174525125.jpg.chip.jpg") is None  # race missing
    assert parse_utkface_name("117_0_0_20170116174525125.jpg") is None  # beyond 116
    assert parse_utkface_name("abc.jpg") is None


def test_import_utkface_folder(tmp_path):
    src = tmp_path / "UTKFace"
    src.mkdir()
    ages = [1, 5, 26, 26, 35, 44, 61, 80, 85, 99, 116, 30]
    for i, age in enumerate(ages):
        suffix = ".jpg.chip.jpg" if i % 2 else ".jpg"
        _jpeg(src / f"{age}_{i % 2}_{i % 5}_2017011617452{i:04d}{suffix}", (age * 2, 100, 50))
    for name in ("39_1_20170116174525125.jpg.chip.jpg", "face.jpg", "61_3_x.jpg"):
        _jpeg(src / name, (0, 0, 0))
    (src / "12_0_0_20170116174525999.jpg").write_bytes(b"not a jpeg")
    (src / "README.txt").write_text("ignored")
    ds = load_dataset(import_utkface(src, tmp_path / "out", image_size=16, length=30))
    details = ds.manifest.details
    assert details["skipped_malformed_names"] == 3 and details["skipped_unreadable"] == 1
    assert details["images_found"] == 13
    imported = np.concatenate([ds.split(s).extras["age"] for s in ("train", "val", "test")])
    assert sorted(imported.tolist()) == sorted(ages)
    assert sum(ds.manifest.splits.values()) == 12 and min(ds.manifest.splits.values()) >= 1
    for s in (ds.train, ds.val, ds.test):
        assert s.images.shape[1:] == (3, 16, 16)
        assert np.all(np.abs(s.images[:, 0].astype(int) - 2 * s.extras["age"][:, None, None]) <= 3)
        assert np.allclose(s.exact_marginals, exact_marginals_batch(s.extras["age"], 30), atol=1e-6)
    with pytest.raises(ValueError, match="found 0 UTKFace images"):
        import_utkface(tmp_path / "out", tmp_path / "again")
