"""The project as a built wheel: installed outside the checkout, every module of the package
imports from it, and from an empty folder the search finds its packaged search spaces and
GPU rates (a dry run of the paper profile on a GPU cluster, with packing, reads every data file
the package carries). The search itself runs end to end in the other tests, from the checkout's
install: what the wheel adds is what it holds."""

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


IMPORT_ALL = r"""
import importlib, sys
from pathlib import Path
site = Path(sys.argv[1]).resolve()
names = sorted(".".join(p.relative_to(site).with_suffix("").parts).removesuffix(".__init__")
               for p in (site / "focus_tune").rglob("*.py") if p.name != "__main__.py")
for name in names:
    module = importlib.import_module(name)
    assert Path(module.__file__).resolve().is_relative_to(site), (name, module.__file__)
print(len(names), "modules")
"""


@pytest.mark.slow
def test_a_built_wheel_holds_every_module_and_the_data_the_search_reads(tmp_path):
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
    packaged = sorted(str(p.relative_to(site)) for p in (site / "focus_tune").rglob("*")
                      if p.is_file() and p.suffix not in (".py", ".pyc") and "search_spaces" not in p.parts)
    assert packaged == ["focus_tune/procedure/gpu_pack_rates.json", "focus_tune/procedure/gpu_rates.json"], packaged
    checkout = sorted(str(p.relative_to(REPO)) for p in (REPO / "focus_tune").rglob("*.py"))
    assert sorted(str(p.relative_to(site)) for p in (site / "focus_tune").rglob("*.py")) == checkout
    empty = tmp_path / "empty"
    empty.mkdir()
    # The wheel's package first on the path (the checkout's editable install comes after it).
    env = dict(os.environ, PYTHONPATH=str(site), PYTHONUNBUFFERED="1")
    imported = subprocess.run([sys.executable, "-c", IMPORT_ALL, str(site)], cwd=empty, env=env, capture_output=True,
                              text=True, timeout=300)
    assert imported.returncode == 0, imported.stderr[-3000:]
    where = subprocess.run([sys.executable, "-c", "import focus_tune.config as c; print(c.space_path('hero'))"],
                           cwd=empty, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where) == site / "focus_tune" / "search_spaces" / "hero.yaml"
    proc = subprocess.run([sys.executable, "-m", "focus_tune.search", "--game", "hero", "--profile", "paper",
                           "--dry-run", "--cluster-gpus", "8", "--gpus-per-trial", "1", "--pack", "auto"],
                          cwd=empty, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "rates measured on one NVIDIA H200" in proc.stdout  # gpu_rates.json
    assert "the pack rates measured on one NVIDIA H200" in proc.stdout  # gpu_pack_rates.json
    assert "final-time-dependent-s2" in proc.stdout  # hero.yaml's paper profile, every round
    assert sorted(p.name for p in empty.iterdir()) == []  # a dry run writes nothing, and nothing was copied here
