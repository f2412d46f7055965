"""The search CLI's edges, without starting Ray: arguments, errors, storage locations."""

import json
import types
from pathlib import Path

import pytest

from focus_tune import search
from focus_tune.config import space_path
from focus_tune.search import storage
from focus_tune.search.cli import parse_options


def test_unknown_game_lists_the_choices(capsys):
    with pytest.raises(SystemExit):
        search.build_parser().parse_args(["--game", "pong"])
    assert "facemed" in capsys.readouterr().err


def test_malformed_space_names_file_and_field(tmp_path, capsys):
    bad = tmp_path / "mine.yaml"
    bad.write_text(Path(space_path("hero")).read_text().replace("k1: 3", "k1: 0", 1))
    assert search.main(["--game", "hero", "--space", str(bad), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "grid.k1" in err


def test_dry_run_prints_every_round_without_ray(capsys):
    assert search.main(["--game", "hero", "--profile", "quick", "--dry-run", "--cluster-gpus", "2",
                        "--trial-minutes", "3"]) == 0
    out = capsys.readouterr().out
    for stage in ("stage1", "stage2", "stage3", "joint", "final time-dependent"):
        assert stage in out
    assert "19 trainings + 3 test evaluations in 5 rounds" in out


def test_dry_run_costs_packs_from_the_measured_rates(capsys):
    """The paper H.E.R.O. search with --pack auto on 8 GPUs: auto takes 16 from the H200's
    rates, and the cost is BENCHMARKS' (packs of 16: 290 min per pack, 24.2 h, 11.8 GPU-hours busy)."""
    assert search.main(["--game", "hero", "--profile", "paper", "--dry-run", "--pack", "auto", "--gpus-per-trial",
                        "1", "--cluster-gpus", "8"]) == 0
    out = capsys.readouterr().out
    assert "--pack auto: 16: within 10% of the best aggregate rate measured for 3x84x84 L=300" in out
    assert "with --pack 16:" in out and "290 min per pack" in out and "24.2 h, GPU-hours 11.8 busy" in out
    assert search.main(["--game", "hero", "--profile", "quick", "--dry-run", "--pack", "auto"]) == 0
    assert "--pack auto: no GPU per trial: one training per trial" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        search.main(["--game", "hero", "--dry-run", "--pack", "0"])
    assert exit_.value.code == 2 and "argument --pack: expected an integer >= 1 or 'auto'" in capsys.readouterr().err


def test_final_seeds_flag_sets_the_retrainings_per_family(capsys):
    # 13 search trainings; each family's seed-0 final reuses its search trial (a test
    # evaluation), so 5 seeds add 3 x 4 trainings.
    assert search.main(["--game", "hero", "--profile", "quick", "--dry-run", "--final-seeds", "5"]) == 0
    out = capsys.readouterr().out
    assert "25 trainings + 3 test evaluations" in out
    with pytest.raises(SystemExit) as exit_:
        search.main(["--game", "hero", "--dry-run", "--final-seeds", "0"])
    assert exit_.value.code == 2 and "argument --final-seeds: expected an integer >= 1" in capsys.readouterr().err


def test_existing_search_needs_resume(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    args = ["--game", "facemed", "--profile", "smoke", "--data-root", str(data), "--storage", str(tmp_path / "r")]
    run = tmp_path / "r" / "facemed-smoke-seed0"
    run.mkdir(parents=True)
    (run / search.STATE_FILE).write_text("{}")
    assert search.main(args) == 2
    assert "pass --resume" in capsys.readouterr().err


def test_uri_storage_keeps_state_local_and_checkpoints_as_uris():
    args = parse_options(["--game", "hero", "--profile", "paper", "--seed", "1", "--storage", "s3://bucket/focus"])
    run_dir = storage.run_dir(args)
    assert run_dir == Path("runs") / "hero-paper-seed1"
    assert storage.tune_storage(args.storage, run_dir) == "s3://bucket/focus/hero-paper-seed1"
    local = parse_options(["--game", "hero", "--profile", "paper", "--seed", "1", "--storage", "/mnt/focus/runs"])
    assert storage.run_dir(local) == Path("/mnt/focus/runs/hero-paper-seed1")
    s3 = types.SimpleNamespace(path="bucket/focus/x/checkpoint_000001", filesystem=types.SimpleNamespace(type_name="s3"))
    assert storage.checkpoint_uri(s3) == "s3://bucket/focus/x/checkpoint_000001"
    disk = types.SimpleNamespace(path="/tmp/x/checkpoint_000001", filesystem=types.SimpleNamespace(type_name="local"))
    assert storage.checkpoint_uri(disk) == "/tmp/x/checkpoint_000001"


def test_set_overrides_the_printed_config(capsys):
    assert search.main(["--game", "hero", "--profile", "smoke", "--set", "train.epochs=2", "--set",
                        "grid.lambdas=[0.01,0.1]", "--set", "final_seeds=2", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "\n  epochs: 2\n" in out and "lambdas: [0.01, 0.1]" in out and "final_seeds: 2" in out
    assert "# With --set train.epochs=2 --set grid.lambdas=[0.01, 0.1] --set final_seeds=2" in out
    assert search.main(["--game", "hero", "--profile", "smoke", "--print-config"]) == 0
    assert "With --set" not in capsys.readouterr().out


@pytest.mark.parametrize("flag, words", [
    ("train.epochs=-1", "error: --set: train.epochs: -1 must be >= 1"),
    ("train.nope=1", "error: --set: train.nope: unknown key; allowed here: lr, batch_size, epochs"),
    ("nope=1", "error: --set: nope: unknown key; --set takes final_seeds, train.<key> or grid.<key>"),
    ("grid.lambdas=[0.01,-0.1]", "error: --set: grid.lambdas[1]: -0.1 is negative; lambdas must be >= 0"),
    ("train.epochs", "error: --set 'train.epochs': expected KEY=VALUE"),
])
def test_a_bad_override_is_one_line_naming_the_key(capsys, flag, words):
    assert search.main(["--game", "hero", "--profile", "smoke", "--set", flag, "--print-config"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(words) and captured.err.count("\n") == 1, captured.err


def test_final_seeds_is_given_once(capsys):
    assert search.main(["--game", "hero", "--final-seeds", "2", "--set", "final_seeds=3", "--print-config"]) == 2
    assert "--final-seeds and --set final_seeds" in capsys.readouterr().err


def test_version_prints_the_package_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        search.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"focus-tune {version('focus-tune')}\n"


def test_name_and_experiment_name_the_run_folder_and_the_mlflow_runs(capsys):
    plain = parse_options(["--game", "hero", "--profile", "smoke"])
    assert (storage.run_dir(plain), plain.parent_run_name, plain.experiment_name) == (
        Path("runs/hero-smoke-seed0"), "search-smoke-seed0", "focus-tune/hero")
    named = parse_options(["--game", "hero", "--profile", "smoke", "--name", "mytry", "--experiment", "my-exp"])
    assert (storage.run_dir(named), named.parent_run_name, named.experiment_name) == (
        Path("runs/mytry"), "mytry", "my-exp")
    with pytest.raises(SystemExit):
        parse_options(["--game", "hero", "--name", "../up"])
    assert "argument --name: '../up': a run folder's name" in capsys.readouterr().err


@pytest.mark.parametrize("made, given, words", [
    ({"overrides": {"train.epochs": 3}}, ["--set", "train.epochs=2"],
     "cannot resume: it was made with --set train.epochs=3, this command gives --set train.epochs=2"),
    ({"overrides": {"train.epochs": 3}}, [],
     "it was made with --set train.epochs=3, this command gives no --set train.epochs"),
    ({}, ["--set", "grid.k1=1"], "it was made with no --set grid.k1, this command gives --set grid.k1=1"),
    ({"experiment": "my-exp"}, ["--experiment", "other"],
     "its MLflow runs are in --experiment my-exp, this command gives --experiment other"),
])
def test_resume_with_other_overrides_is_refused_by_name(tmp_path, capsys, monkeypatch, made, given, words):
    """The state's fingerprint holds the overrides (and the --experiment) it was made with
    (storage.fingerprint); a resume that gives others names the one that differs, before anything runs."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "r" / "facemed-smoke-seed0"
    run.mkdir(parents=True)
    (run / search.STATE_FILE).write_text(json.dumps({"fingerprint": {"config": {}, **made}}))
    args = ["--game", "facemed", "--profile", "smoke", "--data-root", str(tmp_path / "data"), "--storage",
            str(tmp_path / "r"), "--resume", *given]
    assert search.main(args) == 2
    assert words in capsys.readouterr().err
