"""The search CLI's edges, without starting Ray: arguments, errors, storage locations."""

import types
from pathlib import Path

import pytest

from focus_tune import search
from focus_tune.config import space_path
from focus_tune.search import storage


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
    args = types.SimpleNamespace(storage="s3://bucket/focus", game="hero", profile="paper", seed=1)
    run_dir = storage.run_dir(args)
    assert run_dir == Path("runs") / "hero-paper-seed1"
    assert storage.tune_storage(args.storage, run_dir) == "s3://bucket/focus/hero-paper-seed1"
    local = types.SimpleNamespace(storage="/mnt/focus/runs", game="hero", profile="paper", seed=1)
    assert storage.run_dir(local) == Path("/mnt/focus/runs/hero-paper-seed1")
    s3 = types.SimpleNamespace(path="bucket/focus/x/checkpoint_000001", filesystem=types.SimpleNamespace(type_name="s3"))
    assert storage.checkpoint_uri(s3) == "s3://bucket/focus/x/checkpoint_000001"
    disk = types.SimpleNamespace(path="/tmp/x/checkpoint_000001", filesystem=types.SimpleNamespace(type_name="local"))
    assert storage.checkpoint_uri(disk) == "/tmp/x/checkpoint_000001"
