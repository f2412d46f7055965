"""The options of the three commands, declared once: every field of ``SearchOptions`` is exactly
one flag of the parser written from it; --game, --profile and --data are every command's
(``ScenarioFlags``), with one rule for the scenario without --game; ``run_search`` takes
``options=SearchOptions(...)`` and still every keyword it took before, without warnings."""

from __future__ import annotations

import re
import warnings
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from focus_tune.arguments import flag_name
from focus_tune.config.scenarios import ScenarioFlags, scenario_from
from focus_tune.errors import DataError, SearchError
from focus_tune.search.api import KEYWORDS, search_options
from focus_tune.search.cli import SearchOptions, build_parser, parse_options

ROOT = Path(__file__).resolve().parents[1]
RULE = "give --game (a built-in scenario) or --data DIR (a dataset folder of your own)"
# A value for each flag that takes one and has no choices (a switch takes none, a choice the first
# that is not its default); a field added to SearchOptions needs one here.
SAMPLES = {"data": "d", "space": "s.yaml", "data_root": "cache", "storage": "elsewhere", "address": "auto",
           "tracking_uri": "sqlite:///x.db", "cpus_per_trial": "2", "gpus_per_trial": "0.5", "max_concurrent": "3",
           "pack": "2", "seed": "4", "final_seeds": "2", "joint_budget": "5", "register": "mine", "max_retries": "1",
           "overrides": "train.epochs=2", "name": "try", "experiment": "exp", "cluster_gpus": "2",
           "trial_minutes": "1.5", "gpu_type": "A10G", "rates": "r.json"}
# run_search's keywords before it took options= (each a flag of a search that runs).
FORMER_KEYWORDS = ("game", "data", "profile", "space", "overrides", "seed", "final_seeds", "data_root", "storage",
                   "name", "experiment", "tracking_uri", "address", "cpus_per_trial", "gpus_per_trial",
                   "max_concurrent", "pack", "wait_for_resources", "resume", "joint_search", "joint_budget", "register",
                   "max_retries", "tensorboard", "allow_small", "trainable")


def _dataset(root: Path, name: str = "mine") -> Path:
    from focus_tune.data import write_dataset

    rng = np.random.default_rng(0)
    seqs = rng.integers(0, 2, (20, 4))
    return write_dataset(root / name, images=rng.integers(0, 255, (20, 1, 3, 3), dtype=np.uint8), sequences=seqs,
                         classes=["a", "b", "end"], event="end", name=name)


def test_every_field_of_the_search_options_is_exactly_one_flag():
    parser = build_parser()
    flags = [flag_name(f) for f in fields(SearchOptions)]
    assert len(set(flags)) == len(flags)
    usage = set(re.findall(r"\[(--[a-z-]+)", parser.format_usage()))
    assert usage == {*flags, "--version"}
    base = vars(parser.parse_args(["--game", "hero"]))
    assert set(base) == {f.name for f in fields(SearchOptions)}
    for f in fields(SearchOptions):
        if f.name == "scenario":
            continue
        if isinstance(f.default, bool):
            given = [flag_name(f)]
        elif f.metadata["flag"].choices:
            given = [flag_name(f), next(c for c in f.metadata["flag"].choices if c != f.default)]
        else:
            given = [flag_name(f), SAMPLES[f.name]]
        changed = {k for k, v in vars(parser.parse_args(["--game", "hero", *given])).items() if v != base[k]}
        assert changed == {f.name}, (f.name, changed)


def test_the_parser_keeps_the_flags_defaults_help_and_one_line_errors(capsys):
    opts = parse_options(["--game", "hero"])
    assert opts == search_options(game="hero")  # every default the field's
    text = build_parser().format_help()
    for words in ("--game {facemed,hero,", "--set KEY=VALUE", "--register NAME", "--rates PATH", "--version",
                  "uses the generic search space", "smoke: seconds (tests)"):
        assert words in text, words
    with pytest.raises(SystemExit) as stop:
        parse_options(["--game", "hero", "--joint-search", "random"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1
    assert "argument --joint-search: invalid choice: 'random' (choose from 'grid', 'optuna')" in err


@pytest.mark.parametrize("parse", ["search", "recipe", "replicate"])
def test_every_command_takes_game_profile_and_data_from_one_place(parse, tmp_path, capsys):
    from focus_tune.recipe.tuning import build_parser as recipe_parser
    from focus_tune.replicate.cli import parse as replicate_parse

    run = {"search": lambda argv: parse_options(argv), "recipe": lambda argv: recipe_parser().parse_args(argv),
           "replicate": replicate_parse}[parse]
    args = run(["--game", "hero", "--profile", "smoke", "--data", str(tmp_path)])
    assert (args.scenario, args.profile, args.data) == ("hero", "smoke", tmp_path)  # ScenarioFlags' fields
    assert [flag_name(f) for f in fields(ScenarioFlags)] == ["--game", "--profile", "--data"]
    with pytest.raises(SystemExit):
        run(["--game", "pong"])
    err = capsys.readouterr().err
    assert "argument --game: invalid choice: 'pong' (choose from 'facemed', 'hero'" in err
    with pytest.raises(SystemExit):
        run(["--profile", "fast"])
    assert "choose from 'smoke', 'quick', 'overconfident', 'paper'" in capsys.readouterr().err


def test_the_scenario_rule_is_one_function_with_one_message(tmp_path, capsys):
    from focus_tune.recipe.tuning import main as recipe_main
    from focus_tune.replicate.cli import parse as replicate_parse
    from focus_tune.search.api import run_search

    assert scenario_from("hero", None) == "hero"
    data = _dataset(tmp_path)
    assert scenario_from(None, data) == "mine" == parse_options(["--data", str(data)]).scenario
    assert replicate_parse(["--data", str(data)]).scenario == "mine"
    with pytest.raises(SearchError, match=re.escape(RULE)):
        scenario_from(None, None)
    with pytest.raises(DataError, match="not a folder"):
        scenario_from(None, tmp_path / "none")
    for parse in (parse_options, replicate_parse):
        with pytest.raises(SystemExit) as stop:
            parse(["--profile", "smoke"])
        assert stop.value.code == 2 and RULE in capsys.readouterr().err
    assert recipe_main(["--profile", "smoke", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == f"error: {RULE}\n"
    with pytest.raises(SearchError, match=re.escape(RULE)):
        run_search(storage=str(tmp_path / "runs"))


def test_run_search_takes_the_options_or_every_former_keyword_alike(tmp_path):
    import inspect

    from focus_tune.search.api import run_search

    assert {*KEYWORDS, "game", "profile", "trainable"} == set(FORMER_KEYWORDS)
    assert [p for p in inspect.signature(run_search).parameters] == ["game", "profile", "options", "trainable",
                                                                      "flags"]
    flags = ["--game", "hero", "--profile", "smoke", "--seed", "2", "--set", "train.epochs=2", "--name", "try",
             "--max-concurrent", "2", "--pack", "auto", "--data-root", str(tmp_path), "--tensorboard"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no name changed: no DeprecationWarning
        by_keywords = search_options(game="hero", profile="smoke", seed=2, overrides={"train.epochs": 2}, name="try",
                                     max_concurrent=2, pack="auto", data_root=str(tmp_path), tensorboard=True)
        by_options = search_options(game="hero", profile="smoke", options=SearchOptions(
            seed=2, overrides=["train.epochs=2"], name="try", max_concurrent=2, pack="auto", data_root=tmp_path,
            tensorboard=True))
        in_options = search_options(options=SearchOptions(scenario="hero", profile="smoke", seed=2, name="try",
                                                          overrides=[("train.epochs", 2)], max_concurrent=2,
                                                          pack="auto", data_root=tmp_path, tensorboard=True))
        defaults = {f.name: f.default for f in fields(SearchOptions) if f.name in KEYWORDS}
        assert search_options(game="hero", profile="quick", **defaults) == parse_options(["--game", "hero"])
    assert by_keywords == by_options == in_options == parse_options(flags)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"game": "hero", "dry_run": True}, TypeError, "unexpected keyword argument 'dry_run'"),
    ({"game": "hero", "options": SearchOptions(), "seed": 1}, TypeError, "in options= or as keywords, not both"),
    ({"game": "hero", "options": SearchOptions(scenario="facemed")}, SearchError,
     "game='hero' and options.scenario='facemed': give one of them"),
    ({"profile": "smoke", "options": SearchOptions(scenario="hero", profile="paper")}, SearchError,
     "profile='smoke' and options.profile='paper'"),
    ({"options": SearchOptions(scenario="hero", dry_run=True)}, SearchError, "options.dry_run: run_search runs"),
    ({"options": SearchOptions(scenario="hero", seed=-1)}, SearchError, "seed=-1: expected an integer >= 0"),
    ({"options": SearchOptions(scenario="hero", resume="yes")}, SearchError, "resume='yes': expected True or False"),
    ({"game": "hero", "joint_search": "random"}, SearchError, "joint_search='random': choose one of grid, optuna"),
])
def test_a_bad_call_names_what_is_wrong(kwargs, error, words):
    with pytest.raises(error) as err:
        search_options(**kwargs)
    assert words in str(err.value), str(err.value)


def test_no_parser_is_read_through_argparse_internals():
    private = "._" + "actions"
    users = [p for p in (ROOT / "focus_tune").rglob("*.py") if private in p.read_text()]
    assert users == []
