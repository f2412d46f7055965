"""model_io: a model saved with its typed train config and data info rebuilds and loads
from its folder; a model.json of an earlier version (a partial train dict, unknown keys)
still loads; a file that is not ours is refused."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from focus_tune.config.space import TrainConfig, load_search_config, space_path
from focus_tune.sim.model_io import CONFIG, DataInfo, build_model, load_model, read_config, save_model

INFO = DataInfo(num_classes=4, event=3, condition_class=0, in_channels=3)


@pytest.fixture
def train() -> TrainConfig:
    return dataclasses.replace(load_search_config(space_path("facemed"), "smoke").train, embed_dim=16, hidden=16)


def test_typed_round_trip(tmp_path, train):
    torch.manual_seed(0)
    model = build_model(train, INFO)
    folder = save_model(tmp_path / "m", model, train, INFO, extra={"family": "none"})
    meta = json.loads((folder / CONFIG).read_text())
    assert meta["train"] == dataclasses.asdict(train) and meta["data"] == dataclasses.asdict(INFO)
    got_train, got_info, got_meta = read_config(folder)
    assert (got_train, got_info, got_meta["family"]) == (train, INFO, "none")
    loaded = load_model(folder)
    assert not loaded.training
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name


def test_an_earlier_model_json_still_loads(tmp_path, train):
    folder = save_model(tmp_path / "m", build_model(train, INFO), train, INFO)
    meta = json.loads((folder / CONFIG).read_text())
    # An earlier version: no encoder_width/precision/event_sampling, an extra key, a partial data dict.
    for key in ("encoder_width", "precision", "event_sampling", "lr", "epochs"):
        meta["train"].pop(key)
    meta["train"]["retired_option"] = 1
    meta["data"] = {"num_classes": 4, "in_channels": 3, "event": 3}
    (folder / CONFIG).write_text(json.dumps(meta))
    got_train, got_info, _ = read_config(folder)
    assert got_train.encoder_width == 64 and got_train.event_sampling == "model" and got_train.precision == "bf16"
    assert got_train.lr is None and got_train.epochs is None, "not recorded: None, not a made-up value"
    assert got_info == DataInfo(num_classes=4, event=3, condition_class=None, in_channels=3)
    assert load_model(folder).head.out_features == 4


def test_what_cannot_rebuild_the_model_is_refused(tmp_path, train):
    folder = save_model(tmp_path / "m", build_model(train, INFO), train, INFO)
    meta = json.loads((folder / CONFIG).read_text())
    (folder / CONFIG).write_text(json.dumps({**meta, "train": {"lr": 1.0}}))
    with pytest.raises(ValueError, match="missing encoder, embed_dim, hidden"):
        load_model(folder)
    (folder / CONFIG).write_text(json.dumps({**meta, "format": "pickle"}))
    with pytest.raises(ValueError, match="not a focus-tune-state-dict-npz model"):
        load_model(folder)
