"""The estimates of one image: M sequences sampled from the simulator, turned into the
marginals, the time to the event and its interval (Rao-Blackwellized or counted), with a
generator seeded from the user's seed and the image's pixels."""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from ..errors import PredictError
from ..names import ESTIMATORS, PREDICT_DEFAULTS
from .inputs import Item
from .loading import Loaded

DEFAULT_SAMPLES = PREDICT_DEFAULTS["num_samples"]  # the paper's M
DEFAULT_ESTIMATOR = PREDICT_DEFAULTS["estimator"]  # Rao-Blackwellized (see the module doc)


def _time_to_event(est, samples, event: int, alpha: float) -> dict:
    """The time-to-event summary of one image's estimates (``montecarlo.Estimates`` of one item)
    and draws [1, M, L]: the interval, mean, median and distribution of the estimator's pmf, and
    the leak: the fraction of the draws reaching the event that leave it after (None: none
    reached it)."""
    from ..scoring.montecarlo import leak

    reached = (np.asarray(samples) == event).any(axis=-1)[0]
    left, _ = leak(samples, event)  # of the draws that reach the event, those that leave it after
    return {"alpha": alpha, "lower": float(est.lo[0]), "upper": float(est.hi[0]), "mean": float(est.point[0]),
            "median": float(est.median()[0]), "distribution": est.time_pmf[0].tolist(),
            "p_event_within_length": float(reached.mean()), "leak": None if np.isnan(left) else float(left)}


def image_seed(seed: int, image: np.ndarray) -> int:
    """The generator seed of one image: from the user's seed and the pixels (63 bits)."""
    digest = hashlib.sha256(seed.to_bytes(8, "little") + np.ascontiguousarray(image).tobytes()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def predict_one(loaded: Loaded, item: Item, num_samples: int, seed: int, alpha: float,
                prefix: Sequence[int] = (), device: str = "cpu", estimator: str = DEFAULT_ESTIMATOR) -> dict:
    """The estimates of one image as plain JSON values (see the module doc)."""
    import torch

    from ..scoring import metrics, montecarlo
    from ..scoring.evaluation import draw_samples

    if estimator not in ESTIMATORS:
        raise PredictError(f"estimator {estimator!r}: expected one of {', '.join(ESTIMATORS)}")
    L, c, event = loaded.length, loaded.num_classes, loaded.event
    forced = event if loaded.event_sampling == "forced" else None
    rb = event if estimator == "rao_blackwell" else None  # the sampler sums its conditionals as it draws
    images = torch.as_tensor(item.image[None]).to(device)
    generator = torch.Generator().manual_seed(image_seed(seed, item.image))

    def estimate(first: Sequence[int]) -> tuple[np.ndarray, dict]:
        drawn = draw_samples(loaded.model, images, num_samples, L, generator, forced_event=forced,
                             prefix=list(first) or None, rao_blackwell=rb)
        est = montecarlo.estimate(drawn, estimator, event, c, alpha)
        return est.probs[0], _time_to_event(est, drawn.samples, event, alpha)

    marginals, tte = estimate(())
    out = {"input": item.name, "model": loaded.source, "family": loaded.family, "trial_id": loaded.trial_id,
           "class_names": list(loaded.class_names), "event": loaded.class_names[event], "length": L,
           "num_samples": num_samples, "seed": seed, "estimator": estimator, "image_note": item.note,
           "marginals": marginals.tolist(), "time_to_event": tte, "conditional": None, "truth": None}
    if prefix:
        cond_marginals, cond_tte = estimate(prefix)
        out["conditional"] = {"prefix": [loaded.class_names[p] for p in prefix],
                              "marginals": cond_marginals.tolist(), "time_to_event": cond_tte}
    if item.truth is not None:
        t = item.truth
        tte = out["time_to_event"]
        if t.get("censored"):  # T > time_to_event is all that is known: decided only past the interval
            covered = False if t["time_to_event"] >= tte["upper"] else None
        else:
            inside = metrics.interval_metrics([tte["lower"]], [tte["upper"]], [tte["mean"]], [t["time_to_event"]])
            covered = bool(inside["coverage"] == 1.0)
        # A censored item's sequence is its observed entries only.
        truth = {"sequence": [loaded.class_names[y] for y in t["sequence"]], "time_to_event": t["time_to_event"],
                 "censored": bool(t.get("censored", False)), "covered": covered, "rmse_to_exact": None}
        if t.get("exact_marginals") is not None and np.shape(t["exact_marginals"]) == marginals.shape:
            truth["rmse_to_exact"] = metrics.rmse_to_truth(marginals[None], np.asarray(t["exact_marginals"])[None])
        out["truth"] = truth
    return out
