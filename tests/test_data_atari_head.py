"""Atari-HEAD importer on a small fixture written in the distributed format."""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from focus_tune.data import load_dataset
from focus_tune.data.__main__ import main
from focus_tune.data.builtin.ale import END
from focus_tune.data.builtin.atari_head import HEADER, import_atari_head, read_labels
from focus_tune.errors import DataError

L, FREQ = 5, 2


def _colour(row: int) -> tuple[int, int, int]:
    """Each frame is one flat colour that encodes its row, so it survives resizing."""
    return (row % 256, 40 + row // 256, 200)


def write_trial(folder: Path, trial: int, rows: list[tuple[str, str, str]], missing: set[int] = frozenset(),
                gaze: str = "80.5,100.25,81.0,99.75") -> str:
    """rows: (episode_id, unclipped_reward, action) strings per frame; `missing` rows have no PNG."""
    name = f"{trial}_RZ_{1000 + trial}_Aug-24-11-44-38"
    lines = [HEADER]
    for i, (episode, reward, action) in enumerate(rows):
        lines.append(f"RZ_{1000 + trial}_{i + 1},{episode},{10 * i},50,{reward},{action},{gaze}")
    (folder / f"{name}.txt").write_text("\n".join(lines) + "\n")
    with tarfile.open(folder / f"{name}.tar.bz2", "w:bz2") as tar:
        for i in range(len(rows)):
            if i in missing:
                continue
            buffer = io.BytesIO()
            Image.fromarray(np.full((210, 160, 3), _colour(i), np.uint8)).save(buffer, format="PNG")
            info = tarfile.TarInfo(f"{name}/RZ_{1000 + trial}_{i + 1}.png")
            info.size = buffer.tell()
            buffer.seek(0)
            tar.addfile(info, buffer)
    return name


def make_rows(rng: np.random.Generator, n: int, episodes: int = 1) -> list[tuple[str, str, str]]:
    """Random trial: rewards on ~1 frame in 7, several episodes."""
    cut = np.sort(rng.choice(np.arange(1, n), episodes - 1, replace=False)) if episodes > 1 else []
    episode = np.searchsorted(cut, np.arange(n), side="right")
    reward = np.where(rng.random(n) < 0.14, rng.choice([20, 50, 75], n), 0)
    return [(str(e), str(r), str(a)) for e, r, a in zip(episode, reward, rng.integers(0, 18, n))]


def reference(rows: list[tuple[str, str, str]], start: int) -> list[int] | str:
    """Plain-loop segmentation of one start row: the sequence, or why it is dropped."""
    episode = [None] * len(rows)
    current = -1
    for i, (e, _, _) in enumerate(rows):
        current = current if e == "null" else int(e)
        episode[i] = current
    entries = []
    for row in range(start, len(rows)):
        if episode[row] != episode[start]:
            break
        if (row - start) % FREQ == 0:
            if len(entries) == L:
                break
            if rows[row][2] == "null":
                return "null_action"
            entries.append(int(rows[row][2]))
        reward = rows[row][1]
        if reward != "null" and float(reward) > 0:
            return entries + [END] * (L - len(entries))
    return entries if len(entries) == L else "no_scoring_event"


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    """10 usable hero trials, 1 short trial, 1 trial not in meta_data.csv, nulls, missing frames."""
    root = tmp_path_factory.mktemp("atari_head")
    folder = root / "hero"
    folder.mkdir()
    rng = np.random.default_rng(5)
    trials = {}
    for t in range(1, 11):
        trials[t] = make_rows(rng, 40, episodes=1 + t % 3)
    # Hand-made trial 1: reward on row 6, a null action on row 13, a null reward and episode.
    rows = [("0", "0", str(i % 18)) for i in range(40)]
    rows[6] = ("0", "25", "6")
    rows[13] = ("0", "0", "null")
    rows[20] = ("null", "null", "2")
    rows[30] = ("0", "100", "7")
    trials[1] = rows
    missing = {2: {0, 1, 2}}
    for t, rows in trials.items():
        write_trial(folder, t, rows, missing.get(t, set()))
    write_trial(folder, 11, [("0", "0", "1")] * 3)  # short: no reward, fewer than L entries
    write_trial(folder, 99, make_rows(rng, 20))  # not listed in meta_data.csv
    meta = ["GameName,trial_id,subject_id,load_trial,highest_score,total_frame"]
    meta += [f"hero,{t},RZ,0,100,40" for t in range(1, 13)] + ["seaquest,50,RZ,0,10,40"]
    (root / "meta_data.csv").write_text("\n".join(meta) + "\n")
    out = import_atari_head(folder, "hero", root / "out", length=L, sampling_freq=FREQ, image_size=(12, 10))
    return trials, load_dataset(out)


def test_sequences_follow_rewards_sampling_and_padding(fixture):
    trials, ds = fixture
    names = ds.manifest.details["trials"]
    checked = 0
    for split in ("train", "val", "test"):
        s = ds.split(split)
        for trial_index, row, sequence, tte, image in zip(
                s.extras["trial"], s.extras["row"], s.sequences, s.time_to_event, s.images):
            trial = int(names[trial_index].split("_")[0])
            assert sequence.tolist() == reference(trials[trial], int(row))
            assert tte == min((sequence.tolist() + [END]).index(END) + 1, len(sequence))  # from 1, L if none
            assert tuple(image[:, 0, 0]) == _colour(int(row))  # the frame of that row
            checked += 1
    assert checked == sum(ds.manifest.splits.values()) > 100


def test_hand_made_trial_known_answers(fixture):
    _, ds = fixture
    by_row = {}
    names = ds.manifest.details["trials"]
    for split in ("train", "val", "test"):
        s = ds.split(split)
        for t, row, seq in zip(s.extras["trial"], s.extras["row"], s.sequences):
            if names[t].startswith("1_"):
                by_row[int(row)] = seq.tolist()
    assert by_row[0] == [0, 2, 4, 6, END]  # rows 0, 2, 4 and the scoring row 6
    assert by_row[1] == [1, 3, 5, END, END]  # row 7 is past the scoring row 6
    assert by_row[6] == [6, END, END, END, END]
    assert by_row[14] == [14, 16, 0, 2, 4]  # scoring (row 30) after L entries: cut at L, no END
    assert {7, 9, 11, 13}.isdisjoint(by_row)  # they sample row 13's null action
    assert by_row[20] == [2, 4, 6, 8, 10]  # null episode id continues, null reward counts as 0
    assert by_row[28] == [10, 7, END, END, END]


def test_counts_and_split_by_trial(fixture):
    trials, ds = fixture
    details = ds.manifest.details
    counts = details["counts"]
    expected = {"no_scoring_event": 0, "null_action": 0}
    for rows in trials.values():
        for start in range(len(rows)):
            outcome = reference(rows, start)
            if isinstance(outcome, str):
                expected[outcome] += 1
    expected["no_scoring_event"] += 3  # the short trial's three rows
    assert counts["frames_dropped_no_scoring_event"] == expected["no_scoring_event"]
    assert counts["frames_dropped_null_action"] == expected["null_action"]
    assert counts["trials_short"] == 1
    assert counts["trials_not_in_meta_data"] == 1
    assert counts["trials_in_meta_data_without_files"] == 1
    assert counts["rows_null_action"] == 1 and counts["rows_null_unclipped_reward"] == 1
    assert counts["rows_null_episode_id"] == 1
    complete_in_trial_2 = [r for r in (0, 1, 2) if not isinstance(reference(trials[2], r), str)]
    assert counts["frames_missing_from_archive"] == len(complete_in_trial_2)
    assert counts["frames_imported"] == sum(ds.manifest.splits.values())
    per_split = details["trials_per_split"]
    assert [len(per_split[s]) for s in ("train", "val", "test")] == [7, 2, 1]
    assert len(set(sum(per_split.values(), []))) == 10
    for split in ("train", "val", "test"):
        used = {details["trials"][t] for t in np.unique(ds.split(split).extras["trial"])}
        assert used <= set(per_split[split])
    assert ds.train.exact_marginals is None and ds.manifest.num_classes == 19
    assert ds.train.images.shape[1:] == (3, 12, 10)


@pytest.mark.parametrize("line, problem", [
    ("RZ_1_2,0,10,50,0,abc,null", "action 'abc' is neither a number nor null"),
    ("RZ_1_2,0,10,50,0,18,null", "action 18 is not an ALE action id"),
    ("RZ_1_2,0,10,50,0", "expected at least 7"),
    ("RZ_1_2,x,10,50,0,3,null", "episode_id 'x'"),
])
def test_malformed_rows_name_file_and_line(tmp_path, line, problem):
    path = tmp_path / "1_RZ_1_x.txt"
    path.write_text(f"{HEADER}\nRZ_1_1,0,0,50,0,0,null\n{line}\n")
    with pytest.raises(DataError) as err:
        read_labels(path)
    assert f"{path}:3:" in str(err.value) and problem in str(err.value)


def test_wrong_header_and_broken_archive(tmp_path):
    path = tmp_path / "1_RZ_1_x.txt"
    path.write_text("frame,episode\nRZ_1_1,0\n")
    with pytest.raises(DataError, match=rf"{path}:1: expected the header"):
        read_labels(path)
    folder = tmp_path / "game"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for t in range(1, 4):
        name = write_trial(folder, t, make_rows(rng, 30))
    (folder / f"{name}.tar.bz2").write_bytes(b"not an archive")
    with pytest.raises(DataError, match=rf"{name}\.tar\.bz2: unreadable"):
        import_atari_head(folder, "hero", tmp_path / "out", length=L, sampling_freq=FREQ, image_size=(8, 8))
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.tmp-*"))


def test_cli_import_and_info(fixture, tmp_path, capsys):
    folder = tmp_path / "game"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for t in range(1, 5):
        write_trial(folder, t, make_rows(rng, 30))
    assert main(["import-atari-head", str(folder), "--game", "hero", "--out", str(tmp_path / "ds"),
                 "--length", "4", "--freq", "3", "--image-size", "8", "8"]) == 0
    assert main(["info", str(tmp_path / "ds")]) == 0
    out = capsys.readouterr().out
    assert "length L       4, sampling freq 3" in out and "event class    18 (END)" in out
    with pytest.raises(SystemExit):
        main(["import-atari-head", str(folder), "--game", "pong", "--out", str(tmp_path / "x")])
    assert "invalid choice: 'pong' (choose from 'hero'" in capsys.readouterr().err


def _png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height pixels (a decompression bomb's calling card)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def _replace_member(archive: Path, member: str, data: bytes, before: tuple[str, bytes] | None = None) -> None:
    with tarfile.open(archive, "r:bz2") as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(archive, "w:bz2") as tar:
        if before:
            info = tarfile.TarInfo(before[0])
            info.size = len(before[1])
            tar.addfile(info, io.BytesIO(before[1]))
        for m, payload in members:
            payload = data if m.name.endswith(member) else payload
            m.size = len(payload)
            tar.addfile(m, io.BytesIO(payload))


def test_decompression_bombs_are_skipped_and_counted(tmp_path, monkeypatch):
    import focus_tune.data.builtin.atari_head as atari_head

    folder = tmp_path / "game"
    folder.mkdir()
    rng = np.random.default_rng(3)
    names = [write_trial(folder, t, make_rows(rng, 30)) for t in range(1, 5)]
    # An image claiming 30000 x 30000 pixels: not decoded, counted.
    _replace_member(folder / f"{names[0]}.tar.bz2", "_1.png", _png_claiming(30000, 30000))
    # A zero-filled member bigger than the cap before every frame: the archive is cut there.
    monkeypatch.setattr(atari_head, "MAX_MEMBER_BYTES", 1 << 20)
    _replace_member(folder / f"{names[1]}.tar.bz2", "no-such-member", b"",
                    before=(f"{names[1]}/pad.bin", bytes(2 << 20)))
    out = import_atari_head(folder, "hero", tmp_path / "ds", length=L, sampling_freq=FREQ, image_size=(8, 8))
    counts = load_dataset(out).manifest.details["counts"]
    assert counts["frames_too_large"] == 1 and counts["archives_cut_oversized"] == 1
    assert counts["frames_imported"] > 0


@pytest.mark.parametrize("flag, value", [("--length", "0"), ("--freq", "0"), ("--stride", "-1"),
                                         ("--seed", "-1"), ("--length", "9" * 300)])
def test_cli_rejects_zero_and_negative_sizes(tmp_path, flag, value, capsys):
    argv = ["import-atari-head", str(tmp_path), "--game", "hero", "--out", str(tmp_path / "x"), flag, value]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"argument {flag}: expected an integer" in err
    assert len(err.splitlines()) == 1 and len(err) < 400
