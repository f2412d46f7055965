"""Final models on disk without pickle: ``weights.npz`` (numpy arrays) + ``model.json``.

A pickled model runs code when it is loaded, so whoever can write the artifact store could
run code on whoever loads a model. Here the weights are plain numpy arrays, read with
``allow_pickle=False``, and the architecture is rebuilt from a JSON config; loading executes
nothing from the file. The one-line loader (a folder, or an MLflow URI of a logged model)::

    from focus_tune.sim.model_io import load_model; model = load_model("models:/<model_id>")

``load_model`` returns a :class:`focus_tune.sim.model.Simulator` in eval mode on the CPU.

``model.json`` holds the :class:`~focus_tune.config.TrainConfig` and the
:class:`~focus_tune.sim.model_io.DataInfo` the model was built with (``dataclasses.asdict``), which
:func:`build_model` turns back into the architecture. This module imports neither MLflow
nor Ray: an MLflow URI is downloaded by :func:`focus_tune.tracking.download_model`.
"""
from __future__ import annotations

import json
import os
import zipfile
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..config.fields import RENAMED_KEYS
from ..config.space import TrainConfig
from ..names import MODEL_JSON, MODEL_WEIGHTS

WEIGHTS = MODEL_WEIGHTS
CONFIG = MODEL_JSON
FORMAT = "focus-tune-state-dict-npz"

# The fields that shape the network: a model.json without them cannot be rebuilt.
ARCHITECTURE_TRAIN = ("encoder", "embed_dim", "hidden")
ARCHITECTURE_DATA = ("num_classes", "in_channels")
# Fields renamed since a model.json was written: its train object's as a search space's
# (config.fields.RENAMED_KEYS), its data object's ``game``, the scenario.
FORMER_NAMES = {"train": RENAMED_KEYS["train"], "data": {"game": "scenario"}}


@dataclass(frozen=True)
class DataInfo:
    """What the model and the evaluation need to know of the dataset."""

    num_classes: int
    event: int  # the absorbing class: END (games) or dead (FaceMed)
    condition_class: int  # the class conditioned on in the conditional metrics
    in_channels: int
    scenario: str | None = None  # the built-in scenario (FaceMed's age groups), None for one's own data

    @classmethod
    def of(cls, manifest) -> "DataInfo":
        """From a dataset's manifest (``focus_tune.data.manifest.Manifest``)."""
        return cls(manifest.num_classes, manifest.event_class, manifest.condition_class, manifest.image_shape[0],
                   manifest.game)


def build_model(train: TrainConfig, data: DataInfo):
    """The :class:`~focus_tune.sim.model.Simulator` that ``train`` and ``data`` describe (untrained)."""
    from .model import Simulator

    return Simulator(data.num_classes, encoder=train.encoder, embed_dim=train.embed_dim, hidden=train.hidden,
                     in_channels=data.in_channels, encoder_width=train.encoder_width)


def _typed(cls, raw: Mapping[str, Any], required: tuple[str, ...], where: str, former: Mapping[str, str]):
    """``cls`` from a JSON object written by any version: a field's ``former`` name reads as
    the field, unknown keys are ignored, a missing field with a default takes it, a missing
    field without one reads as None (not recorded; a model saved before that field existed),
    except the ``required`` ones."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    raw = {**{former[k]: v for k, v in raw.items() if k in former}, **raw}
    missing = [name for name in required if name not in raw]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)} (needed to rebuild the model)")
    values = {}
    for f in fields(cls):
        if f.name in raw:
            values[f.name] = raw[f.name]
        elif f.default is MISSING and f.default_factory is MISSING:
            values[f.name] = None
    return cls(**values)


def train_config(raw: TrainConfig | Mapping[str, Any], where: str = "train") -> TrainConfig:
    """A :class:`TrainConfig` from a model.json's ``train`` object (see :func:`_typed`)."""
    if isinstance(raw, TrainConfig):
        return raw
    return _typed(TrainConfig, raw, ARCHITECTURE_TRAIN, where, FORMER_NAMES["train"])


def data_info(raw: DataInfo | Mapping[str, Any], where: str = "data") -> DataInfo:
    """A :class:`DataInfo` from a model.json's ``data`` object (see :func:`_typed`)."""
    return raw if isinstance(raw, DataInfo) else _typed(DataInfo, raw, ARCHITECTURE_DATA, where, FORMER_NAMES["data"])


def save_model(folder: str | os.PathLike, model, train: TrainConfig, data: DataInfo,
               extra: dict | None = None) -> Path:
    """Write ``model``'s state dict as ``weights.npz`` and what rebuilds its architecture
    (``train`` and ``data``, as JSON objects of their fields) as ``model.json`` into
    ``folder``; returns the folder. ``extra``: more top-level keys of model.json (family,
    class_names, length, image_shape...). Plain dicts are accepted for ``train`` and
    ``data`` and read as :func:`load_model` reads them."""
    from ..durable import write_atomic

    train, data = train_config(train), data_info(data)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {name: t.detach().cpu().numpy() for name, t in model.state_dict().items()}
    with open(folder / WEIGHTS, "wb") as handle:
        np.savez(handle, **arrays)
        handle.flush()
        os.fsync(handle.fileno())
    meta = {"format": FORMAT, "train": asdict(train), "data": asdict(data), **(extra or {})}
    write_atomic(folder / CONFIG, json.dumps(meta, indent=1))
    return folder


def read_config(folder: str | os.PathLike) -> tuple[TrainConfig, DataInfo, dict]:
    """The train config, data info and whole model.json of a model folder."""
    file = Path(folder) / CONFIG
    meta = json.loads(file.read_text())
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else meta
        raise ValueError(f"{file}: not a {FORMAT} model (format {str(got)[:40]!r})")
    return (train_config(meta.get("train"), f"{file}: train"), data_info(meta.get("data"), f"{file}: data"), meta)


def load_model(location: str | os.PathLike):
    """The Simulator saved by :func:`save_model` at ``location``: a local folder, or any MLflow
    artifact URI (``models:/<model_id>``, ``runs:/<run_id>/<path>``) that holds one (downloaded
    from the current MLflow tracking URI)."""
    import torch

    folder = Path(location)
    if not folder.is_dir():
        from ..tracking.models import download_model

        folder = download_model(str(location))
    train, data, _ = read_config(folder)
    model = build_model(train, data)
    try:
        with np.load(folder / WEIGHTS, allow_pickle=False) as npz:
            state = {name: torch.from_numpy(npz[name].copy()) for name in npz.files}
    except (ValueError, zipfile.BadZipFile) as err:
        raise ValueError(f"{folder / WEIGHTS}: not a plain numpy weights file ({err})") from err
    model.load_state_dict(state)
    return model.eval()
