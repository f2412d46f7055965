"""Lineage: MLflow's own context tags, the dataset as a run input, the winners' tag."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from mlflow.entities import Dataset

WINNER_TAG = "winner_of"  # on a trial's run: the stages it won, comma separated
STOPPED_TAG = "stopped_by"  # on a trial's run (KILLED): the race it lost (focus_tune.procedure.racing)

DATASET_CONTEXT = "training"  # the mlflow.data.context of the dataset input
CHECKPOINT_TAG = "checkpoint"  # on a trial's run: the URI of its latest checkpoint
MODEL_TAG = "model"  # on the run of a trial that became a final model: models:/<id>


def experiment_tags(name: str) -> dict[str, str]:
    """The tags of a search experiment: its description (``mlflow.note.content``, shown in the
    UI) of what its runs are and how to read them. (MLflow 3.17's UI opens every experiment on
    its GenAI overview, whatever its ``mlflow.experimentKind``; the link to the trials asks
    for ``workflowType=machine_learning``: ``store.trials_page``.)"""
    return {"mlflow.note.content": f"""**{name}**: the staged searches of focus-tune \
(time-dependent logit regularization of a foCus sequence simulator, ResNet-18 -> LSTM).

- Each search is one parent run (tag `kind` = `search`; param `run_folder` is where it ran). Its \
report is in its artifacts: `report/results.md` (test tables with the reference rows and paired tests), \
`report/search.png` (every stage's candidates), `report/tables/` (every test metric and p-value).
- Each trial is a child run, tagged `stage` (stage1..stageK, joint, constant, none, final) and `family`; \
`winner_of` marks each stage's winner, `checkpoint` holds the URI of its latest checkpoint, `model` the \
final model it became.
- Metrics: `train/...` per epoch; `val/...` on the validation items whenever a trial validates (the stages \
decide by `val/ece` unless `train.select_by` says otherwise); `test/...` on a final's run; on the parent, \
`<row>/test/...` per family and reference row. `val/ece_debiased_sq` is an unbiased estimate of the \
squared calibration error: below 0 where the model is calibrated within the noise."""}


def context_tags() -> dict[str, str]:
    """MLflow's own run context tags (``mlflow.source.git.commit``, ``mlflow.source.name``,
    ``mlflow.source.type``, ``mlflow.user``, ...), resolved by MLflow's context registry as
    ``mlflow.start_run`` resolves them: ``MlflowClient.create_run`` alone sets none. The git
    commit is that of the repository holding the program that runs (``sys.argv[0]``)."""
    from mlflow.tracking.context.registry import resolve_tags

    return {k: str(v) for k, v in resolve_tags().items() if v is not None}


def manifest_digest(manifest) -> str:
    """A digest of a dataset: SHA-256 over its manifest's split-file checksums (``files``),
    truncated to the 32 hex digits an MLflow dataset digest holds (at most 36 characters).
    The same split files give the same digest wherever the folder lies."""
    canonical = json.dumps(sorted(dict(manifest.files).items()), separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def dataset_entity(manifest, path) -> Dataset:
    """The MLflow dataset of a dataset folder (``focus_tune.data.manifest.Manifest`` + its folder):
    name ``manifest.name``, the manifest digest, the folder as a local source, a tensor schema
    (images uint8 [-1, C, H, W], sequences int8 [-1, L]) and a profile (split sizes, L,
    classes, image shape, generator)."""
    import numpy as np
    from mlflow.data.schema import TensorDatasetSchema
    from mlflow.types import Schema, TensorSpec

    c, h, w = (int(x) for x in manifest.image_shape)
    length = int(manifest.length)
    schema = TensorDatasetSchema(
        features=Schema([TensorSpec(np.dtype("uint8"), (-1, c, h, w), "image")]),
        targets=Schema([TensorSpec(np.dtype("int8"), (-1, length), "sequence")]),
    )
    profile = {
        "game": manifest.game, "profile": manifest.profile, "splits": dict(manifest.splits),
        "length": length, "num_classes": manifest.num_classes, "class_names": list(manifest.class_names),
        "image_shape": [c, h, w], "event_class": manifest.class_names[manifest.event_class],
        "generator": manifest.generator, "generator_version": manifest.generator_version, "seed": manifest.seed,
        "files": dict(manifest.files), "digest": "sha256 of the files' checksums, first 32 hex digits",
    }
    name = manifest.name or f"{manifest.game}-{manifest.profile}"
    return Dataset(name=name, digest=manifest_digest(manifest), source_type="local",
                   source=json.dumps({"uri": str(Path(path).resolve())}),
                   schema=json.dumps(schema.to_dict()), profile=json.dumps(profile))
