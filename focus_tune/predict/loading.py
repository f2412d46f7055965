"""The model: a final model of a search by MLflow URI, run folder or model folder, with
the class names, sequence length and image shape that using it needs."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..errors import DataError, ModelNotFound, PredictError, SearchError
from ..names import MODEL_JSON
from ..quote import short


@dataclass
class Loaded:
    """A final model and what using it needs."""

    model: Any  # focus_tune.sim.model.Simulator, eval mode
    source: str  # what --model named
    family: str | None
    trial_id: str | None
    class_names: list[str]
    length: int
    image_shape: tuple[int, int, int]
    event: int
    event_sampling: str  # "model" | "forced", as the search evaluated it (names.EVENT_SAMPLING)
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
            from ..procedure.state import read_state

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
    from ..sim.model_io import load_model, train_config

    if _is_uri(source):
        from ..tracking import fetch_model

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
        if (path / CHECKPOINT_FILE).is_file():
            return _from_checkpoint(path, source, data)
        folder, recorded = _model_folder(path, family)
    try:
        meta = json.loads((folder / MODEL_JSON).read_text())
        model = load_model(folder)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise PredictError(f"--model {source}: not a usable focus-tune model ({short(str(err), 200)[1:-1]})") from None
    info = _metadata(meta, [*data, recorded.get("data")], source)
    train = train_config(meta.get("train", {}), f"{folder / MODEL_JSON}: train")
    return Loaded(model=model, source=source, family=meta.get("family"), trial_id=meta.get("trial_id"),
                  class_names=info["class_names"], length=info["length"], image_shape=info["image_shape"],
                  event=int(meta["data"]["event"]), event_sampling=str(train.event_sampling or "model"),
                  alpha=float(train.alpha or 0.9))


CHECKPOINT_FILE = "checkpoint.pt"  # a Ray Tune trial checkpoint's file (focus_tune.search.trainable)


def _from_checkpoint(path: Path, source: str, data: Sequence[Path]) -> Loaded:
    """A Ray Tune trial checkpoint, ``<run folder>/search/<trial id>/checkpoint_000001`` (a pack
    member's: ``.../checkpoint_000001/<trial id>``): its weights, rebuilt by the trial's job
    (Tune's ``params.pkl`` beside it), the class names and sizes from the run's final models or
    its dataset."""
    import pickle

    import torch

    from ..procedure.job import PackJob
    from ..procedure.state import read_state
    from ..sim.model_io import build_model

    trial_dir, member = path.parent, None
    if not (trial_dir / "params.pkl").is_file() and (trial_dir.parent / "params.pkl").is_file():
        trial_dir, member = trial_dir.parent, path.name  # a pack member's folder
    try:
        with open(trial_dir / "params.pkl", "rb") as handle:
            job = pickle.load(handle)["job"]  # Tune's own record of the trial's config (the search wrote it)
        if isinstance(job, PackJob):
            job = next(j for j in job.jobs if j.trial_id == member)
        state = torch.load(path / CHECKPOINT_FILE, map_location="cpu", weights_only=True)
        model = build_model(job.train, job.data)
        model.load_state_dict(state["model"])
    except (OSError, KeyError, StopIteration, pickle.UnpicklingError, RuntimeError, AttributeError) as err:
        raise PredictError(f"--model {source}: not a usable trial checkpoint of a search "
                           f"({type(err).__name__}: {short(str(err), 160)[1:-1]})") from None
    run_folder = trial_dir.parent.parent  # <run folder>/search/<trial id>
    meta = {"data": {"num_classes": job.data.num_classes, "in_channels": job.data.in_channels}}
    for final in sorted((run_folder / "models").glob(f"*/{MODEL_JSON}")):  # the run's own record, if finished
        known = json.loads(final.read_text())
        if all(k in known for k in ("class_names", "length", "image_shape")):
            meta |= {k: known[k] for k in ("class_names", "length", "image_shape")}
            break
    try:
        recorded = read_state(run_folder)
    except SearchError:
        recorded = None
    info = _metadata(meta, [*data, recorded.fingerprint.get("data") if recorded else None], source)
    return Loaded(model=model.eval(), source=source, family=job.spec.family, trial_id=job.trial_id,
                  class_names=info["class_names"], length=info["length"], image_shape=info["image_shape"],
                  event=int(job.data.event), event_sampling=job.train.event_sampling, alpha=float(job.train.alpha))


def _metadata(meta: dict, datasets: Sequence[Any], source: str) -> dict:
    c = int(meta["data"]["num_classes"])
    if all(k in meta for k in ("class_names", "length", "image_shape")):
        return {"class_names": [str(n) for n in meta["class_names"]], "length": int(meta["length"]),
                "image_shape": tuple(int(v) for v in meta["image_shape"])}
    from ..data import read_manifest

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
