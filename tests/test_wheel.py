"""The project as a built wheel: installed outside the checkout, from an empty folder, the main
job finds its packaged search spaces and runs (the smoke profile)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _checkout_copy(dest: Path) -> Path:
    """The tracked files only (what a clone has), links kept as links: no build leftovers."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src, dst = REPO / name, dest / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        elif src.is_file():
            shutil.copy2(src, dst)
    return dest


@pytest.mark.slow
def test_a_built_wheel_runs_the_smoke_search_from_an_empty_folder(tmp_path):
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs the git checkout")
    source = _checkout_copy(tmp_path / "src")
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
                    str(source)], check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("focus_tune-*.whl")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    assert sorted(p.name for p in (site / "focus_tune" / "search_spaces").iterdir()) == sorted(
        p.name for p in (REPO / "search_spaces").glob("*.yaml"))
    empty = tmp_path / "empty"
    empty.mkdir()
    # The wheel's package first on the path (the checkout's editable install comes after it).
    env = dict(os.environ, PYTHONPATH=str(site), PYTHONUNBUFFERED="1")
    where = subprocess.run([sys.executable, "-c", "import focus_tune.config as c; print(c.space_path('hero'))"],
                           cwd=empty, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where) == site / "focus_tune" / "search_spaces" / "hero.yaml"
    proc = subprocess.run([sys.executable, "-m", "focus_tune.search", "--game", "hero", "--profile", "smoke"],
                          cwd=empty, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "chosen time-dependent schedule:" in proc.stdout
    assert (empty / "runs" / "hero-smoke-seed0" / "report" / "results.md").is_file()
    assert not list(empty.glob("search_spaces"))  # nothing copied next to the job
