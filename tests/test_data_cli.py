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
    (["build", "--game", "hero", "--profile", "huge"], "choose from 'smoke', 'quick', 'overconfident', 'paper'"),
    (["export"], "choose from 'build', 'import-atari-head', 'import-utkface', 'import-table', 'import-folder', "
                 "'import-arrays', 'info'"),
])
def test_invalid_choices_list_the_valid_ones(argv, listed, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and listed in capsys.readouterr().err


def test_module_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "focus_tune.data", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "import-atari-head" in result.stdout


def _cli(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "focus_tune.data", *argv], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_build_into_a_foreign_folder_deletes_nothing(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "manifest.json").write_text('{"my": "own manifest"}')
    (out / "paper.tex").write_text("years of work")
    result = _cli("build", "--game", "facemed", "--profile", "smoke", "--out", str(out))
    assert result.returncode == 2, result.stderr
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and str(out) in err and "not a focus_tune dataset" in err
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "paper.tex"]
    assert (out / "paper.tex").read_text() == "years of work"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_info_decodes_the_splits_and_refuses_nan_marginals(tmp_path):
    from test_data_store import _rewrite_marginals, write_small

    write_small(tmp_path / "ds")
    _rewrite_marginals(tmp_path / "ds", lambda m: m.__setitem__((0, 0), float("nan")))
    result = _cli("info", str(tmp_path / "ds"))
    assert result.returncode == 2
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and "test.parquet: exact_marginals hold 1 NaN" in err


@pytest.mark.parametrize("argv, flag", [
    (["import-utkface", "x", "--out", "y", "--image-size", "0"], "--image-size"),
    (["build", "--game", "hero", "--seed", "-1"], "--seed"),
])
def test_zero_and_negative_values_are_errors_not_defaults(argv, flag):
    result = _cli(*argv)
    assert result.returncode == 2 and result.stderr.startswith(f"error: argument {flag}: expected an integer >=")
    assert len(result.stderr.strip().splitlines()) == 1
