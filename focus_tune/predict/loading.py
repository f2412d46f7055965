"""The model: a final model of a search by MLflow URI, run folder or model folder, with
the class names, sequence length and image shape that using it needs."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..atomic import short
from ..names import MODEL_JSON


class PredictError(RuntimeError):
    """Bad input or a model that cannot be used; the message says what to do."""



@dataclass
class Loaded:
    """A final model and what using it needs."""

    model: Any  # focus_tune.model.Simulator, eval mode
    source: str  # what --model named
    family: str | None
    trial_id: str | None
    class_names: list[str]
    length: int
    image_shape: tuple[int, int, int]
    event: int
    absorbing: str  # "model" | "forced", as the search evaluated it
    alpha: float

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


def _is_uri(text: str) -> bool:
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:/", text)) and not Path(text).exists()


def _model_folder(path: Path, family: str) -> tuple[Path, dict]:
    """The model folder of a local path: a model folder, a run folder (models/<family>), or
    a folder of models (<family>); and what a run folder records (its search state)."""
    if (path / MODEL_JSON).is_file():
        return path, {}
    for folder in (path / "models" / family, path / family):
        if (folder / MODEL_JSON).is_file():
            from ..state import SearchError, read_state

            try:  # where the run's data is, if its search state says
                state = read_state(path)
            except SearchError:
                state = None
            recorded = state.fingerprint if state is not None else {}
            return folder, {"data": recorded.get("data")}
    models = path / "models" if (path / "models").is_dir() else path
    have = sorted(d.name for d in models.iterdir() if (d / MODEL_JSON).is_file()) if models.is_dir() else []
    if have:
        raise PredictError(f"--model {path}: has no {family!r} model; it has: {', '.join(have)} (--family)")
    raise PredictError(f"--model {path}: neither a model folder ({MODEL_JSON}) nor a search's run folder "
                       "(models/<family>/); a search writes its final models there when it finishes")


def load(source: str, family: str = "time-dependent", tracking_uri: str | None = None,
         data: Sequence[Path] = ()) -> Loaded:
    """Load a final model by MLflow URI, run folder or model folder (see the module doc).

    The class names, sequence length and image shape come from the model's model.json;
    a model saved before these were recorded takes them from a dataset: ``data`` (the
    ``--data`` folder, dataset inputs), then the dataset its search recorded.
    """
    from ..model_io import load_model

    if _is_uri(source):
        from ..tracking import ModelNotFound, fetch_model

        uri = source
        if re.fullmatch(r"runs:/[^/]+/?", uri):  # a search's parent run: its model of --family
            uri = f"{uri.rstrip('/')}/model-{family}"
        try:
            folder, params = fetch_model(uri, tracking_uri)
        except ModelNotFound as err:
            raise PredictError(f"--model {source}: {err}") from None
        recorded = {"data": params.get("data")}
    else:
        path = Path(source)
        if not path.exists():
            raise PredictError(f"--model {source}: no such folder, and not an MLflow URI "
                               "(runs:/<run id>/model-time-dependent, models:/<model id>)")
        folder, recorded = _model_folder(path, family)
    try:
        meta = json.loads((folder / MODEL_JSON).read_text())
        model = load_model(folder)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise PredictError(f"--model {source}: not a usable focus-tune model ({short(str(err), 200)[1:-1]})") from None
    info = _metadata(meta, [*data, recorded.get("data")], source)
    train = meta.get("train", {})
    return Loaded(model=model, source=source, family=meta.get("family"), trial_id=meta.get("trial_id"),
                  class_names=info["class_names"], length=info["length"], image_shape=info["image_shape"],
                  event=int(meta["data"]["event"]), absorbing=str(train.get("absorbing", "model")),
                  alpha=float(train.get("alpha", 0.9)))


def _metadata(meta: dict, datasets: Sequence[Any], source: str) -> dict:
    c = int(meta["data"]["num_classes"])
    if all(k in meta for k in ("class_names", "length", "image_shape")):
        return {"class_names": [str(n) for n in meta["class_names"]], "length": int(meta["length"]),
                "image_shape": tuple(int(v) for v in meta["image_shape"])}
    from ..data import DataError, read_manifest

    for folder in (Path(d) for d in datasets if d):
        try:
            m = read_manifest(folder)
        except DataError:
            continue
        if m.num_classes == c and m.image_shape[0] == int(meta["data"]["in_channels"]):
            return {"class_names": list(m.class_names), "length": m.length, "image_shape": tuple(m.image_shape)}
    raise PredictError(f"--model {source}: the model does not record its classes, sequence length and image size "
                       "(saved before they were), and no dataset of its shape is at hand: pass --data DATASET_DIR, "
                       "the dataset it was trained on")
