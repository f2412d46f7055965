"""The estimates of one image: M sequences sampled from the simulator, turned into the
marginals, the time to the event and its interval (Rao-Blackwellized or counted), with a
generator seeded from the user's seed and the image's pixels."""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from ..names import PREDICT_DEFAULTS
from .inputs import Item
from .loading import Loaded, PredictError

DEFAULT_SAMPLES = PREDICT_DEFAULTS["num_samples"]  # the paper's M
ESTIMATORS = (PREDICT_DEFAULTS["estimator"], "counted")  # the first is the default (see the module doc)


def _time_to_event(samples, event: int, length: int, alpha: float, pmf=None) -> dict:
    """The time-to-event summary of one image's draws [1, M, L]: counted from the sampled
    times, or from ``pmf`` [L] (the Rao-Blackwellized distribution on t = 1..L) when given."""
    from .. import montecarlo

    times = montecarlo.time_to_event(samples, event)  # (1, M)
    reached = (np.asarray(samples) == event).any(axis=-1)[0]
    if pmf is None:
        lo, hi = montecarlo.interval(times, alpha)
        distribution = np.bincount(times[0] - 1, minlength=length)[:length] / times.shape[1]
        mean, median = float(times[0].mean()), float(np.median(times[0]))
    else:
        distribution = np.asarray(pmf, dtype=np.float64)
        lo, hi, median = (montecarlo.pmf_quantile(distribution[None], q) for q in ((1 - alpha) / 2, (1 + alpha) / 2, 0.5))
        mean, median = float(distribution @ np.arange(1, length + 1)), float(median[0])
    return {"alpha": alpha, "lower": float(lo[0]), "upper": float(hi[0]), "mean": mean,
            "median": median, "distribution": distribution.tolist(),
            "p_event_within_length": float(reached.mean())}


def image_seed(seed: int, image: np.ndarray) -> int:
    """The generator seed of one image: from the user's seed and the pixels (63 bits)."""
    digest = hashlib.sha256(seed.to_bytes(8, "little") + np.ascontiguousarray(image).tobytes()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def predict_one(loaded: Loaded, item: Item, num_samples: int, seed: int, alpha: float,
                prefix: Sequence[int] = (), device: str = "cpu", estimator: str = ESTIMATORS[0]) -> dict:
    """The estimates of one image as plain JSON values (see the module doc)."""
    import torch

    from .. import metrics, montecarlo
    from ..evaluation import draw_samples

    if estimator not in ESTIMATORS:
        raise PredictError(f"estimator {estimator!r}: expected one of {', '.join(ESTIMATORS)}")
    L, c, event = loaded.length, loaded.num_classes, loaded.event
    forced = event if loaded.absorbing == "forced" else None
    rb = event if estimator == "rao_blackwell" else None
    images = torch.as_tensor(item.image[None]).to(device)
    generator = torch.Generator().manual_seed(image_seed(seed, item.image))

    def estimate(first: Sequence[int]) -> tuple[np.ndarray, dict]:
        drawn = draw_samples(loaded.model, images, num_samples, L, generator, absorbing=forced,
                             prefix=list(first) or None, rao_blackwell=rb)
        if rb is None:
            return montecarlo.marginal_probs(drawn, c)[0], _time_to_event(drawn, event, L, alpha)
        samples, marginals, pmf = drawn
        return marginals.numpy()[0], _time_to_event(samples, event, L, alpha, pmf.numpy()[0])

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
