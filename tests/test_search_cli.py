"""The search CLI's edges, without starting Ray: arguments, errors, storage locations."""

import json
import types
from pathlib import Path

import pytest

from focus_tune import search
from focus_tune.config.space import space_path
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


PAPER_DRY_RUN = ["--game", "hero", "--profile", "paper", "--dry-run", "--cluster-gpus", "8", "--gpus-per-trial", "0.5"]


def _own_rates(path: Path, device: str) -> Path:
    """A rates file as benchmarks/gpu_check.py --rates-out writes it, of a card of one's own."""
    path.write_text(json.dumps({
        "device": device, "measured": "2027-01-02", "command": "python benchmarks/gpu_check.py", "precision": "bf16",
        "batch_size": 256, "num_samples": 100, "train_samples_per_s_alone": {"3x84x84 L=300": 4000.0},
        "sharing_slowdown": {"1": 1.0, "0.5": 1.2}, "val_s_per_item_entry": 2e-5}))
    return path


def test_the_dry_run_names_the_gpu_of_its_rates_and_warns_for_another(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FOCUS_TUNE_GPU_RATES", raising=False)
    assert search.main([*PAPER_DRY_RUN, "--gpu-type", "A10G"]) == 0  # the packaged rates: one H200
    out = capsys.readouterr().out
    assert "time per training: rates measured on one NVIDIA H200 (2026-11-26" in out
    assert "24.8 billed" in out  # CLUSTER.md's and BENCHMARKS' 8 GPUs at 0.5
    (warning,) = [line for line in out.splitlines() if line.startswith("warning:")]
    assert warning.startswith("warning: the times above come from rates measured on one NVIDIA H200, not on the "
                              "cluster's A10G (--gpu-type)") and "--rates-out PATH" in warning
    assert search.main([*PAPER_DRY_RUN, "--gpu-type", "H200"]) == 0
    assert "warning:" not in capsys.readouterr().out
    assert search.main([*PAPER_DRY_RUN, "--gpu-type", "A10G", "--trial-minutes", "60"]) == 0
    assert "warning:" not in capsys.readouterr().out  # the user's time, not the rates

    # A10G rates of one's own (gpu_check.py --rates-out), by flag or by environment: named, no warning.
    # 200 epochs x 98553 items x 1.2 / 4000 samples/s + 20 validations x 16769 x 300 x 2e-5 s x 1.2: 139 min
    rates = _own_rates(tmp_path / "a10g.json", "NVIDIA A10G")
    assert search.main([*PAPER_DRY_RUN, "--rates", str(rates), "--gpu-type", "A10G"]) == 0
    out = capsys.readouterr().out
    assert "time per training: rates measured on one NVIDIA A10G (2027-01-02" in out
    assert "2h19m per training" in out and "H200" not in out and "warning:" not in out
    monkeypatch.setenv("FOCUS_TUNE_GPU_RATES", str(rates))
    assert search.main([*PAPER_DRY_RUN, "--gpu-type", "H200"]) == 0
    out = capsys.readouterr().out
    assert "rates measured on one NVIDIA A10G" in out
    assert "warning: the times above come from rates measured on one NVIDIA A10G, not on the cluster's H200" in out


def test_rates_and_gpu_type_are_checked(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FOCUS_TUNE_GPU_RATES", raising=False)
    missing = tmp_path / "nope.json"
    assert search.main([*PAPER_DRY_RUN, "--rates", str(missing)]) == 2
    assert f"error: --rates {missing}: cannot read the GPU rates (FileNotFoundError" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"device": "NVIDIA A10G"}))
    monkeypatch.setenv("FOCUS_TUNE_GPU_RATES", str(bad))
    assert search.main(PAPER_DRY_RUN) == 2
    err = capsys.readouterr().err
    assert f"error: $FOCUS_TUNE_GPU_RATES={bad}: not a rates file of benchmarks/gpu_check.py: no measured," in err
    for flag in (["--gpu-type", "A10G"], ["--rates", str(bad)]):
        assert search.main(["--game", "hero", *flag]) == 2
        err = capsys.readouterr().err
        assert "--gpu-type and --rates are what the dry run costs with: use them with --dry-run" in err


def test_ray_client_addresses_are_refused_with_what_to_do(capsys):
    assert search.main(["--game", "hero", "--profile", "smoke", "--address", "ray://head:10001"]) == 2
    err = capsys.readouterr().err
    assert "--address ray://head:10001: Ray Client (ray://) is not supported" in err and "--address auto" in err


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
    s3 = types.SimpleNamespace(path="bucket/focus/x/checkpoint_000001",
                               filesystem=types.SimpleNamespace(type_name="s3"))
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


def test_trial_minutes_without_cluster_gpus_is_refused(capsys):
    """--trial-minutes times the plan on --cluster-gpus GPUs: alone it would be read and not
    used, so it is refused with one line naming both flags."""
    assert search.main(["--game", "hero", "--profile", "quick", "--dry-run", "--trial-minutes", "2"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "--trial-minutes 2" in lines[0] and "--cluster-gpus" in lines[0], captured.err
    assert "dry run" not in captured.out  # refused before the plan is printed
    assert search.main(["--game", "hero", "--profile", "quick", "--dry-run", "--trial-minutes", "2",
                        "--cluster-gpus", "1"]) == 0
    assert "estimated wall time" in capsys.readouterr().out
