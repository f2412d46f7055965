"""Use a searched model: ``python -m focus_tune.predict --model URI IMAGE_OR_FOLDER...``.

For every input image, M sequences are sampled from the simulator (``train.draw_samples``,
the sampler of the search) and turned into Monte Carlo estimates: the marginal probability
of every class at every entry, the same given a prefix of the first entries (``--prefix``,
exact conditioning: the prefix is forced while sampling), and the time to the event (END /
dead) with its interval I_alpha. ``--estimator rao_blackwell`` (the default) averages the
model's own conditionals p(y_i | x, sampled y_<i) over the M draws, unbiased and less noisy
than counting (docs/BENCHMARKS.md); ``--estimator counted`` gives the paper's class
frequencies and sampled-time quantiles (``montecarlo``). ``p_event_within_length`` is
counted from the draws either way.

The model is a final model of a search: an MLflow URI (``runs:/<parent run>/model-time-dependent``,
``models:/<model id>``, ``models:/<name>/<version>``), a search's run folder
(``runs/hero-quick-seed0``, then ``--family`` picks the model) or a model folder. Inputs are
image files, folders of images, or dataset folders (their ``--split`` items ``--items``,
with the truth beside the estimate).

Output: a summary on the terminal, ``--json`` (one JSON object per image and line),
``--parquet PATH`` (one row per image) and ``--figures DIR`` (one PNG per image).
Each image gets its own generator, seeded from ``--seed`` and the image's pixels: its
estimate does not depend on the other inputs or their order, the same image and seed give
the same numbers, and different images get independent Monte Carlo noise.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .atomic import short, write_atomic
from .cli import OneLineParser, int_at_least, number_above, positive_int

FAMILIES = ("time-dependent", "constant", "none")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".npy")
MODEL_JSON = "model.json"
DEFAULT_SAMPLES = 100  # the paper's M
ESTIMATORS = ("rao_blackwell", "counted")  # the first is the default (see the module doc)
DEFAULT_ITEMS = 5  # items of a dataset folder input when --items is not given
MAX_HEATMAP_CLASSES = 24  # more classes: the most probable ones, the rest summed as "other"


class PredictError(RuntimeError):
    """Bad input or a model that cannot be used; the message says what to do."""


# ----------------------------------------------------------------------------- the model


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
            state = path / "search_state.json"
            try:
                recorded = json.loads(state.read_text()).get("fingerprint", {}) if state.is_file() else {}
            except (OSError, ValueError):
                recorded = {}
            return folder, {"data": recorded.get("data")} if isinstance(recorded, dict) else {}
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
    from .model_io import load_model

    if _is_uri(source):
        from .tracking import ModelNotFound, fetch_model

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
    from .data import DataError, read_manifest

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


# ----------------------------------------------------------------------------- inputs


@dataclass
class Item:
    """One image to predict for: its name, pixels uint8 [C, H, W], and the truth when known."""

    name: str
    image: np.ndarray
    note: str | None = None  # e.g. "resized from 64x48"
    truth: dict | None = None  # sequence, time_to_event, exact_marginals (dataset items)


def parse_items(spec: str | None, n: int) -> list[int]:
    """"0-4,9" -> [0, 1, 2, 3, 4, 9]; "all" -> every index below n; None -> the first
    DEFAULT_ITEMS (fewer when the split is smaller)."""
    if spec is None:
        return list(range(min(DEFAULT_ITEMS, n)))
    if spec.strip().lower() == "all":
        return list(range(n))
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise PredictError(f"--items {short(spec)[1:-1]}: expected indices like 0-4,9 or 'all'")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise PredictError(f"--items {part}: the range runs backwards")
        out.extend(range(lo, hi + 1))
    bad = [i for i in out if i >= n]
    if bad:
        raise PredictError(f"--items {short(spec)[1:-1]}: index {bad[0]} is out of range (the split has {n} items)")
    return list(dict.fromkeys(out))


def _from_array(array: np.ndarray, shape: tuple[int, int, int], name: str, resize: bool) -> tuple[np.ndarray, str | None]:
    """Pixels (a .npy, a decoded image file, a dataset item), uint8 [C, H, W] or [H, W, C] with
    the model's channels, as the model's [C, H, W]: resized (bilinear, antialiased, each channel)
    unless ``resize`` is False."""
    C, H, W = shape
    if array.dtype != np.uint8 or array.ndim not in (2, 3):
        raise PredictError(f"{name}: expected uint8 pixels [C, H, W] or [H, W, C], got {array.dtype} {list(array.shape)}")
    if array.ndim == 2:
        array = array[None]
    if array.shape[0] not in (1, 3, 4) and array.shape[-1] in (1, 3, 4):
        array = array.transpose(2, 0, 1)
    if array.shape[0] != C:
        raise PredictError(f"{name}: {array.shape[0]} channel(s), the model reads {C}; convert the image "
                           f"(or save it as PNG/JPEG, which is converted)")
    if array.shape[1:] == (H, W):
        return np.ascontiguousarray(array), None
    if not resize:
        raise PredictError(f"{name}: {array.shape[2]}x{array.shape[1]} pixels, the model reads {W}x{H} "
                           "(drop --no-resize to resize it)")
    from PIL import Image

    planes = [np.asarray(Image.fromarray(p).resize((W, H), Image.Resampling.BILINEAR, reducing_gap=2.0))
              for p in array]
    return np.stack(planes).astype(np.uint8), f"resized from {array.shape[2]}x{array.shape[1]} to {W}x{H}"


def load_image(path: Path, shape: tuple[int, int, int], resize: bool = True) -> tuple[np.ndarray, str | None]:
    """An image file as the model's uint8 [C, H, W]: converted to its channels (RGB or grey)
    and resized to its size (bilinear, antialiased) unless ``resize`` is False; a .npy holds
    the pixels themselves. Raises PredictError naming the file otherwise."""
    C = shape[0]
    if path.suffix.lower() == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise PredictError(f"{path}: not a numpy array file ({short(str(err), 120)[1:-1]})") from None
        return _from_array(array, shape, str(path), resize)
    if C not in (1, 3):
        raise PredictError(f"{path}: the model reads {C}-channel images; give them as .npy arrays [C, H, W]")
    from PIL import Image, UnidentifiedImageError

    from .data.images import MAX_PIXELS

    try:
        with Image.open(path) as image:
            if image.width * image.height > MAX_PIXELS:
                raise PredictError(f"{path}: {image.width}x{image.height} pixels is too large (at most {MAX_PIXELS})")
            array = np.asarray(image.convert("RGB" if C == 3 else "L"), dtype=np.uint8)
    except PredictError:
        raise
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
        raise PredictError(f"{path}: not a readable image ({short(str(err), 120)[1:-1]})") from None
    return _from_array(array if array.ndim == 2 else array.transpose(2, 0, 1), shape, str(path), resize)


def _dataset_items(folder: Path, split: str, spec: str | None, shape: tuple[int, int, int], resize: bool) -> list[Item]:
    from .data import DataError, load_dataset

    try:
        ds = load_dataset(folder)
        data = ds.split(split)
    except DataError as err:
        raise PredictError(str(err)) from None
    out = []
    for i in parse_items(spec, len(data)):
        image, note = _from_array(data.images[i], shape, f"{folder}:{split}:{i}", resize)
        truth = {"sequence": data.sequences[i].tolist(), "time_to_event": int(data.time_to_event[i]),
                 "exact_marginals": None if data.exact_marginals is None else np.asarray(data.exact_marginals[i])}
        out.append(Item(f"{folder.name}/{split}/{i}", image, note, truth))
    return out


def collect(inputs: Sequence[str], shape: tuple[int, int, int], split: str = "test", items: str | None = None,
            resize: bool = True) -> list[Item]:
    """The images named on the command line, in order (a folder's files sorted by name)."""
    out: list[Item] = []
    for text in inputs:
        path = Path(text)
        if path.is_file():
            out.append(Item(str(path), *load_image(path, shape, resize)))
        elif path.is_dir() and (path / "manifest.json").is_file():
            out.extend(_dataset_items(path, split, items, shape, resize))
        elif path.is_dir():
            files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
            if not files:
                raise PredictError(f"{path}: no image files in it ({', '.join(IMAGE_SUFFIXES)})")
            out.extend(Item(str(f), *load_image(f, shape, resize)) for f in files)
        else:
            raise PredictError(f"{text}: no such file or folder")
    return out


# ----------------------------------------------------------------------------- estimates


def parse_prefix(text: str | None, class_names: Sequence[str], length: int) -> list[int]:
    """"NOOP,RIGHT" or "0,3" -> class ids (names are matched without regard to case)."""
    if not text:
        return []
    lower = {n.lower(): i for i, n in enumerate(class_names)}
    out = []
    for part in (p.strip() for p in text.split(",")):
        if part.lower() in lower:
            out.append(lower[part.lower()])
        elif part.isdigit() and int(part) < len(class_names):
            out.append(int(part))
        else:
            raise PredictError(f"--prefix {short(text)[1:-1]}: {short(part)} is not a class; the classes are "
                               f"{', '.join(class_names[:30])}{' ...' if len(class_names) > 30 else ''} (or ids 0..{len(class_names) - 1})")
    if len(out) >= length:
        raise PredictError(f"--prefix has {len(out)} entries; the sequences have {length}: leave entries to predict")
    return out


def _time_to_event(samples, event: int, length: int, alpha: float, pmf=None) -> dict:
    """The time-to-event summary of one image's draws [1, M, L]: counted from the sampled
    times, or from ``pmf`` [L] (the Rao-Blackwellized distribution on t = 1..L) when given."""
    from . import montecarlo

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

    from . import metrics, montecarlo
    from .train import draw_samples

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
        covered = metrics.interval_metrics([tte["lower"]], [tte["upper"]], [tte["mean"]], [t["time_to_event"]])
        truth = {"sequence": [loaded.class_names[y] for y in t["sequence"]], "time_to_event": t["time_to_event"],
                 "covered": bool(covered["coverage"] == 1.0), "rmse_to_exact": None}
        if t.get("exact_marginals") is not None and np.shape(t["exact_marginals"]) == marginals.shape:
            truth["rmse_to_exact"] = metrics.rmse_to_truth(marginals[None], np.asarray(t["exact_marginals"])[None])
        out["truth"] = truth
    return out


# ----------------------------------------------------------------------------- the terminal


def bands(length: int, count: int) -> list[tuple[int, int]]:
    """``count`` contiguous entry bands (1-based, inclusive) covering 1..length."""
    return [(int(b[0]) + 1, int(b[-1]) + 1) for b in np.array_split(np.arange(length), min(count, length))]


def summary(result: dict, n_bands: int = 6, top: int = 3) -> str:
    """The readable summary of one image: top classes per entry band, the interval."""
    names = result["class_names"]
    lines = [f"{result['input']}" + (f"  ({result['image_note']})" if result["image_note"] else "")]

    def table(marginals, start: int = 1) -> list[str]:
        p = np.asarray(marginals)
        rows = []
        for lo, hi in bands(result["length"] - start + 1, n_bands):
            lo, hi = lo + start - 1, hi + start - 1
            mean = p[lo - 1: hi].mean(axis=0)
            best = np.argsort(-mean, kind="stable")[:top]
            label = f"{lo}" if lo == hi else f"{lo}-{hi}"
            rows.append(f"    {label:<9}" + "  ".join(f"{names[a]} {mean[a]:.2f}" for a in best))
        return rows

    lines.append(f"  marginal P(Y_i = a | x), top {top} classes, mean over the entries of each band:")
    lines += table(result["marginals"])
    lines.append("  " + _tte_line(result["time_to_event"], result["event"], result["length"]))
    truth = result.get("truth")
    if truth:
        where = "inside" if truth["covered"] else "outside"
        rmse = f"; RMSE to the exact marginals {truth['rmse_to_exact']:.4f}" if truth["rmse_to_exact"] is not None else ""
        lines.append(f"  truth: T = {truth['time_to_event']} ({where} the interval){rmse}")
    cond = result.get("conditional")
    if cond:
        k = len(cond["prefix"])
        lines.append(f"  given entries 1..{k} = {', '.join(cond['prefix'])}:")
        lines += table(cond["marginals"], start=k + 1)
        lines.append("  " + _tte_line(cond["time_to_event"], result["event"], result["length"]))
    return "\n".join(lines)


def _tte_line(tte: dict, event: str, length: int) -> str:
    a = tte["alpha"]
    return (f"time to {event}: I_{a:g} = [{tte['lower']:g}, {tte['upper']:g}] entries, mean {tte['mean']:.1f}, "
            f"median {tte['median']:g}; P({event} within {length} entries) = {tte['p_event_within_length']:.2f}")


# ----------------------------------------------------------------------------- files


def write_parquet(path: Path, results: Sequence[dict]) -> Path:
    """One row per image: marginals [L][c], the interval, the distribution of T, the truth if known."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def tte(r: dict | None, key: str):
        return None if r is None else r["time_to_event"][key]

    cond = [r["conditional"] for r in results]
    columns = {
        "input": [r["input"] for r in results],
        "model": [r["model"] for r in results],
        "family": [r["family"] for r in results],
        "num_samples": pa.array([r["num_samples"] for r in results], pa.int32()),
        "seed": pa.array([r["seed"] for r in results], pa.int64()),
        "estimator": [r["estimator"] for r in results],
        "image_note": [r["image_note"] for r in results],
        "marginals": pa.array([r["marginals"] for r in results], pa.list_(pa.list_(pa.float64()))),
        "tte_alpha": [r["time_to_event"]["alpha"] for r in results],
        "tte_lower": [r["time_to_event"]["lower"] for r in results],
        "tte_upper": [r["time_to_event"]["upper"] for r in results],
        "tte_mean": [r["time_to_event"]["mean"] for r in results],
        "tte_median": [r["time_to_event"]["median"] for r in results],
        "tte_distribution": pa.array([r["time_to_event"]["distribution"] for r in results], pa.list_(pa.float64())),
        "p_event_within_length": [r["time_to_event"]["p_event_within_length"] for r in results],
        "prefix": pa.array([c["prefix"] if c else None for c in cond], pa.list_(pa.string())),
        "conditional_marginals": pa.array([c["marginals"] if c else None for c in cond],
                                          pa.list_(pa.list_(pa.float64()))),
        "conditional_tte_lower": pa.array([tte(c, "lower") for c in cond], pa.float64()),
        "conditional_tte_upper": pa.array([tte(c, "upper") for c in cond], pa.float64()),
        "conditional_tte_mean": pa.array([tte(c, "mean") for c in cond], pa.float64()),
        "true_time_to_event": pa.array([r["truth"]["time_to_event"] if r["truth"] else None for r in results],
                                       pa.int32()),
        "true_covered": pa.array([r["truth"]["covered"] if r["truth"] else None for r in results], pa.bool_()),
    }
    first = results[0]
    meta = {"focus_tune.class_names": json.dumps(first["class_names"]), "focus_tune.event": first["event"],
            "focus_tune.length": str(first["length"])}
    table = pa.table(columns).replace_schema_metadata(meta)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, buf.getvalue())
    return path


def _file_name(name: str, taken: set[str]) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(name).with_suffix("").as_posix().strip("/")).strip("._") or "image"
    stem = stem[-80:]
    candidate, n = stem, 2
    while candidate in taken:
        candidate, n = f"{stem}-{n}", n + 1
    taken.add(candidate)
    return candidate + ".png"


def plot_prediction(result: dict, image: np.ndarray, path: Path) -> Path:
    """One image's figure: the input, P(Y_i = a | x) as a heatmap over entries and classes,
    and the distribution of the time to the event with I_alpha shaded (and the truth)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from .report import SEARCH_STYLE

    names = result["class_names"]
    p = np.asarray(result["marginals"])  # (L, c)
    L = p.shape[0]
    rows = np.arange(p.shape[1])
    if p.shape[1] > MAX_HEATMAP_CLASSES:  # the most probable classes, the rest summed
        keep = np.sort(np.argsort(-p.sum(axis=0), kind="stable")[: MAX_HEATMAP_CLASSES - 1])
        rest = np.setdiff1d(rows, keep)
        p = np.concatenate([p[:, keep], p[:, rest].sum(axis=1, keepdims=True)], axis=1)
        labels = [names[a] for a in keep] + [f"other ({len(rest)})"]
    else:
        labels = list(names)
    tte = result["time_to_event"]
    with matplotlib.rc_context(SEARCH_STYLE):
        fig = Figure(figsize=(11.5, max(3.2, 0.17 * len(labels) + 1.3)), layout="constrained")
        fig.get_layout_engine().set(wspace=0.06)
        FigureCanvasAgg(fig)
        grid = fig.add_gridspec(1, 3, width_ratios=(0.8, 3.2, 2.0))
        ax_img = fig.add_subplot(grid[0, 0])
        shown = image.transpose(1, 2, 0) if image.shape[0] == 3 else image[0]
        ax_img.imshow(shown, cmap=None if image.shape[0] == 3 else "gray", interpolation="nearest")
        ax_img.set_axis_off()
        ax_img.set_title(_wrap(result["input"], 16), fontsize=7)

        ax = fig.add_subplot(grid[0, 1])
        mesh = ax.imshow(p.T, aspect="auto", origin="upper", cmap="viridis", vmin=0, vmax=1,
                         extent=(0.5, L + 0.5, len(labels) - 0.5, -0.5), interpolation="nearest")
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=6.5 if len(labels) > 12 else 7.5)
        ax.set(xlabel="entry i", title=f"Marginal probabilities, M = {result['num_samples']} samples"
               + (f", {result['family']} model" if result.get("family") else ""))
        ax.spines[["top", "right"]].set_visible(True)
        fig.colorbar(mesh, ax=ax, fraction=0.04, pad=0.01, label=r"$P(Y_i = a \mid x)$")

        ax_t = fig.add_subplot(grid[0, 2])
        t = np.arange(1, L + 1)
        ax_t.bar(t, tte["distribution"], width=1.0, color="0.55", edgecolor="white", lw=0.3,
                 label=r"$P(T = t \mid x)$")
        ax_t.axvspan(tte["lower"], tte["upper"], color="tab:red", alpha=0.15,
                     label=f"$I_{{{tte['alpha']:g}}}$ = [{tte['lower']:g}, {tte['upper']:g}]")
        ax_t.axvline(tte["mean"], color="tab:red", lw=1.2, label=f"mean {tte['mean']:.1f}")
        cond = result.get("conditional")
        if cond:
            ax_t.step(t, cond["time_to_event"]["distribution"], where="mid", color="tab:blue", lw=1.1,
                      label=f"given {', '.join(cond['prefix'])}: [{cond['time_to_event']['lower']:g}, "
                            f"{cond['time_to_event']['upper']:g}]")
        truth = result.get("truth")
        if truth:
            ax_t.axvline(truth["time_to_event"], color="black", ls="--", lw=1.0, label=f"true T = {truth['time_to_event']}")
        ax_t.set(xlabel=f"time to {result['event']} T (entries; T = {L}: not within {L})", ylabel="probability",
                 xlim=(0.5, L + 0.5), title=f"Time to {result['event']}")
        ax_t.legend(frameon=False, loc="best")
        ax_t.grid(alpha=0.25, lw=0.5)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=150)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, buf.getvalue())
    return path


def _wrap(text: str, width: int = 28) -> str:
    return "\n".join(text[i: i + width] for i in range(0, len(text), width))


# ----------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m focus_tune.predict",
        description="Calibrated probabilities and time-to-event intervals of a searched model for new images.",
    )
    p.add_argument("inputs", nargs="+", metavar="IMAGE_OR_FOLDER",
                   help="image files (PNG, JPEG, ... or .npy uint8 arrays), folders of images, or dataset folders")
    p.add_argument("--model", required=True,
                   help="runs:/<run id>/model-time-dependent, models:/<model id>, a search's run folder "
                        "(runs/hero-quick-seed0) or a model folder")
    p.add_argument("--family", choices=FAMILIES, default="time-dependent",
                   help="which final model of a run folder or parent run (default time-dependent)")
    p.add_argument("--tracking-uri", help="the MLflow store of runs:/ and models:/ URIs (default sqlite:///mlflow.db here)")
    p.add_argument("--data", type=Path, help="the dataset the model was trained on, for a model that does not "
                                             "record its classes and image size")
    p.add_argument("--num-samples", "-M", type=positive_int, default=DEFAULT_SAMPLES,
                   help=f"Monte Carlo samples per image (default {DEFAULT_SAMPLES})")
    p.add_argument("--seed", type=int_at_least(0), default=0, help="sampling seed (default 0)")
    p.add_argument("--estimator", choices=ESTIMATORS, default=ESTIMATORS[0],
                   help="rao_blackwell (default): the mean of the model's own conditionals along the M draws, "
                        "less noisy; counted: the class frequencies of the draws (the paper's)")
    p.add_argument("--alpha", type=number_above(0.0), help="level of the interval I_alpha (default: the search's, 0.9)")
    p.add_argument("--prefix", help="condition on the first entries: class names or ids, comma-separated (NOOP,RIGHT)")
    p.add_argument("--split", choices=("train", "val", "test"), default="test", help="split of a dataset folder input")
    p.add_argument("--items", help="items of a dataset folder input: 0-4,9 or 'all' (default: the first 5)")
    p.add_argument("--no-resize", dest="resize", action="store_false",
                   help="refuse images of another size instead of resizing them")
    p.add_argument("--json", action="store_true", help="print one JSON object per image and line instead of the summary")
    p.add_argument("--parquet", type=Path, metavar="PATH", help="also write every image's estimates as one Parquet file")
    p.add_argument("--figures", type=Path, metavar="DIR", help="also write one figure per image into DIR")
    p.add_argument("--bands", type=positive_int, default=6, help="entry bands in the summary (default 6)")
    p.add_argument("--top", type=positive_int, default=3, help="classes shown per band (default 3)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to sample (default cpu)")
    return p


def run(args) -> int:
    import torch

    if args.alpha is not None and not args.alpha < 1:
        raise PredictError(f"--alpha {args.alpha:g}: expected a level in (0, 1)")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise PredictError("--device cuda: no CUDA device is available here")
    datasets = [args.data] if args.data else []
    datasets += [Path(t) for t in args.inputs if (Path(t) / "manifest.json").is_file()]
    loaded = load(args.model, args.family, args.tracking_uri, datasets)
    loaded.model.to(args.device)
    prefix = parse_prefix(args.prefix, loaded.class_names, loaded.length)
    items = collect(args.inputs, loaded.image_shape, args.split, args.items, args.resize)
    alpha = args.alpha if args.alpha is not None else loaded.alpha
    C, H, W = loaded.image_shape
    if not args.json:
        print(f"model: {loaded.source} ({loaded.family or 'unknown family'}"
              + (f", trained as {loaded.trial_id}" if loaded.trial_id else "")
              + f") | {loaded.num_classes} classes, L = {loaded.length}, images {C}x{H}x{W} | "
              f"M = {args.num_samples}, seed {args.seed}, estimator {args.estimator}\n")
    results, taken = [], set()
    for item in items:
        result = predict_one(loaded, item, args.num_samples, args.seed, alpha, prefix, args.device, args.estimator)
        results.append(result)
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            print(summary(result, args.bands, args.top) + "\n", flush=True)
        if args.figures:
            figure = plot_prediction(result, item.image, args.figures / _file_name(item.name, taken))
            if not args.json:
                print(f"  figure: {figure}\n")
    if args.parquet:
        write_parquet(args.parquet, results)
        print(f"parquet: {args.parquet} ({len(results)} rows)", file=sys.stderr if args.json else sys.stdout)
    with_truth = [r for r in results if r["truth"]]
    if len(with_truth) > 1 and not args.json:
        from .metrics import interval_metrics

        cov = interval_metrics([r["time_to_event"]["lower"] for r in with_truth],
                               [r["time_to_event"]["upper"] for r in with_truth],
                               [r["time_to_event"]["mean"] for r in with_truth],
                               [r["truth"]["time_to_event"] for r in with_truth])
        print(f"dataset items: {len(with_truth)}; I_{alpha:g} covers the true T of {cov['coverage']:.0%}, "
              f"relative width {cov['relative_width']:.2f}, relative MAE {cov['relative_mae']:.2f}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import logging
    import warnings

    logging.getLogger("mlflow").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="mlflow")
    try:
        return run(args)
    except PredictError as err:
        text = " ".join(str(err).split())
        print(f"error: {text if len(text) <= 600 else text[:597] + '...'}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
