"""Final models on disk without pickle: ``weights.npz`` (numpy arrays) + ``model.json``.

A pickled model runs code when it is loaded, so whoever can write the artifact store could
run code on whoever loads a model. Here the weights are plain numpy arrays, read with
``allow_pickle=False``, and the architecture is rebuilt from a JSON config; loading executes
nothing from the file. The one-line loader (a folder, or an MLflow URI of a logged model)::

    from focus_tune.model_io import load_model; model = load_model("models:/<model_id>")

``load_model`` returns a :class:`focus_tune.model.Simulator` in eval mode on the CPU.
"""
from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np

WEIGHTS = "weights.npz"
CONFIG = "model.json"
FORMAT = "focus-tune-state-dict-npz"


def save_model(folder: str | os.PathLike, model, train: dict, data_info: dict, extra: dict | None = None) -> Path:
    """Write ``model``'s state dict as ``weights.npz`` and what rebuilds its architecture
    (``trainable.build_model``'s ``train`` config and ``data_info``: plain JSON values) as
    ``model.json`` into ``folder``; returns the folder."""
    from .atomic import write_atomic

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {name: t.detach().cpu().numpy() for name, t in model.state_dict().items()}
    with open(folder / WEIGHTS, "wb") as handle:
        np.savez(handle, **arrays)
        handle.flush()
        os.fsync(handle.fileno())
    meta = {"format": FORMAT, "train": dict(train), "data": dict(data_info), **(extra or {})}
    write_atomic(folder / CONFIG, json.dumps(meta, indent=1))
    return folder


def load_model(location: str | os.PathLike):
    """The Simulator saved by :func:`save_model` at ``location``: a local folder, or any MLflow
    artifact URI (``models:/<model_id>``, ``runs:/<run_id>/<path>``) that holds one."""
    import torch

    from .trainable import build_model

    folder = Path(location)
    if not folder.is_dir():
        from mlflow.artifacts import download_artifacts

        folder = Path(download_artifacts(str(location)))
    meta = json.loads((folder / CONFIG).read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{folder / CONFIG}: not a {FORMAT} model (format {str(meta.get('format'))[:40]!r})")
    model = build_model(meta["train"], meta["data"])
    try:
        with np.load(folder / WEIGHTS, allow_pickle=False) as npz:
            state = {name: torch.from_numpy(npz[name].copy()) for name in npz.files}
    except (ValueError, zipfile.BadZipFile) as err:
        raise ValueError(f"{folder / WEIGHTS}: not a plain numpy weights file ({err})") from err
    model.load_state_dict(state)
    return model.eval()
