"""Search-space files: the paper's values, profiles, round trips and every validation error."""

import copy
import dataclasses
import math
from pathlib import Path

import pytest
import yaml

from focus_tune.config.space import (
    PROFILES,
    GridConfig,
    SearchConfig,
    TrainConfig,
    apply_overrides,
    dump_search_config,
    load_search_config,
    override_text,
    parse_override,
    space_path,
)
from focus_tune.data.builtin.profiles import get_spec
from focus_tune.errors import ConfigError

BUILTIN_SCENARIOS = ("facemed", "seaquest", "riverraid", "bankheist", "hero", "roadrunner")
PAPER_GRID = GridConfig(
    lambdas=(0.001, 0.005, 0.01, 0.05), k1=3, k2=(1, 11, 21, 51, 101), constants=(0.001, 0.005, 0.01, 0.05)
)


def base_space() -> dict:
    """A complete, valid search space as a plain dict (the packaged FaceMed file)."""
    return yaml.safe_load(space_path("facemed").read_text())


def write(tmp_path: Path, data, name: str = "space.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def set_at(d: dict, dotted: str, value) -> dict:
    """Copy of d with d[a][b][c] = value for dotted = 'a.b.c' (creating mappings on the way)."""
    d = copy.deepcopy(d)
    *parents, last = dotted.split(".")
    node = d
    for key in parents:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[last] = value
    return d


# -- the packaged files ------------------------------------------------------------------
REGIME_SCENARIOS = ("facemed", "hero", "riverraid")  # those that reach the paper's regime (overconfident)


@pytest.mark.parametrize("game", BUILTIN_SCENARIOS)
@pytest.mark.parametrize("profile", PROFILES)
def test_every_packaged_space_loads(game, profile):
    if profile == "overconfident" and game not in REGIME_SCENARIOS:
        with pytest.raises(ConfigError, match="defines no profile 'overconfident'"):
            load_search_config(space_path(game), profile)
        with pytest.raises(ValueError, match="paper's regime"):
            get_spec(game, profile)
        return
    cfg = load_search_config(space_path(game), profile)
    assert (cfg.scenario, cfg.profile, cfg.final_seeds) == (game, profile, 3)
    assert cfg.source == space_path(game)
    if profile == "overconfident":  # the regime's recipe: a constant rate, the last epoch, few items
        assert cfg.train.lr_schedule == "constant" and get_spec(game, profile).train in (250, 500)


@pytest.mark.parametrize("game", BUILTIN_SCENARIOS)
def test_paper_profile_has_the_papers_values(game):
    cfg = load_search_config(space_path(game), "paper")
    assert cfg.grid == PAPER_GRID
    assert cfg.train == TrainConfig(
        lr=5e-5 if game == "hero" else 1e-5,
        batch_size=256,
        epochs=200,
        eval_every=10,
        num_samples=100,
        ece_bins=10,
        alpha=0.9,
        encoder="resnet18",
        embed_dim=256,
        hidden=256,
        val_items=None,
        test_items=None,
    )


def test_smoke_profile_is_tiny_and_keeps_every_stage():
    cfg = load_search_config(space_path("facemed"), "smoke")
    t = cfg.train
    assert (t.encoder, t.embed_dim, t.hidden, t.epochs, t.eval_every, t.num_samples, t.batch_size, t.lr) == (
        "small", 32, 32, 3, 1, 16, 16, 1e-2,
    )
    assert (t.ece_bins, t.alpha, t.select_by) == (10, 0.9, "ece")  # not overridden: top level
    g = cfg.grid
    assert g.k1 >= 2  # a second sequential stage is exercised
    assert min(g.k2) <= g.k1 < max(g.k2)  # a deduplicated joint candidate and a real one
    assert len(g.lambdas) * (g.k1 + len(g.k2)) + len(g.constants) + 1 <= 16


def test_quick_profile_overrides_training_and_reduces_the_grids_keeping_every_stage():
    cfg = load_search_config(space_path("hero"), "quick")
    t = cfg.train
    assert (t.encoder, t.encoder_width, t.embed_dim, t.hidden, t.lr, t.lr_schedule, t.batch_size, t.epochs,
            t.eval_every, t.estimator, t.num_samples, t.validation) == (
        "resnet18", 32, 128, 128, 2e-3, "decay", 64, 10, 10, "rao_blackwell", 50, ("rao_blackwell", 50))
    assert (t.racing, t.race_at, t.race_se) == ("stop", 5, 3.0) and 1 <= t.race_at < t.epochs
    # FaceMed's quick profile keeps the 30 epochs its pathology needs (docs/BENCHMARKS.md).
    f = load_search_config(space_path("facemed"), "quick").train
    assert (f.lr, f.epochs, f.estimator, f.num_samples, f.racing) == (1e-3, 30, "counted", 100, "off")
    g = cfg.grid
    assert g.k1 == PAPER_GRID.k1  # all three sequential stages
    assert set(g.lambdas) <= set(PAPER_GRID.lambdas) and set(g.k2) <= set(PAPER_GRID.k2)
    assert min(g.k2) <= g.k1 < max(g.k2) and len(g.lambdas) >= 2 and len(g.constants) >= 2


def test_space_path_points_at_the_repo_folder_and_rejects_unknown_scenarios():
    assert space_path("hero").resolve() == Path(__file__).resolve().parent.parent / "search_spaces" / "hero.yaml"
    with pytest.raises(ConfigError, match=r"no search space for scenario 'pong'.*known: bankheist, facemed"):
        space_path("pong")


# -- round trips -------------------------------------------------------------------------
@pytest.mark.parametrize("profile", PROFILES)
def test_round_trip_yaml_config_dict_config(profile):
    cfg = load_search_config(space_path("hero"), profile)
    d = cfg.to_dict()
    assert SearchConfig.from_dict(d) == cfg
    # The dict is plain data: it survives a YAML dump (e.g. logged as an artifact).
    assert SearchConfig.from_dict(yaml.safe_load(yaml.safe_dump(d))) == cfg


def test_resolved_config_written_as_a_space_file_loads_back(tmp_path):
    cfg = load_search_config(space_path("roadrunner"), "smoke")
    d = cfg.to_dict()
    space = {"scenario": d["scenario"], "final_seeds": d["final_seeds"], "grid": d["grid"], "train": d["train"]}
    space["profiles"] = {"paper": {}}
    again = load_search_config(write(tmp_path, space), "paper")
    assert (again.train, again.grid, again.scenario) == (cfg.train, cfg.grid, cfg.scenario)


def test_profile_overrides_merge_only_the_keys_they_list(tmp_path):
    space = set_at(base_space(), "profiles.quick", {"train": {"epochs": 7}, "grid": {"k2": [2, 9]}})
    cfg = load_search_config(write(tmp_path, space), "quick")
    assert cfg.train.epochs == 7 and cfg.train.lr == 1e-5 and cfg.train.batch_size == 256
    assert cfg.grid.k2 == (2, 9) and cfg.grid.lambdas == PAPER_GRID.lambdas


def test_empty_profiles_and_optional_keys_use_the_defaults(tmp_path):
    space = base_space()
    del space["final_seeds"], space["train"]["val_items"], space["train"]["test_items"]
    space["profiles"] = {"paper": None}
    cfg = load_search_config(write(tmp_path, space), "paper")
    assert cfg.final_seeds == 3 and cfg.train.val_items is None and cfg.train.test_items is None


def test_ints_are_accepted_where_floats_are_expected(tmp_path):
    space = set_at(set_at(base_space(), "train.lr", 1), "grid.lambdas", [0, 1])
    cfg = load_search_config(write(tmp_path, space), "paper")
    assert cfg.train.lr == 1.0 and isinstance(cfg.train.lr, float)
    assert cfg.grid.lambdas == (0.0, 1.0) and all(isinstance(v, float) for v in cfg.grid.lambdas)


def test_exponent_without_a_dot_is_a_number(tmp_path):
    # YAML 1.1 (PyYAML) would read 1e-5 as the string '1e-5'.
    text = space_path("hero").read_text().replace("lr: 5.0e-5", "lr: 5e-5")
    assert "lr: 5e-5" in text
    assert load_search_config(write(tmp_path, text), "paper").train.lr == 5e-5


# -- validation: each error names the file and the dotted field ---------------------------
def test_error_message_names_file_and_field_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "search_spaces").mkdir()
    space = set_at(base_space(), "profiles.quick.grid.lambdas", [0.001, 0.005, -0.1])
    path = write(tmp_path / "search_spaces", space, "hero.yaml")
    with pytest.raises(ConfigError) as e:
        load_search_config(path, "paper")
    assert str(e.value) == (
        "search_spaces/hero.yaml: profiles.quick.grid.lambdas[2]: -0.1 is negative; lambdas must be >= 0"
    )
    assert isinstance(e.value, ValueError)


BAD = [
    # (dotted field, value, expected field path in the message, expected words)
    ("colour", "red", "colour", "unknown key; allowed here: scenario, grid, train, final_seeds, profiles"),
    ("train.lrr", 0.1, "train.lrr", "unknown key"),
    ("grid.k3", 4, "grid.k3", "unknown key"),
    ("profiles.quick.train.epoch", 3, "profiles.quick.train.epoch", "unknown key"),
    ("profiles.quick.model", {}, "profiles.quick.model", "allowed here: train, grid"),
    ("profiles.tiny", {}, "profiles.tiny", "allowed here: smoke, quick, overconfident, paper"),
    ("train.epochs", "10", "train.epochs", "expected an integer, got str '10'"),
    ("train.epochs", True, "train.epochs", "expected an integer, got bool True"),
    ("train.batch_size", 12.5, "train.batch_size", "expected an integer"),
    ("profiles.smoke.train.num_samples", False, "profiles.smoke.train.num_samples", "expected an integer"),
    ("train.lr", "fast", "train.lr", "expected a number, got str 'fast'"),
    ("train.lr", "0.01", "train.lr", "quoted?"),
    ("train.lr", True, "train.lr", "expected a number"),
    ("train.lr", 0.0, "train.lr", "must be a finite number > 0"),
    ("train.epochs", 0, "train.epochs", "0 must be >= 1"),
    ("profiles.quick.train.epochs", -3, "profiles.quick.train.epochs", "must be >= 1"),
    ("train.eval_every", 0, "train.eval_every", "must be >= 1"),
    ("train.alpha", 1.0, "train.alpha", "must be in (0, 1)"),
    ("train.alpha", 0, "train.alpha", "must be in (0, 1)"),
    ("train.encoder", "resnet50", "train.encoder", "'resnet50' is not one of resnet18, small"),
    ("train.selection", "last", "train.selection",
     "no longer a setting: the search scores every trial at its last epoch"),
    ("train.select_by", "auc", "train.select_by", "is not one of ece, ece_debiased, brier, ce"),
    ("train.tie_se", -0.5, "train.tie_se", "must be a finite number >= 0"),
    ("train.tie_se", "1", "train.tie_se", "quoted?"),
    ("train.val_items", 0, "train.val_items", "must be >= 1"),
    ("profiles.smoke.train.test_items", "all", "profiles.smoke.train.test_items", "expected an integer"),
    ("grid.lambdas", [0.01, -0.5], "grid.lambdas[1]", "-0.5 is negative; lambdas must be >= 0"),
    ("grid.lambdas", [0.01, float("nan")], "grid.lambdas[1]", "is NaN"),
    ("grid.lambdas", [0.01, float("inf")], "grid.lambdas[1]", "not finite"),
    ("grid.lambdas", [], "grid.lambdas", "is empty"),
    ("grid.lambdas", 0.01, "grid.lambdas", "expected a list of lambdas"),
    ("grid.lambdas", [0.01, 0.01], "grid.lambdas[1]", "repeats grid.lambdas[0]"),
    ("grid.constants", [], "grid.constants", "is empty"),
    ("profiles.paper.grid.constants", [-1], "profiles.paper.grid.constants[0]", "constants must be >= 0"),
    ("grid.k2", [], "grid.k2", "is empty"),
    ("grid.k2", [1, 0, 11], "grid.k2[1]", "0 is out of range; k2 (the last regularized entry) must be in 1..1000000"),
    ("profiles.quick.grid.k2", [-5, 11], "profiles.quick.grid.k2[0]", "is out of range"),
    ("grid.k2", [1, 2.5], "grid.k2[1]", "expected an integer"),
    ("grid.k1", 0, "grid.k1", "must be >= 1"),
    ("profiles.quick.grid.k1", 200, "profiles.quick.grid.k1", "leaves no joint entries"),
    ("profiles.quick.grid.k2", [1, 2], "profiles.quick.grid.k1",
     "every k2 in [1, 2] (profiles.quick.grid.k2) is <= k1"),
    ("final_seeds", 0, "final_seeds", "must be >= 1"),
    ("scenario", "../etc", "scenario", "it names folders"),
    ("train", [1, 2], "train", "must be a mapping"),
    ("profiles.quick", [1], "profiles.quick", "must be a mapping"),
]


@pytest.mark.parametrize("dotted, value, at, words", BAD, ids=[f"{b[0]}={b[1]!r}" for b in BAD])
def test_invalid_values_name_file_and_field(tmp_path, dotted, value, at, words):
    path = write(tmp_path, set_at(base_space(), dotted, value))
    # Every profile is validated whatever the chosen one: a broken `paper` fails a `quick` run.
    with pytest.raises(ConfigError) as e:
        load_search_config(path, "quick")
    message = str(e.value)
    assert message.startswith(f"{path}: {at}: "), message
    assert words in message, message


@pytest.mark.parametrize("missing", ["scenario", "grid", "train", "train.lr", "grid.k1", "train.epochs"])
def test_missing_required_keys(tmp_path, missing):
    space = base_space()
    *parents, last = missing.split(".")
    node = space
    for key in parents:
        node = node[key]
    del node[last]
    with pytest.raises(ConfigError, match=rf"space.yaml: {missing}: missing \(required\)"):
        load_search_config(write(tmp_path, space), "paper")


def test_unknown_profile_lists_the_valid_ones(tmp_path):
    path = write(tmp_path, base_space())
    with pytest.raises(ConfigError,
                       match=r"space.yaml: unknown profile 'fast'; choose one of smoke, quick, overconfident, paper"):
        load_search_config(path, "fast")


def test_profile_absent_from_the_file(tmp_path):
    space = base_space()
    space["profiles"] = {"paper": {}}
    with pytest.raises(ConfigError, match=r"profiles: defines no profile 'quick' \(it defines: paper\)"):
        load_search_config(write(tmp_path, space), "quick")


def test_malformed_yaml_reports_file_and_line(tmp_path):
    text = "game: hero\ngrid:\n  lambdas: [0.01, 0.05\n  k1: 3\n"
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_search_config(path, "paper")
    assert str(e.value).startswith(f"{path}:4:") and "malformed YAML" in str(e.value)


def test_duplicate_yaml_keys_are_an_error(tmp_path):
    text = space_path("hero").read_text().replace("  batch_size: 256\n", "  batch_size: 256\n  batch_size: 32\n")
    with pytest.raises(ConfigError, match=r"space.yaml:\d+:\d+: malformed YAML: found duplicate key 'batch_size'"):
        load_search_config(write(tmp_path, text), "paper")


@pytest.mark.parametrize("text", ["", "- game: hero\n", "just text\n"])
def test_a_file_that_is_not_a_mapping(tmp_path, text):
    with pytest.raises(ConfigError, match="the file must be a mapping"):
        load_search_config(write(tmp_path, text), "paper")


def test_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_search_config(tmp_path / "nope.yaml", "paper")


def test_from_dict_validates_too():
    d = load_search_config(space_path("hero"), "paper").to_dict()
    d["grid"]["lambdas"] = [0.01, math.nan]
    with pytest.raises(ConfigError, match=r"<dict>: grid.lambdas\[1\]: is NaN"):
        SearchConfig.from_dict(d)


def _alias_bomb(levels: int = 9) -> str:
    """The classic 'billion laughs' in 2.5 KB: 9 levels of 9 aliases each."""
    anchors = ["&a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    anchors += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "[" + ", ".join(anchors) + "]"


@pytest.mark.parametrize("where", ["scenario", "train.encoder", "grid.lambdas"])
def test_an_alias_bomb_is_a_short_error(tmp_path, where):
    text = space_path("facemed").read_text()
    bomb = _alias_bomb()
    if where == "scenario":
        text = text.replace("scenario: facemed", f"scenario: {bomb}")
    elif where == "train.encoder":
        text = text.replace("train:\n", f"train:\n  encoder: {bomb}\n", 1).replace("  encoder: small\n", "", 1)
    else:
        text = text.replace("grid:\n", f"grid:\n  lambdas: {bomb}\n", 1)
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_search_config(path, "quick")
    assert len(str(err.value)) < 400 and str(path.name) in str(err.value)


def test_deep_nesting_is_a_short_error(tmp_path):
    path = write(tmp_path, "scenario: " + "[" * 20000 + "]" * 20000 + "\n")
    with pytest.raises(ConfigError, match="nested deeper than 32 levels"):
        load_search_config(path, "quick")


@pytest.mark.parametrize("dotted, value, words", [
    ("grid.k2", [1, int("9" * 300)], "is too large; expected an integer of at most"),
    ("grid.k2", [1, 10_000_000], "must be in 1..1000000"),
    ("train.epochs", int("9" * 300), "is too large"),
    ("scenario", "g" * 5000, "must be 1 to 64 letters"),
    ("train.encoder", "x" * 100_000, "is not one of resnet18, small"),
])
def test_huge_values_are_refused_and_quoted_briefly(tmp_path, dotted, value, words):
    path = write(tmp_path, set_at(base_space(), dotted, value))
    with pytest.raises(ConfigError) as err:
        load_search_config(path, "quick")
    assert words in str(err.value) and len(str(err.value)) < 400


def test_a_binary_file_is_not_a_traceback(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ConfigError, match="not a UTF-8 text file"):
        load_search_config(path, "quick")


# -- overrides from the command line (--set) ----------------------------------------------
def test_set_is_one_more_layer_the_same_as_a_profiles_keys(tmp_path):
    """--set over the resolved smoke profile gives what the same keys in the file's smoke profile give."""
    texts = ["train.epochs=2", "train.lr=1e-3", "train.lr_schedule=decay", "train.val_items=null",
             "grid.lambdas=[0.01, 0.1]", "grid.k2=[1, 7]", "final_seeds=2"]
    cfg = apply_overrides(load_search_config(space_path("facemed"), "smoke"), [parse_override(t) for t in texts])
    space = base_space()
    smoke = space["profiles"]["smoke"]
    smoke["train"] |= {"epochs": 2, "lr": 1e-3, "lr_schedule": "decay", "val_items": None}
    smoke["grid"] |= {"lambdas": [0.01, 0.1], "k2": [1, 7]}
    space["final_seeds"] = 2
    again = load_search_config(write(tmp_path, space), "smoke")
    assert (cfg.train, cfg.grid, cfg.final_seeds) == (again.train, again.grid, again.final_seeds)
    assert cfg.grid.lambdas == (0.01, 0.1) and isinstance(cfg.train.lr, float)


@pytest.mark.parametrize("texts, words", [
    (["train.epochs=0"], "--set: train.epochs: 0 must be >= 1"),
    (["train.encoder=vit"], "--set: train.encoder: 'vit' is not one of resnet18, small"),
    (["grid.k2=[]"], "--set: grid.k2: is empty"),
    (["train.epochs=2", "train.epochs=3"], "--set: train.epochs: given twice"),
    (["train"], "--set 'train': expected KEY=VALUE"),
    (["train=3"], "--set: train: name one key of train, e.g. train.epochs=5"),
    (["game=hero"], "--set: game: unknown key; --set takes final_seeds, train.<key> or grid.<key>"),
    (["grid.k2=[1, 2]"], "--set: grid.k1 (of the smoke search space): k1 = 2 leaves no joint entries"),
    (["train.racing=stop"], "--set: train.race_at (of the smoke search space): racing 'stop' validates at epoch"),
    (["grid.lambdas=[0.01,"], "--set grid.lambdas:1:7: malformed YAML"),
])
def test_a_bad_override_names_the_key_and_what_is_allowed(texts, words):
    cfg = load_search_config(space_path("hero"), "smoke")
    with pytest.raises(ConfigError) as err:
        apply_overrides(cfg, [parse_override(t) for t in texts])
    assert str(err.value).startswith(words), str(err.value)


def test_no_override_leaves_the_config_and_its_printout_as_they_were():
    cfg = load_search_config(space_path("hero"), "quick")
    assert apply_overrides(cfg, []) is cfg
    assert dump_search_config(cfg) == dump_search_config(cfg, ())
    assert override_text("grid.lambdas", [0.01, 0.1]) == "grid.lambdas=[0.01, 0.1]"
    assert [parse_override(override_text(k, v)) for k, v in [("train.lr", 1e-05), ("train.val_items", None)]] == [
        ("train.lr", 1e-05), ("train.val_items", None)]


# -- YAML 1.2's core schema, in the files and in --set -------------------------------------
@pytest.mark.parametrize("text, value", [
    ("train.racing=off", "off"), ("train.encoder=small", "small"), ("train.val_items=null", None),
    ("train.val_items=010", 10), ("train.lr=1e-5", 1e-5), ("grid.lambdas=[0.01, 0.1]", [0.01, 0.1]),
])
def test_set_values_are_read_by_yaml_1_2s_core_schema(text, value):
    assert parse_override(text)[1] == value
    assert [parse_override(t)[1] for t in ("k=on", "k=yes", "k=no", "k=true", "k=False")] == [
        "on", "yes", "no", True, False]


def test_racing_off_is_a_string_in_set_and_in_a_printed_file(tmp_path):
    cfg = apply_overrides(load_search_config(space_path("hero"), "quick"), [parse_override("train.racing=off")])
    assert cfg.train.racing == "off"
    printed = dump_search_config(cfg).replace("racing: 'off'", "racing: off")  # as a user would type it
    assert "racing: off\n" in printed
    path = tmp_path / "edited.yaml"
    path.write_text(printed)
    assert load_search_config(path, "quick") == dataclasses.replace(cfg, source=path)


@pytest.mark.parametrize("text", ["train.epochs=0x10", "train.epochs=0o17", "train.epochs=1_0", "train.lr=1.0_1e-3",
                                  "train.epochs=0b11", "train.epochs=1:30", "grid.k2=[1, 0x10]"])
def test_a_number_in_another_notation_is_refused_naming_the_key(text):
    key = text.partition("=")[0]
    with pytest.raises(ConfigError) as err:
        parse_override(text)
    message = str(err.value)
    assert message.startswith(f"--set {key}: ") and "plain decimal" in message and "\n" not in message, message


@pytest.mark.parametrize("text", ["train.val_items=", "train.val_items=  "])
def test_an_empty_set_value_is_refused_not_read_as_null(text):
    with pytest.raises(ConfigError, match=r"^--set train.val_items: empty value; give one, or null for none"):
        parse_override(text)


def test_a_file_with_a_hex_number_names_its_line(tmp_path):
    space = base_space()
    path = write(tmp_path, space)
    path.write_text(path.read_text().replace("k1: 3", "k1: 0x3", 1))
    with pytest.raises(ConfigError, match=r"space.yaml:\d+:\d+: '0x3': a number in another notation"):
        load_search_config(path, "quick")


def test_a_race_epoch_left_behind_by_set_epochs_says_what_to_set():
    with pytest.raises(ConfigError) as err:
        apply_overrides(load_search_config(space_path("hero"), "quick"), [parse_override("train.epochs=5")])
    assert "set race_at below epochs too, or racing off" in str(err.value)
    for game in ("hero", "roadrunner", "seaquest", "facemed"):  # the docs' example works on every quick job
        assert apply_overrides(load_search_config(space_path(game), "quick"),
                               [parse_override("train.epochs=12")]).train.epochs == 12


def test_the_former_key_names_read_as_todays(tmp_path):
    """A space file with `game:` (today `scenario:`), and a search's config saved by an earlier
    version (`game`, `train.absorbing`), read as today's; a resume compares them as such."""
    from focus_tune.search.storage import check_resumable

    space = base_space()
    space["game"] = space.pop("scenario")
    cfg = load_search_config(write(tmp_path, space), "quick")
    assert cfg.scenario == "facemed" and "game" not in cfg.to_dict()
    old = cfg.to_dict()
    old["game"] = old.pop("scenario")
    old["train"]["absorbing"] = old["train"].pop("event_sampling")
    assert SearchConfig.from_dict(old) == cfg
    check_resumable(tmp_path / "search_state.json", {"config": old, "data": "d"},
                    {"config": cfg.to_dict(), "data": "d"})
