"""Logged models: fetching one by URI, its signature and input example."""

from __future__ import annotations

import os
from pathlib import Path

import mlflow
from mlflow.tracking import MlflowClient

from ..errors import ModelNotFound
from ..names import PREDICT_DEFAULTS
from .backend import _sqlite_file, tracking_uri

IMAGE_DTYPE = "uint8"  # the signature's images: pixel values, as datasets and image files hold them

# What loading and using a logged model imports besides the Python standard library and its
# own code (shipped with it, see :func:`write_environment`): pinned in its requirements.txt to
# the versions that trained it. tests/test_mlflow_ui.py checks the list against what a load
# and a predict import.
MODEL_REQUIREMENTS = ("mlflow", "torch", "torchvision", "numpy", "pillow", "pyarrow", "pyyaml", "filelock")
CODE_DIR = "code"  # the project's code in a logged model (the python_function's ``code``)


def fetch_model(uri: str, tracking: str | None = None) -> tuple[Path, dict[str, str]]:
    """Download the model folder at an MLflow URI (``runs:/<run>/model-<family>``,
    ``models:/<model_id>``, ``models:/<name>/<version>``) and return it with the params of
    the run that logged it ({} when unknown). Raises :class:`ModelNotFound` with a
    readable message when the store, the run or the model does not exist; a missing
    SQLite store is not created."""
    from mlflow.exceptions import MlflowException

    store = tracking_uri(tracking)
    db = _sqlite_file(store)
    if db is not None and not db.is_file():
        raise ModelNotFound(f"no MLflow store at {db} (--tracking-uri {store}); run this where the search ran, "
                            "or pass the --tracking-uri it printed")
    mlflow.set_tracking_uri(store)
    client = MlflowClient(store)
    run_id = None
    try:
        if uri.startswith("runs:/"):
            run_id, _, path = uri[len("runs:/"):].partition("/")
            run = _get(client.get_run, run_id, f"no MLflow run {run_id!r} in {store}")
            if path.strip("/") and not _run_has(client, run, path.strip("/")):
                names = sorted(m.name for m in _run_models(client, run))
                raise ModelNotFound(f"run {run_id} has no model {path.strip('/')!r}"
                                    + (f"; it has: {', '.join(names)}" if names else "; it logged no model"))
        elif uri.startswith("models:/"):
            ref = uri[len("models:/"):].strip("/")
            if "/" in ref or "@" in ref:  # a registered model: name/version or name@alias
                name, version = (ref.split("@", 1) if "@" in ref else ref.rsplit("/", 1))
                get = client.get_model_version_by_alias if "@" in ref else client.get_model_version
                run_id = _get(lambda: get(name, version), None, f"no registered model {ref!r} in {store}").run_id
            else:
                run_id = _get(client.get_logged_model, ref, f"no logged model {ref!r} in {store}").source_run_id
        folder = download_model(uri)
    except MlflowException as err:
        raise ModelNotFound(f"{uri}: {' '.join(str(err.message).split())[:300]}") from None
    params = dict(client.get_run(run_id).data.params) if run_id else {}
    return folder, params


def download_model(uri: str) -> Path:
    """The local folder of an MLflow artifact URI (``models:/<id>``, ``runs:/<run>/<path>``),
    downloaded from the current tracking URI (``mlflow.set_tracking_uri``, MLFLOW_TRACKING_URI):
    what ``model_io.load_model`` calls, so that model_io does not import mlflow."""
    from mlflow.artifacts import download_artifacts

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    return Path(download_artifacts(uri))


def _get(fetch, arg, missing: str):
    from mlflow.exceptions import MlflowException

    try:
        return fetch(arg) if arg is not None else fetch()
    except MlflowException as err:
        if "RESOURCE_DOES_NOT_EXIST" in str(err.error_code) or "not found" in str(err).lower():
            raise ModelNotFound(missing) from None
        raise


def _run_models(client, run):
    return client.search_logged_models([run.info.experiment_id],
                                       filter_string=f"source_run_id = '{run.info.run_id}'")


def _run_has(client, run, path: str) -> bool:
    """Whether a run holds ``path``: a logged model of that name, or an artifact."""
    if any(m.name == path for m in _run_models(client, run)):
        return True
    parent, _, leaf = path.rpartition("/")
    return any(a.path == path for a in client.list_artifacts(run.info.run_id, parent or None))


def model_signature(meta: dict):
    """The signature of a saved model (its model.json as a dict): images uint8 [-1, C, H, W]
    in (pixel values, the dtype of the datasets' and image files' pixels), marginal
    probabilities float32 [-1, L, classes] out; None when model.json does not record the
    image shape and length. MLflow checks a tensor's dtype exactly, so float pixel arrays are
    rounded to uint8 first (``np.clip(np.rint(x), 0, 255).astype(np.uint8)``, what the
    python_function does with any array it is given directly)."""
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    shape, length = meta.get("image_shape"), meta.get("length")
    classes = meta.get("class_names") or []
    num_classes = (meta.get("data") or {}).get("num_classes", len(classes))
    if not shape or not length or not num_classes:
        return None
    c, h, w = (int(x) for x in shape)
    return ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(IMAGE_DTYPE), (-1, c, h, w), "images")]),
        outputs=Schema([TensorSpec(np.dtype("float32"), (-1, int(length), int(num_classes)), "marginals")]),
        params=params_schema(),
    )


def params_schema():
    """The python_function's inference parameters (``focus_tune.pyfunc``) with their defaults."""
    from mlflow.types import ParamSchema, ParamSpec

    kinds = {int: "long", str: "string", float: "double"}
    return ParamSchema([ParamSpec(name, kinds[type(value)], value) for name, value in PREDICT_DEFAULTS.items()])


def default_input_example(meta: dict):
    """One mid-grey image of the model's shape, uint8 [1, C, H, W] (None if unknown)."""
    import numpy as np

    shape = meta.get("image_shape")
    return None if not shape else np.full((1, *(int(x) for x in shape)), 128, dtype=IMAGE_DTYPE)


def _save_example(mlmodel, example, folder: str) -> None:
    """Save an input example into a model folder and record it in ``mlmodel``, as MLflow's
    flavors do (``input_example.json`` and ``serving_input_example.json``)."""
    from mlflow.models.utils import _save_example as save

    save(mlmodel, example, folder)


def model_requirements() -> list[str]:
    """:data:`MODEL_REQUIREMENTS` pinned to the installed versions (without a local build
    label such as ``+cpu``, which no index serves)."""
    from importlib.metadata import version

    return [f"{name}=={version(name).split('+')[0]}" for name in MODEL_REQUIREMENTS]


def write_environment(folder: Path) -> dict[str, str]:
    """What a logged model needs to be used outside this environment, written into ``folder``
    (a model folder being assembled): the project's own code under ``code/focus_tune`` (MLflow
    puts ``code/`` on the path before it imports the loader, so the model runs the code that
    saved it), ``requirements.txt`` (:func:`model_requirements`), ``python_env.yaml`` (this
    Python and pip, ``-r requirements.txt``) and ``conda.yaml``, as MLflow's own flavors
    write them. Returns the python_function's ``code``, ``python_env`` and ``conda_env``."""
    import shutil

    from mlflow.utils.environment import _mlflow_conda_env, _PythonEnv

    folder = Path(folder)
    package = Path(__file__).resolve().parents[1]  # focus_tune/ (not `import focus_tune`: its API imports this)
    shutil.copytree(package, folder / CODE_DIR / "focus_tune",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    requirements = model_requirements()
    (folder / "requirements.txt").write_text("\n".join(requirements) + "\n")
    _PythonEnv.current().to_yaml(folder / "python_env.yaml")
    _mlflow_conda_env(folder / "conda.yaml", additional_pip_deps=requirements, install_mlflow=False)
    return {"code": CODE_DIR, "python_env": "python_env.yaml", "conda_env": "conda.yaml"}
