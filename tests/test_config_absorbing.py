"""train.event_sampling: how evaluation samples the event class (validated with the rest of the
config); its former name, train.absorbing, still reads."""

import pytest
import yaml

from focus_tune.config.space import load_search_config, space_path
from focus_tune.errors import ConfigError


def _space(tmp_path, value=None, where="train", key="event_sampling"):
    space = yaml.safe_load(space_path("hero").read_text())
    if value is not None:
        section = space["train"] if where == "train" else space["profiles"]["quick"]["train"]
        section[key] = value
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def test_default_is_the_models_own_sampling(tmp_path):
    assert load_search_config(_space(tmp_path), "quick").train.event_sampling == "model"


@pytest.mark.parametrize("value", ["model", "forced"])
def test_both_modes_load_and_round_trip(tmp_path, value):
    cfg = load_search_config(_space(tmp_path, value, where="profile"), "quick")
    assert cfg.train.event_sampling == value and cfg.to_dict()["train"]["event_sampling"] == value


@pytest.mark.parametrize("value", ["always", True, 1, None])
def test_a_bad_mode_names_the_field_and_the_choices(tmp_path, value):
    path = _space(tmp_path, value if value is not None else "x")
    if value is None:  # an explicit null is not a mode either
        path.write_text(path.read_text().replace("event_sampling: x", "event_sampling: null"))
    with pytest.raises(ConfigError) as e:
        load_search_config(path, "quick")
    assert str(e.value).startswith(f"{path}: train.event_sampling: ") and "is not one of model, forced" in str(e.value)


def test_the_former_name_absorbing_reads_as_event_sampling(tmp_path):
    cfg = load_search_config(_space(tmp_path, "forced", where="profile", key="absorbing"), "quick")
    assert cfg.train.event_sampling == "forced" and "absorbing" not in cfg.to_dict()["train"]
    with pytest.raises(ConfigError, match=r"train.absorbing: 'always' is not one of model, forced"):
        load_search_config(_space(tmp_path, "always", key="absorbing"), "quick")
    both = yaml.safe_load(_space(tmp_path, "forced").read_text())
    both["train"]["absorbing"] = "model"
    (tmp_path / "both.yaml").write_text(yaml.safe_dump(both, sort_keys=False))
    with pytest.raises(ConfigError, match="the same setting"):
        load_search_config(tmp_path / "both.yaml", "quick")
