"""The recipe stage (python -m focus_tune.recipe, focus_tune.run_recipe): its space file, a
smoke-budget run end to end on a small dataset of one's own (Ray Tune's OptunaSearch and
ASHAScheduler, val/ce every epoch, MLflow runs, space.yaml that the search takes, the regime's
numbers), and the lambda search's note on an unchecked recipe."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from focus_tune.config.space import load_search_config
from focus_tune.data import write_dataset
from focus_tune.errors import ConfigError
from focus_tune.recipe.tuning import load_recipe_space, recipe_train, regime_of, space_with_recipe

REPO = Path(__file__).resolve().parents[1]


def _dataset(root: Path, name: str = "mine") -> Path:
    """60 items of 1x5x7 images and sequences of 6 entries (as tests/test_own_data.py makes one)."""
    rng = np.random.default_rng(0)
    n, L = 60, 6
    seqs = rng.integers(0, 2, (n, L))
    seqs[::5, 3] = 2
    seqs[::5, 4:] = -1
    return write_dataset(root / name, images=rng.integers(0, 255, (n, 1, 5, 7), dtype=np.uint8), sequences=seqs,
                         classes=["a", "b", "end"], event="end", name=name)


def test_the_recipe_space_resolves_per_profile_and_refuses_bad_files(tmp_path):
    smoke, quick = load_recipe_space(None, "smoke"), load_recipe_space(None, "quick")
    assert set(quick.dims) == {"lr", "lr_schedule", "epochs", "encoder_width", "batch_size"}
    assert smoke.max_epochs == 3 and quick.max_epochs == 20 and smoke.trials == 3
    assert smoke.dims["lr_schedule"] == quick.dims["lr_schedule"]  # a profile replaces only the dimensions it lists
    hand = {"lr": 2e-3, "lr_schedule": "decay", "epochs": 10, "encoder_width": 32, "batch_size": 64}
    assert quick.holds(hand) and not quick.holds({**hand, "epochs": 7})
    bad = tmp_path / "recipe.yaml"
    text = (REPO / "search_spaces" / "recipe.yaml").read_text()
    for old, new, words in [("{choice: [constant, onecycle, decay]}", "{choice: [constant, cosine]}", "lr_schedule"),
                            ("{loguniform: [3.0e-4, 1.0e-2]}", "{loguniform: [1.0e-2, 3.0e-4]}", "below high"),
                            ("reduction_factor: 2 #", "reduction_factor: 1 #", "above 1"),
                            ("  batch_size: {choice: [32, 64, 128]}", "  batch_size: {uniform: [32, 128]}", "integer")]:
        bad.write_text(text.replace(old, new, 1))
        with pytest.raises(ConfigError, match=words):
            load_recipe_space(bad, "quick")


def test_the_recipe_becomes_the_profiles_train_and_keeps_a_race_epoch_inside(tmp_path):
    from focus_tune.config.generic import generic_space
    from focus_tune.config.space import parse_search_space

    raw = generic_space("mine", 40)
    base = parse_search_space(raw, "quick", tmp_path / "x.yaml").train
    recipe = {"lr": 5e-4, "lr_schedule": "onecycle", "epochs": 5, "encoder_width": 16, "batch_size": 32}
    out = space_with_recipe(raw, "quick", recipe, base)
    cfg = parse_search_space(out, "quick", tmp_path / "space.yaml")
    assert (cfg.train.lr, cfg.train.lr_schedule, cfg.train.epochs, cfg.train.encoder_width,
            cfg.train.batch_size) == (5e-4, "onecycle", 5, 16, 32)
    assert cfg.train.racing == "stop" and cfg.train.race_at == 2  # 5 was the base's, not inside 5 epochs
    assert cfg.grid == parse_search_space(raw, "quick", tmp_path / "x.yaml").grid
    assert recipe_train(base, {**recipe, "epochs": 1}).racing == "off"
    space = load_recipe_space(None, "quick")
    assert regime_of(0.50, 0.60, 0.02, 0.70, space)["in_regime"]
    assert not regime_of(0.50, 0.53, 0.02, 0.70, space)["in_regime"]  # 0.03 < 2 SE
    assert not regime_of(0.50, 0.60, 0.02, 0.50, space)["in_regime"]


@pytest.fixture(scope="module")
def recipe_run(tmp_path_factory):
    import focus_tune

    root = tmp_path_factory.mktemp("recipe")
    data = _dataset(root)
    result = focus_tune.run_recipe(data=data, profile="smoke", num_cpus=1, out=root / "out",
                                   tracking_uri=f"sqlite:///{root / 'mlflow.db'}", quiet=True)
    return root, data, result


def test_a_smoke_recipe_run_uses_optuna_and_asha_and_reports_val_ce_every_epoch(recipe_run):
    from ray import cloudpickle
    from ray.tune import ExperimentAnalysis
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    root, data, result = recipe_run
    experiment = result.out_folder / "tune" / "recipe"
    with open(experiment / "tuner.pkl", "rb") as handle:
        tune_config = cloudpickle.load(handle)["_tune_config"]
    assert isinstance(tune_config.search_alg, OptunaSearch) and isinstance(tune_config.scheduler, ASHAScheduler)
    assert tune_config.scheduler._time_attr == "epoch" and tune_config.scheduler._max_t == 3
    assert (tune_config.metric, tune_config.mode, tune_config.num_samples) == ("val/ce", "min", 3)
    analysis = ExperimentAnalysis(str(experiment.resolve()))
    histories = analysis.trial_dataframes
    assert len(histories) == 3 == len(result.trials)
    for frame in histories.values():  # val/ce after every epoch, so ASHA can stop a trial at its rungs
        assert list(frame["epoch"]) == list(range(1, len(frame) + 1)) and frame["val/ce"].notna().all()
    assert set(result.trials["ended"]) <= {"finished", "asha"}
    stopped = result.trials[result.trials["ended"] == "asha"]
    assert (stopped["epochs_done"] < stopped["epochs"]).all()
    # the base profile's own recipe is Optuna's first point, and a trial
    assert result.base["trial_id"] in set(result.trials["trial_id"])
    assert result.base["recipe"] == {"lr": 1e-2, "lr_schedule": "constant", "epochs": 3, "encoder_width": 64,
                                     "batch_size": 16}


def test_the_report_has_the_regime_and_the_space_is_taken_by_the_search(recipe_run):
    root, data, result = recipe_run
    report = json.loads(result.report_path.read_text())
    best = report["best"]
    assert report["searcher"].endswith("OptunaSearch") and report["scheduler"].endswith("ASHAScheduler")
    assert best["recipe"] == result.recipe and best["val/ce"] == result.val_ce
    assert math.isclose(best["val/blind_ce"] - best["val/ce"], best["val/ce_below_blind"], abs_tol=1e-9)
    assert best["val/ce_below_blind_se"] > 0 and 0 <= best["val/auc"] <= 1
    assert report["regime"]["in_regime"] == result.in_regime == all(c["kept"] for c in report["regime"]["checks"])
    assert result.val_ce == result.trials.loc[result.trials["ended"] == "finished", "val/ce"].min()
    md = (result.out_folder / "report.md").read_text()
    assert "image-blind" in md and "OptunaSearch" in md and f"{best['val/ce']:.4f}" in md
    cfg = load_search_config(result.space_path, "smoke")
    assert cfg.scenario == "mine" and (cfg.train.lr, cfg.train.epochs, cfg.train.batch_size) == (
        result.recipe["lr"], result.recipe["epochs"], result.recipe["batch_size"])
    proc = subprocess.run([sys.executable, "-m", "focus_tune.search", "--data", str(data), "--space",
                           str(result.space_path), "--profile", "smoke", "--print-config"],
                          capture_output=True, text=True, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert f"lr_schedule: {result.recipe['lr_schedule']}" in proc.stdout


def test_the_recipe_run_is_tracked_in_mlflow(recipe_run):
    from mlflow.tracking import MlflowClient

    root, data, result = recipe_run
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    parent = client.get_run(result.parent_run_id)
    assert parent.data.tags["kind"] == "recipe" and parent.data.metrics["recipe/val/ce"] == result.val_ce
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{result.parent_run_id}'")
    assert {r.data.tags["trial_id"] for r in children} == set(result.trials["trial_id"])
    assert all(r.info.status == "FINISHED" and "val/ce" in r.data.metrics for r in children)


def test_the_lambda_search_notes_an_unchecked_recipe(recipe_run):
    from focus_tune.search.checks import recipe_note
    from focus_tune.search.cli import parse_options

    root, data, result = recipe_run
    def note(*flags):
        return recipe_note(parse_options(["--data", str(data), *flags]))

    assert "not checked on this data" in note("--profile", "quick")
    assert note("--profile", "smoke") is None  # seconds, for tests
    assert "not checked by a recipe run for this profile" in note("--space", str(result.space_path))
    report = json.loads(result.report_path.read_text())
    for in_regime, expected in ((False, "not in the regime"), (True, None)):
        folder = root / f"quick-{in_regime}"
        folder.mkdir()
        (folder / "space.yaml").write_text(result.space_path.read_text())
        report.update(profile="quick", regime={"in_regime": in_regime, "checks": []})
        (folder / "report.json").write_text(json.dumps(report))
        got = note("--space", str(folder / "space.yaml"))
        assert got is None if expected is None else expected in got


def test_the_command_line_refuses_bad_input_on_one_line(tmp_path):
    for flags, words in ((["--data", str(tmp_path / "none")], "not a folder"),
                         (["--data", str(tmp_path), "--game", "hero"], "one of them")):
        proc = subprocess.run([sys.executable, "-m", "focus_tune.recipe", *flags, "--out", str(tmp_path / "o")],
                              capture_output=True, text=True, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr
    assert not (tmp_path / "o").exists()
