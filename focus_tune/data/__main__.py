"""Command line: build, import and inspect datasets.

    python -m focus_tune.data build --game hero [--profile quick] [--out DIR] [--seed 0]
    python -m focus_tune.data import-atari-head PATH --game hero --out DIR [--profile paper]
    python -m focus_tune.data import-utkface PATH --out DIR [--image-size 64]
    python -m focus_tune.data info DIR
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..cli import OneLineParser, error_exit, non_negative_int, positive_int
from . import ATARI_GAMES, GAMES, PROFILES, DataError, build_dataset, dataset_dir, load_dataset
from .store import SPLITS, Dataset, Manifest


def get_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m focus_tune.data", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    build = commands.add_parser("build", help="build a default offline dataset (FaceMed or an Atari game)")
    build.add_argument("--game", required=True, choices=GAMES)
    build.add_argument("--profile", default="quick", choices=PROFILES)
    build.add_argument("--out", type=Path, help="dataset folder (default: data/GAME-PROFILE-seedSEED)")
    build.add_argument("--seed", type=non_negative_int, default=0)

    head = commands.add_parser("import-atari-head", help="convert one game of Atari-HEAD")
    head.add_argument("path", type=Path, help="the game's folder of *.txt and *.tar.bz2 trial files")
    head.add_argument("--game", required=True, choices=ATARI_GAMES)
    head.add_argument("--out", type=Path, required=True)
    head.add_argument("--profile", default="paper", choices=PROFILES,
                      help="take the image shape, padded length and sampling freq from this profile")
    head.add_argument("--length", type=positive_int, help="padded length L (default: the profile's)")
    head.add_argument("--freq", type=positive_int, help="frames per entry (default: the profile's)")
    head.add_argument("--image-size", type=positive_int, nargs=2, metavar=("H", "W"), help="(default: the profile's)")
    head.add_argument("--stride", type=positive_int, default=1, help="use every STRIDE-th frame as an input")
    head.add_argument("--seed", type=non_negative_int, default=0, help="seed of the split by trial")

    utk = commands.add_parser("import-utkface", help="build FaceMed from a UTKFace folder")
    utk.add_argument("path", type=Path)
    utk.add_argument("--out", type=Path, required=True)
    utk.add_argument("--image-size", type=positive_int, default=None,
                     help="square side in pixels (default: paper profile)")
    utk.add_argument("--length", type=positive_int, default=None, help="padded length L in years (default: 100)")
    utk.add_argument("--seed", type=non_negative_int, default=0)

    info = commands.add_parser("info", help="verify a dataset folder (files and contents) and summarise it")
    info.add_argument("path", type=Path)
    return parser


def describe(manifest: Manifest) -> str:
    """A human-readable summary: manifest, sizes, class frequencies, mean length."""
    m = manifest
    lines = [
        f"name           {m.name}",
        f"source         {m.source}",
        f"generator      {m.generator} v{m.generator_version}, seed {m.seed}, profile {m.profile}",
        f"image shape    {list(m.image_shape)} (C, H, W)",
        f"classes        {m.num_classes}: {', '.join(m.class_names)}",
        f"length L       {m.length}, sampling freq {m.sampling_freq}",
        f"event class    {m.event_class} ({m.class_names[m.event_class]}), "
        f"condition class {m.condition_class} ({m.class_names[m.condition_class]})",
        f"exact truth    {'exact_marginals stored' if m.has_exact_marginals else 'none'}",
    ]
    for split in SPLITS:
        stats = m.stats[split]
        mean = stats["mean_time_to_event"]
        unit = "years" if m.game == "facemed" else f"entries = {mean * m.sampling_freq / 60:.3f} s"
        counts = stats["class_counts"]
        total = sum(counts)
        top = sorted(range(m.num_classes), key=lambda c: -counts[c])[:6]
        freqs = ", ".join(f"{m.class_names[c]} {counts[c] / total:.1%}" for c in top)
        lines.append(f"{split:<6} {m.splits[split]:>7} items, mean time-to-event {mean:.2f} {unit}")
        lines.append(f"       entry frequencies: {freqs}")
    for key, value in m.details.items():
        if key in ("counts", "exact_mean_length", "mean_length_target", "skipped_malformed_names",
                   "skipped_unreadable", "images_found", "behaviour_policy"):
            lines.append(f"{key:<14} {value}")
    return "\n".join(lines)


def verified(path) -> "Dataset":
    """load_dataset, then decode every split so that its contents are checked too (class ids,
    time to event, exact marginals are probabilities)."""
    dataset = load_dataset(path)
    for split in SPLITS:
        dataset.split(split)
    return dataset


def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    start = time.perf_counter()
    try:
        if args.command == "build":
            out = args.out or dataset_dir("data", args.game, args.profile, args.seed)
            path = build_dataset(args.game, args.profile, out, seed=args.seed)
        elif args.command == "import-atari-head":
            from .atari_head import import_atari_head

            path = import_atari_head(args.path, args.game, args.out, profile=args.profile, length=args.length,
                                     sampling_freq=args.freq, image_size=args.image_size,
                                     stride=args.stride, seed=args.seed)
        elif args.command == "import-utkface":
            from .facemed import import_utkface

            path = import_utkface(args.path, args.out, image_size=args.image_size, length=args.length,
                                  seed=args.seed)
        else:
            print(describe(verified(args.path).manifest))
            return 0
    except (DataError, ValueError, OSError) as err:
        return error_exit(err)
    print(f"wrote {path} in {time.perf_counter() - start:.1f} s")
    print(describe(load_dataset(path).manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
