"""Storage that fills mid-search: a small tmpfs as --storage, filled up by the test once the
search has finished a few trials. The search must end with one error line naming the run
folder and the full disk (exit 2), leave a search state that parses and names only whole
checkpoints, and, once space is freed, finish with --resume with the winners of an
undisturbed search. Needs a tmpfs mount (root or CAP_SYS_ADMIN): skipped elsewhere."""
from __future__ import annotations

import errno
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from smoke_search import RUN, cli, finish, state_of

FILLED_AFTER = 4  # finished trials (of 17) before the disk is filled


@pytest.fixture
def small_tmpfs(tmp_path):
    mount = tmp_path / "store"
    mount.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command to make a small tmpfs")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _fill(folder: Path) -> Path:
    """Write a file until the filesystem is full; returns it."""
    filler = folder / "filler"
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(chunk)
        except OSError as err:
            assert err.errno == errno.ENOSPC, err
    with open(filler, "ab", buffering=0) as handle:  # the last partial MiB
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def _results(state_file: Path) -> dict:
    try:
        return json.loads(state_file.read_text())["results"]
    except (OSError, ValueError):
        return {}


@pytest.mark.slow
def test_a_full_disk_stops_the_search_and_resume_finishes_it(smoke_search, small_tmpfs, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    folder = small_tmpfs / RUN
    state_file = folder / "search_state.json"
    proc = cli(work, "--storage", str(small_tmpfs))  # MLflow (sqlite) and the data stay off the tmpfs
    deadline = time.time() + 300
    while len(_results(state_file)) < FILLED_AFTER:
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.2)
    filler = _fill(small_tmpfs)
    t0 = time.time()
    out = proc.communicate(timeout=300)[0]
    seconds = time.time() - t0
    assert proc.returncode == 2, out[-4000:]
    last = out.strip().splitlines()[-1]
    assert last.startswith("error: ") and len(last) < 700, out[-4000:]
    for words in (str(folder), "no space left on device", "free space", "--resume"):
        assert words in last, (words, last)
    rest = out.replace(last, "")
    assert "No space left" not in rest and "OSError" not in rest, rest[-4000:]  # no traceback, no second report
    print(f"error {seconds:.1f} s after the disk was full")
    assert not (folder / "search.lock").exists()

    # The state is a whole earlier version, and every checkpoint it names is whole.
    import torch

    saved = json.loads(state_file.read_text())
    assert len(saved["results"]) >= FILLED_AFTER
    for tid, path in saved["checkpoints"].items():
        torch.load(Path(path) / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert not list(folder.glob(".search_state.json.*")), "a temporary state file was left"

    filler.unlink()
    resumed = finish(cli(work, "--storage", str(small_tmpfs), "--resume"))
    assert "resuming:" in resumed
    after = json.loads(state_file.read_text())["results"]
    for tid, score in saved["results"].items():
        assert after[tid] == score, f"{tid} changed"
    assert after == state_of(smoke_search.work)["results"], "the winners and scores of an undisturbed search"
    assert (folder / "report" / "results.md").stat().st_size > 0
