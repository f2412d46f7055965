"""train.absorbing: how evaluation samples the event class (validated with the rest of the config)."""

import pytest
import yaml

from focus_tune.config.space import ConfigError, load_search_config, space_path


def _space(tmp_path, absorbing=None, where="train"):
    space = yaml.safe_load(space_path("hero").read_text())
    if absorbing is not None:
        section = space["train"] if where == "train" else space["profiles"]["quick"]["train"]
        section["absorbing"] = absorbing
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def test_default_is_the_models_own_sampling(tmp_path):
    assert load_search_config(_space(tmp_path), "quick").train.absorbing == "model"


@pytest.mark.parametrize("value", ["model", "forced"])
def test_both_modes_load_and_round_trip(tmp_path, value):
    cfg = load_search_config(_space(tmp_path, value, where="profile"), "quick")
    assert cfg.train.absorbing == value and cfg.to_dict()["train"]["absorbing"] == value


@pytest.mark.parametrize("value", ["always", True, 1, None])
def test_a_bad_mode_names_the_field_and_the_choices(tmp_path, value):
    path = _space(tmp_path, value if value is not None else "x")
    if value is None:  # an explicit null is not a mode either
        path.write_text(path.read_text().replace("absorbing: x", "absorbing: null"))
    with pytest.raises(ConfigError) as e:
        load_search_config(path, "quick")
    assert str(e.value).startswith(f"{path}: train.absorbing: ") and "is not one of model, forced" in str(e.value)
