"""The Python API: docs/GUIDE.md's "Python API" example runs as written (a smoke search of
FaceMed in a fresh folder) and returns the run's tables and URIs; its keywords are the CLI's
flags; ``import focus_tune`` stays light."""

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


def guide_example() -> str:
    text = (ROOT / "docs" / "GUIDE.md").read_text()
    section = text[text.index("\n## Python API\n"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    work = tmp_path_factory.mktemp("api")
    before = os.getcwd()
    os.chdir(work)
    out = io.StringIO()
    try:  # printed into a plain stream, as a notebook's (Tune pickles its callbacks with the stream they print to)
        scope: dict = {}
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            exec(compile(guide_example(), "docs/GUIDE.md", "exec"), scope)
    finally:
        os.chdir(before)
    scope["printed"] = out.getvalue()
    return work, scope


def test_the_guides_example_returns_the_runs_tables_and_uris(ran):
    work, scope = ran
    result = scope["result"]
    folder = work / "runs" / "facemed-smoke-seed0"
    assert result.run_folder == Path("runs/facemed-smoke-seed0") and (work / result.config_path).is_file()
    search = json.loads((folder / "report" / "search.json").read_text())
    assert result.chosen == search["chosen"] and result.schedule == search["chosen"]["time-dependent"]
    assert [d["stage"] for d in result.decisions] == [s["stage"] for s in search["stages"]]
    pd.testing.assert_frame_equal(result.results, pd.read_csv(folder / "report" / "results.csv"))
    assert {"none", "constant", "time-dependent", "image-blind"} <= set(result.means.index)
    assert result.means.loc["time-dependent", "test/marginal/ece"] == pytest.approx(
        result.per_seed.loc["time-dependent", "test/marginal/ece"].mean())
    assert sorted(result.per_seed.loc["none"].index) == [0, 1]  # final_seeds=2 applied
    parent = json.loads((folder / "search_state.json").read_text())["parent_run_id"]
    assert result.model_uris == {f: f"runs:/{parent}/model-{f}" for f in ("none", "constant", "time-dependent")}
    assert all((work / p / "model.json").is_file() for p in result.model_folders.values())
    loaded, trial = scope["loaded"], scope["trial"]
    assert loaded.family == "time-dependent" and loaded.length == trial.length and loaded.class_names
    assert trial.trial_id.startswith("stage1-") and trial.family == "time-dependent"
    assert not trial.model.training
    assert f"chosen time-dependent schedule: {result.schedule}" in scope["printed"]  # the CLI's output


def test_a_trial_checkpoint_loads_as_its_model(ran):
    import torch

    work, scope = ran
    checkpoint = next((work / "runs" / "facemed-smoke-seed0" / "search").glob("none-s0/checkpoint_*"))
    loaded = scope["focus_tune"].load_model(checkpoint)
    saved = torch.load(checkpoint / "checkpoint.pt", map_location="cpu", weights_only=True)["model"]
    assert all(torch.equal(v, saved[k]) for k, v in loaded.model.state_dict().items())
    assert loaded.trial_id == "none-s0" and loaded.image_shape == scope["loaded"].image_shape


def test_keywords_are_the_clis_flags_with_its_defaults():
    """run_search's keywords are SearchOptions' fields, the parser's flags (tests/test_options.py
    checks each flag and the former keywords); their defaults are the fields', the flags' too."""
    from dataclasses import fields

    from focus_tune.search.api import KEYWORDS, search_options
    from focus_tune.search.cli import PRINT_ONLY, SearchOptions, parse_options

    names = {f.name for f in fields(SearchOptions)}
    assert set(KEYWORDS) == names - {"scenario", "profile", *PRINT_ONLY}
    assert search_options(game="hero") == parse_options(["--game", "hero"])


@pytest.mark.parametrize("kwargs, words", [
    ({"game": "hero", "name": "../up"}, "name='../up': '../up': a run folder's name"),
    ({"game": "nope"}, "game='nope': choose one of"),
    ({"game": "hero", "overrides": {"train.racing": True}}, "--set: train.racing: True is not one of"),
    ({"game": "hero", "overrides": ["train.epochs=0x10"]}, "--set train.epochs: '0x10'"),
    ({}, "give --game (a built-in scenario) or --data DIR"),
])
def test_a_bad_argument_is_the_clis_one_line_error(tmp_path, kwargs, words):
    from focus_tune.errors import ConfigError, SearchError
    from focus_tune.search.api import run_search

    with pytest.raises((ConfigError, SearchError)) as err:
        run_search(storage=str(tmp_path / "runs"), **kwargs)
    assert str(err.value).startswith(words), str(err.value)


def test_import_focus_tune_loads_no_heavy_module():
    code = ("import sys, focus_tune; heavy = [m for m in ('torch', 'ray', 'mlflow', 'pandas') if m in sys.modules]; "
            "print(heavy, callable(focus_tune.run_search))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == "[] True\n"
