"""`python -m focus_tune.data`: build, info, and choices that fail with the valid list."""
from __future__ import annotations

import subprocess
import sys

import pytest

from focus_tune.data import load_dataset
from focus_tune.data.__main__ import main


def test_build_then_info(tmp_path, capsys):
    out = tmp_path / "fm"
    assert main(["build", "--game", "facemed", "--profile", "smoke", "--out", str(out), "--seed", "2"]) == 0
    text = capsys.readouterr().out
    assert f"wrote {out}" in text and "name           facemed-smoke-seed2" in text
    assert load_dataset(out).manifest.seed == 2
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "train       48 items, mean time-to-event" in text and "years" in text
    assert "entry frequencies: healthy" in text and "condition class 0 (healthy)" in text


def test_info_on_a_corrupted_dataset_names_the_file(tmp_path, capsys):
    out = tmp_path / "fm"
    main(["build", "--game", "facemed", "--profile", "smoke", "--out", str(out)])
    (out / "test.parquet").write_bytes((out / "test.parquet").read_bytes()[:100])
    assert main(["info", str(out)]) == 2
    assert "test.parquet: SHA-256" in capsys.readouterr().err


@pytest.mark.parametrize("argv, listed", [
    (["build", "--game", "pong"], "choose from 'facemed', 'hero', 'seaquest', 'riverraid', 'bankheist', 'roadrunner'"),
    (["build", "--game", "hero", "--profile", "huge"], "choose from 'smoke', 'quick', 'paper'"),
    (["export"], "choose from 'build', 'import-atari-head', 'import-utkface', 'info'"),
])
def test_invalid_choices_list_the_valid_ones(argv, listed, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and listed in capsys.readouterr().err


def test_module_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "focus_tune.data", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "import-atari-head" in result.stdout
