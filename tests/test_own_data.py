"""A dataset of one's own, in process: the generic search space, the scenario's name, the
resolved config printed and read back, the image-blind predictor on censored training data,
and what the report says of the data."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from focus_tune.config.generic import fit_k2, generic_config
from focus_tune.config.scenarios import scenario_of
from focus_tune.config.space import load_search_config, space_path
from focus_tune.data import evaluation_groups, load_dataset, write_dataset
from focus_tune.errors import ConfigError, DataError


def _dataset(tmp_path: Path, name: str = "mine", L: int = 6, censor: bool = True, age: bool = False) -> Path:
    rng = np.random.default_rng(0)
    n = 60
    seqs = rng.integers(0, 2, (n, L))
    seqs[::5, 3] = 2  # the event, then padded with it
    seqs[::5, 4:] = -1
    if censor:
        seqs[1::4, 2:] = -1  # cut after entry 2
    extras = {"age": rng.integers(20, 90, n)} if age else None
    return write_dataset(tmp_path / name, images=rng.integers(0, 255, (n, 1, 5, 7), dtype=np.uint8), sequences=seqs,
                         classes=["a", "b", "end"], event="end", name=name, extras=extras)


@pytest.mark.parametrize("length, k2", [(100, [1, 11, 21, 51, 101]), (300, [1, 11, 21, 51, 101]),
                                        (20, [1, 3, 5, 11, 20]), (44, [1, 5, 10, 23, 44])])
def test_the_paper_k2_grid_keeps_its_share_of_a_shorter_length(length, k2):
    assert fit_k2([1, 11, 21, 51, 101], length) == k2


def test_the_generic_space_is_the_papers_procedure_with_the_built_in_budgets():
    hero = {p: load_search_config(space_path("hero"), p) for p in ("smoke", "quick", "paper")}
    for profile, ref in hero.items():
        cfg = generic_config("mine", 300, profile)
        assert cfg.scenario == "mine" and cfg.grid == ref.grid
        assert cfg.train == (ref.train if profile != "paper" else ref.train.__class__(**{**ref.train.__dict__,
                                                                                        "lr": 1e-5}))
    short = generic_config("mine", 2, "quick")
    assert short.grid.k1 == 1 and max(short.grid.k2) == 2
    with pytest.raises(ConfigError, match="at least 2 entries"):
        generic_config("mine", 1, "quick")


def test_the_scenario_is_the_datasets_name_and_never_a_built_in_one(tmp_path):
    assert scenario_of(_dataset(tmp_path)) == "mine"
    renamed = _dataset(tmp_path, name="x")
    manifest = (renamed / "manifest.json").read_text().replace('"name": "x"', '"name": "hero"')
    (renamed / "manifest.json").write_text(manifest)
    with pytest.raises(DataError, match="built-in scenario's name"):
        scenario_of(renamed)


def _search(*args, cwd: Path):
    return subprocess.run([sys.executable, "-m", "focus_tune.search", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_print_config_writes_a_space_that_reads_back_as_the_same_config(tmp_path):
    data = _dataset(tmp_path, L=12)
    proc = _search("--data", str(data), "--profile", "quick", "--print-config", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "my.yaml").write_text(proc.stdout)
    printed = load_search_config(tmp_path / "my.yaml", "quick")
    generic = generic_config("mine", 12, "quick")
    assert printed.train == generic.train and printed.grid == generic.grid and printed.scenario == "mine"
    proc = _search("--data", str(data), "--space", str(tmp_path / "my.yaml"), "--profile", "quick", "--dry-run",
                   cwd=tmp_path)
    assert proc.returncode == 0 and "focus-tune dry run: mine (quick), L=12" in proc.stdout, proc.stderr


def test_no_game_and_no_data_is_one_line_and_exit_2(tmp_path):
    proc = _search("--profile", "smoke", cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "give --game (a built-in scenario) or --data DIR" in proc.stderr


def test_image_blind_fills_a_censored_suffix_from_a_sequence_observed_beyond_it(tmp_path):
    from focus_tune.scoring.baselines import completed_sequences

    train = load_dataset(_dataset(tmp_path)).train
    assert train.observed_length is not None
    done = completed_sequences(train.sequences, train.observed_length)
    observed = train.observed
    assert np.array_equal(done[observed], train.sequences[observed])  # what was seen stays
    donors = {tuple(row) for row in train.sequences[train.observed_length == 6]}
    for k in np.flatnonzero(train.observed_length < 6):
        cut = train.observed_length[k]
        assert any(d[cut - 1] == done[k, cut - 1] and tuple(done[k, cut:]) == d[cut:] for d in donors)
    assert completed_sequences(train.sequences, None) is train.sequences


def test_an_age_column_of_ones_own_data_is_metadata_only(tmp_path):
    test = load_dataset(_dataset(tmp_path, age=True)).test
    assert "age" in test.extras and evaluation_groups(test.extras, None) == {}
    assert evaluation_groups(test.extras, "facemed")  # FaceMed's groups still come from its ages


def test_the_report_names_the_absent_rows_and_the_censoring(tmp_path):
    from focus_tune.search.outputs import data_notes

    dataset = load_dataset(_dataset(tmp_path))
    notes = data_notes(dataset, {"image-blind": [{}], "none": [{}]})
    assert [n.split("`")[1] for n in notes[:3]] == ["image-Bayes", "oracle", "exact"]
    censored = int(dataset.test.censored.sum())
    assert notes[3].startswith("Split sizes")
    assert notes[4].startswith(f"Censoring: {censored} of {len(dataset.test)} test items")
    full = load_dataset(_dataset(tmp_path, name="full", censor=False))
    assert not any(n.startswith("Censoring") for n in data_notes(full, {"exact": [{}], "oracle": [{}],
                                                                       "image-Bayes": [{}]}))


def test_image_blind_completion_draws_as_one_donor_search_per_sequence_would():
    """The grouped completion gives, draw for draw, what a search over every donor for each cut
    sequence in turn (longest cut first) gives: the naive reference."""
    from focus_tune.scoring.baselines import completed_sequences

    rng = np.random.default_rng(3)
    seqs = rng.integers(0, 3, (400, 12))
    n_obs = np.where(rng.random(400) < 0.4, rng.integers(1, 12, 400), 12)

    ref = seqs.copy()
    draws = np.random.default_rng(0)
    for k in sorted(np.flatnonzero(n_obs < 12), key=lambda k: -n_obs[k]):
        cut = n_obs[k]
        donors = np.flatnonzero(n_obs > cut)
        same = donors[ref[donors, cut - 1] == ref[k, cut - 1]]
        pool = same if len(same) else donors
        ref[k, cut:] = ref[draws.choice(pool), cut:] if len(pool) else ref[k, cut - 1]
    assert np.array_equal(completed_sequences(seqs, n_obs, seed=0), ref)


def test_a_dataset_too_small_to_tell_a_family_from_image_blind_is_refused_unless_allow_small(tmp_path):
    from focus_tune.errors import SearchError
    from focus_tune.search.cli import MIN_SPLIT_ITEMS, check_split_sizes, parse_options

    small = _dataset(tmp_path)  # 60 items: 6 test, 12 validation
    options = parse_options(["--data", str(small)])
    with pytest.raises(SearchError) as err:
        check_split_sizes(options)
    line = str(err.value)
    assert len(line.splitlines()) == 1 and "too small to search (test 6, validation 12 items)" in line
    assert f"at least {MIN_SPLIT_ITEMS} items in each" in line and "--allow-small" in line
    for flags in (["--allow-small"], ["--profile", "smoke"], ["--dry-run"], ["--print-config"]):
        check_split_sizes(parse_options(["--data", str(small), *flags]))  # not refused
    rng = np.random.default_rng(1)
    n = MIN_SPLIT_ITEMS * 10
    splits = np.array(["train"] * (n - 2 * MIN_SPLIT_ITEMS) + ["val", "test"] * MIN_SPLIT_ITEMS)
    big = write_dataset(tmp_path / "big", images=rng.integers(0, 255, (n, 1, 2, 2), dtype=np.uint8),
                        sequences=rng.integers(0, 2, (n, 3)), classes=["a", "b", "end"], event="end", splits=splits)
    check_split_sizes(parse_options(["--data", str(big)]))  # exactly the floor in test and val: searched
    splits[-1] = "train"
    short = write_dataset(tmp_path / "short", images=rng.integers(0, 255, (n, 1, 2, 2), dtype=np.uint8),
                           sequences=rng.integers(0, 2, (n, 3)), classes=["a", "b", "end"], event="end", splits=splits)
    with pytest.raises(SearchError, match=f"test {MIN_SPLIT_ITEMS - 1} items"):
        check_split_sizes(parse_options(["--data", str(short)]))


def test_the_search_refuses_a_tiny_dataset_before_it_starts(tmp_path, monkeypatch, capsys):
    """The search's own entry point refuses a tiny dataset of one's own in one line (exit 2)
    and leaves no run folder, state or MLflow store behind."""
    from focus_tune.search import main

    small = _dataset(tmp_path)
    monkeypatch.chdir(tmp_path)
    code = main(["--data", str(small), "--data-root", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "too small to search" in err[0] and "--allow-small" in err[0]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


def test_the_report_states_the_split_sizes_and_the_ece_floor_of_ones_own_data(tmp_path):
    from focus_tune.data import load_dataset
    from focus_tune.search.outputs import ECE_FLOOR, data_notes

    notes = data_notes(load_dataset(_dataset(tmp_path)), {"exact": []})
    (sizes,) = [n for n in notes if n.startswith("Split sizes")]
    assert "train 42, validation 12, test 6 items" in sizes
    assert f"{ECE_FLOOR[0] / 6 ** 0.5:.3f} ± {ECE_FLOOR[1] / 6 ** 0.5:.3f}" in sizes


def test_the_report_says_what_censoring_costs_the_numbers():
    from focus_tune.search.outputs import censored_noise_notes

    row = {"test/data/effective_items": 212.4, "test/data/coverage_effective_items": 230.0,
           "test/data/largest_weight": 3.21, "test/data/entry_effective_items": 41.0,
           "test/interval/coverage_se": 0.0123, "test/interval/relative_width_se": 0.07}
    (note,) = censored_noise_notes({"none": [row]})
    assert "about 212 effective items (coverage: 230" in note and "largest weight 3.21" in note
    assert "at least 41 at an entry" in note and "coverage ± 0.012, relative width ± 0.070" in note
    flagged = censored_noise_notes({"image-blind": [{**row, "test/data/positivity": 7.0}]})
    assert flagged[0].startswith("Positivity: no item is observed past entry 6") and "`image-blind`" in flagged[1]
    assert censored_noise_notes({"none": [{}]}) == []


def test_the_report_carries_the_recipe_caveat_of_ones_own_data(tmp_path):
    from focus_tune.search.cli import parse_options
    from focus_tune.search.outputs import recipe_notes

    data = _dataset(tmp_path)
    (note,) = recipe_notes(parse_options(["--data", str(data), "--allow-small"]))
    assert note.startswith("Recipe: the training recipe is the generic space's")
    assert "python -m focus_tune.recipe" in note
    assert recipe_notes(parse_options(["--data", str(data), "--profile", "smoke"])) == []
    assert recipe_notes(parse_options(["--game", "hero"])) == []
