"""The final models as an MLflow ``python_function`` flavor, without pickle.

A logged final model (``Tracker.log_model``) is its model folder (numpy weights + model.json)
and an MLmodel whose ``python_function`` flavor names this module as its loader, with the
project's code (``code/focus_tune``) and its pinned requirements beside it. So the usual
MLflow ways of using a model work, and nothing is unpickled:

    import mlflow
    model = mlflow.pyfunc.load_model("models:/<model id>")      # or models:/<name>@<alias>
    out = model.predict({"images": images})                       # uint8 [n, C, H, W], pixels
    out = model.predict({"images": images}, params={"num_samples": 100, "seed": 1})

    mlflow models serve -m models:/<model id> --env-manager local --port 5001
    curl -X POST localhost:5001/invocations -H 'Content-Type: application/json' \\
         -d '{"inputs": {"images": [...]}}'

``predict`` returns, per image, the numbers ``python -m focus_tune.predict`` prints for it with
the same settings (same seed, M, estimator): ``marginals`` [n, L, classes], the time-to-event
``lower``, ``upper``, ``median`` and ``mean`` [n] (entries 1..L; the interval at the level the
search evaluated), and ``class_names``, ``event`` and ``alpha``. MLflow checks the
signature's uint8 before this runs; called directly, any array of pixel values is rounded to
uint8, as the CLI reads images. The per-image generator is seeded from the pixels and
``seed`` (``predict.image_seed``), so an image gets the same draws wherever it is in a batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .names import PREDICT_DEFAULTS as PARAMS


def _load_pyfunc(path: str) -> "SimulatorModel":
    """MLflow's entry point: ``path`` is the logged model's folder (its model.json)."""
    from .predict import load

    return SimulatorModel(load(path))


class SimulatorModel:
    """What ``mlflow.pyfunc.load_model`` wraps: images in, the estimates of each image out."""

    def __init__(self, loaded):
        self.loaded = loaded

    def predict(self, model_input: Any, params: dict | None = None) -> dict:
        from .errors import PredictError
        from .predict import Item, predict_one

        settings = {**PARAMS, **{k: v for k, v in (params or {}).items() if v is not None}}
        if int(settings["num_samples"]) < 1:
            raise PredictError(f"num_samples {settings['num_samples']}: expected >= 1")
        images = model_input["images"] if isinstance(model_input, dict) else model_input
        images = np.asarray(images)
        shape = tuple(self.loaded.image_shape)
        if images.ndim == 3:
            images = images[None]
        if images.ndim != 4 or tuple(images.shape[1:]) != shape:
            raise PredictError(f"images {tuple(images.shape)}: expected [n, {', '.join(map(str, shape))}]")
        pixels = np.clip(np.rint(images), 0, 255).astype(np.uint8)
        rows = [predict_one(self.loaded, Item(f"image {i}", image), int(settings["num_samples"]),
                            int(settings["seed"]), self.loaded.alpha, estimator=settings["estimator"])
                for i, image in enumerate(pixels)]
        tte = [r["time_to_event"] for r in rows]
        return {"marginals": np.asarray([r["marginals"] for r in rows], dtype=np.float32).reshape(
                    len(rows), self.loaded.length, self.loaded.num_classes),
                **{k: np.asarray([t[k] for t in tte], dtype=np.float64) for k in ("lower", "upper", "median", "mean")},
                "class_names": list(self.loaded.class_names),
                "event": self.loaded.class_names[self.loaded.event], "alpha": self.loaded.alpha}
