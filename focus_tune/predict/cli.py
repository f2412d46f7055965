"""The command line: ``python -m focus_tune.predict --model URI IMAGE_OR_FOLDER...``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from ..arguments import OneLineParser, error_exit, int_at_least, number_above
from ..errors import PredictError
from ..names import ESTIMATORS, FAMILIES, PREDICT_DEFAULTS
from .estimate import DEFAULT_ESTIMATOR, DEFAULT_SAMPLES, predict_one
from .inputs import collect, parse_prefix
from .loading import load
from .output import _file_name, leak_warning, plot_prediction, summary, write_parquet


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
    p.add_argument("--family", choices=tuple(reversed(FAMILIES)), default="time-dependent",
                   help="which final model of a run folder or parent run (default time-dependent)")
    p.add_argument("--tracking-uri",
                   help="the MLflow store of runs:/ and models:/ URIs (default sqlite:///mlflow.db here)")
    p.add_argument("--data", type=Path, help="the dataset the model was trained on, for a model that does not "
                                             "record its classes and image size")
    p.add_argument("--num-samples", "-M", type=int_at_least(1), default=DEFAULT_SAMPLES,
                   help=f"Monte Carlo samples per image (default {DEFAULT_SAMPLES})")
    p.add_argument("--seed", type=int_at_least(0), default=PREDICT_DEFAULTS["seed"],
                   help=f"sampling seed (default {PREDICT_DEFAULTS['seed']})")
    p.add_argument("--estimator", choices=ESTIMATORS, default=DEFAULT_ESTIMATOR,
                   help="rao_blackwell (default): the mean of the model's own conditionals along the M draws, "
                        "less noisy; counted: the class frequencies of the draws (the paper's)")
    p.add_argument("--alpha", type=number_above(0.0), help="level of the interval I_alpha (default: the search's, 0.9)")
    p.add_argument("--prefix", help="condition on the first entries: class names or ids, comma-separated (NOOP,RIGHT)")
    p.add_argument("--split", choices=("train", "val", "test"), default="test", help="split of a dataset folder input")
    p.add_argument("--items", help="items of a dataset folder input: 0-4,9 or 'all' (default: the first 5)")
    p.add_argument("--no-resize", dest="resize", action="store_false",
                   help="refuse images of another size instead of resizing them")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object per image and line instead of the summary")
    p.add_argument("--parquet", type=Path, metavar="PATH",
                   help="also write every image's estimates as one Parquet file")
    p.add_argument("--figures", type=Path, metavar="DIR", help="also write one figure per image into DIR")
    p.add_argument("--bands", type=int_at_least(1), default=6, help="entry bands in the summary (default 6)")
    p.add_argument("--top", type=int_at_least(1), default=3, help="classes shown per band (default 3)")
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
    if warning := leak_warning(results):
        print(warning + ("" if args.json else "\n"), file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.parquet:
        write_parquet(args.parquet, results)
        print(f"parquet: {args.parquet} ({len(results)} rows)", file=sys.stderr if args.json else sys.stdout)
    with_truth = [r for r in results if r["truth"]]
    if len(with_truth) > 1 and not args.json:
        from ..scoring.metrics import interval_metrics

        cov = interval_metrics([r["time_to_event"]["lower"] for r in with_truth],
                               [r["time_to_event"]["upper"] for r in with_truth],
                               [r["time_to_event"]["mean"] for r in with_truth],
                               [r["truth"]["time_to_event"] for r in with_truth],
                               censored=[r["truth"].get("censored", False) for r in with_truth])
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
        return error_exit(err)
