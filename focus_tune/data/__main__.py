"""Command line: build, import and inspect datasets.

    python -m focus_tune.data build --game hero [--profile quick] [--out DIR] [--seed 0]
    python -m focus_tune.data import-atari-head PATH --game hero --out DIR [--profile paper]
    python -m focus_tune.data import-utkface PATH --out DIR [--image-size 64]
    python -m focus_tune.data import-table TABLE --out DIR --event CLASS [...]   # your own data
    python -m focus_tune.data import-arrays FILE.npz --out DIR --event CLASS [...]
    python -m focus_tune.data import-folder FOLDER --out DIR --event CLASS [...]   # imagefolder layout
    python -m focus_tune.data info DIR

import-table reads a CSV, Parquet or JSON Lines table, one row per item: an image file path
and its class-name sequence (docs/DATA.md, "Your own data"); import-folder a folder of images
in Hugging Face datasets' imagefolder layout (a metadata.csv or metadata.jsonl with a file_name
column; train/ validation/ test/ split folders, each with its own); import-arrays an .npz of
images, sequences (-1 unobserved) and class names.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..arguments import OneLineParser, error_exit, int_at_least
from ..errors import DataError
from . import ATARI_GAMES, BUILTIN_SCENARIOS, PROFILES, build_dataset, dataset_dir, load_dataset
from .describe import describe, verified


def get_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m focus_tune.data", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    build = commands.add_parser("build", help="build a default offline dataset (FaceMed or an Atari game)")
    build.add_argument("--game", dest="scenario", required=True, choices=BUILTIN_SCENARIOS)
    build.add_argument("--profile", default="quick", choices=PROFILES)
    build.add_argument("--out", type=Path, help="dataset folder (default: data/GAME-PROFILE-seedSEED)")
    build.add_argument("--seed", type=int_at_least(0), default=0)

    head = commands.add_parser("import-atari-head", help="convert one game of Atari-HEAD")
    head.add_argument("path", type=Path, help="the game's folder of *.txt and *.tar.bz2 trial files")
    head.add_argument("--game", required=True, choices=ATARI_GAMES)
    head.add_argument("--out", type=Path, required=True)
    head.add_argument("--profile", default="paper", choices=PROFILES,
                      help="take the image shape, padded length and sampling freq from this profile")
    head.add_argument("--length", type=int_at_least(1), help="padded length L (default: the profile's)")
    head.add_argument("--freq", type=int_at_least(1), help="frames per entry (default: the profile's)")
    head.add_argument("--image-size", type=int_at_least(1), nargs=2, metavar=("H", "W"),
                      help="(default: the profile's)")
    head.add_argument("--stride", type=int_at_least(1), default=1, help="use every STRIDE-th frame as an input")
    head.add_argument("--seed", type=int_at_least(0), default=0, help="seed of the split by trial")

    utk = commands.add_parser("import-utkface", help="build FaceMed from a UTKFace folder")
    utk.add_argument("path", type=Path)
    utk.add_argument("--out", type=Path, required=True)
    utk.add_argument("--image-size", type=int_at_least(1), default=None,
                     help="square side in pixels (default: paper profile)")
    utk.add_argument("--length", type=int_at_least(1), default=None, help="padded length L in years (default: 100)")
    utk.add_argument("--seed", type=int_at_least(0), default=0)

    table = commands.add_parser("import-table", help="import your own data: a CSV, Parquet or JSON Lines table "
                                "of image paths and class-name sequences")
    table.add_argument("path", type=Path, nargs="?", metavar="TABLE",
                       help="CSV, Parquet or JSON Lines (.jsonl), one row per item (give it before a list flag "
                            "such as --classes)")
    _own_data_flags(table)
    _table_flags(table)
    table.add_argument("--images", type=Path, metavar="ROOT",
                       help="folder that relative image paths start from (default: the table's folder)")
    table.add_argument("--image-column", default="image", metavar="COL", help="(default: image)")
    _split_flags(table)

    folder = commands.add_parser("import-folder", help="import your own data: a folder of images in the "
                                 "imagefolder layout (metadata.csv or metadata.jsonl, file_name column)")
    folder.add_argument("path", type=Path, nargs="?", metavar="FOLDER",
                        help="images with a metadata.csv or metadata.jsonl (file_name: the image's path relative "
                             "to it; the sequence column), or train/, validation/ (or val/), test/ folders, each "
                             "with its own (give FOLDER before a list flag such as --classes)")
    _own_data_flags(folder)
    _table_flags(folder)
    _split_flags(folder, " (one metadata file at the top only: split folders give the splits)")
    arrays = commands.add_parser("import-arrays", help="import your own data: an .npz of images, sequences "
                                 "and class names")
    arrays.add_argument("path", type=Path, nargs="?", metavar="FILE.npz",
                        help="images uint8 [N, C, H, W] or [N, H, W, C], sequences int [N, L] (-1 unobserved), "
                             "classes; optional split or groups [N]")
    _own_data_flags(arrays)
    arrays.add_argument("--classes", nargs="+", metavar="CLASS",
                        help="the class names (spaces or commas), if the file has none")

    info = commands.add_parser("info", help="verify a dataset folder (files and contents) and summarise it")
    info.add_argument("path", type=Path)
    return parser


def _own_data_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="the dataset folder to write")
    parser.add_argument("--event", required=True, metavar="CLASS",
                        help="the class whose first occurrence is the time to event")
    parser.add_argument("--absorbing", nargs="+", metavar="CLASS",
                        help="the class after which nothing changes: the event (the default) and no other; end a "
                             "sequence at another final class's entry instead (censored there; docs/DATA.md)")
    parser.add_argument("--condition", metavar="CLASS",
                        help="first-entry class of the conditional metrics, not the event (default: the most "
                             "frequent first entry of train other than the event)")
    parser.add_argument("--name", help="the dataset's (and a search's) name (default: the --out folder's name)")
    parser.add_argument("--seed", type=int_at_least(0), default=0, help="seed of the 70/20/10 split")


def _table_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--length", type=int_at_least(1), help="padded length L (default: the longest sequence)")
    parser.add_argument("--truncate", action="store_true", help="cut sequences longer than --length (else refused)")
    parser.add_argument("--classes", nargs="+", metavar="CLASS",
                        help="the class names in id order, separated by spaces or commas (default: those seen, "
                             "sorted; given, a sequence's class not among them is refused)")
    parser.add_argument("--image-size", type=int_at_least(1), nargs=2, metavar=("H", "W"),
                        help="resize every image (required when their sizes differ)")
    parser.add_argument("--channels", type=int, choices=(1, 3),
                        help="1 (grayscale) or 3 (RGB); default: 1 if every image is grayscale, else 3")
    parser.add_argument("--sequence-column", default="sequence", metavar="COL", help="(default: sequence)")


def _split_flags(parser: argparse.ArgumentParser, note: str = "") -> None:
    split = parser.add_mutually_exclusive_group()
    split.add_argument("--split-column", metavar="COL", help="column of train / val / test per row" + note)
    split.add_argument("--group-column", metavar="COL",
                       help="split 70/20/10 by this column's values: a group never spans two splits" + note)


LIST_FLAGS = ("classes", "absorbing")  # nargs="+": each takes every word after it
_INPUT_SUFFIXES = (".csv", ".tsv", ".txt", ".parquet", ".pq", ".jsonl", ".ndjson", ".npz")
_INPUT_NAME = {"import-table": "TABLE", "import-arrays": "FILE.npz", "import-folder": "FOLDER"}


def _own_data_lists(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The list flags of the importers split at commas too (--classes ok,warn,fail); the input
    file swallowed by a list flag before it (--classes ok warn fail items.csv) is taken back
    when it names a file or ends like one (import-folder: a folder), else one line says where
    it goes."""
    for flag in LIST_FLAGS:
        values = getattr(args, flag, None)
        if values is not None:
            setattr(args, flag, [part for v in values for part in v.split(",") if part])
    what = _INPUT_NAME[args.command]

    def an_input(word: str) -> bool:
        if args.command == "import-folder":
            return Path(word).is_dir()
        return Path(word).is_file() or Path(word).suffix.lower() in _INPUT_SUFFIXES

    if args.path is None:
        found = [flag for flag in LIST_FLAGS if getattr(args, flag, None) and an_input(getattr(args, flag)[-1])]
        if len(found) == 1:
            args.path = Path(getattr(args, found[0]).pop())
        else:
            parser.error(f"{args.command}: {what} is missing; give it first ({parser.prog} {args.command} {what} "
                         "--out DIR ...): a list flag (--classes, --absorbing) takes every word after it, "
                         "or write the list with commas (--classes ok,warn,fail)")
    for flag in LIST_FLAGS:
        if getattr(args, flag, None) == []:
            parser.error(f"{args.command}: --{flag} lists no class")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.command in _INPUT_NAME:
        _own_data_lists(parser, args)
    start = time.perf_counter()
    try:
        if args.command == "build":
            out = args.out or dataset_dir("data", args.scenario, args.profile, args.seed)
            path = build_dataset(args.scenario, args.profile, out, seed=args.seed)
        elif args.command == "import-atari-head":
            from .builtin.atari_head import import_atari_head

            path = import_atari_head(args.path, args.game, args.out, profile=args.profile, length=args.length,
                                     sampling_freq=args.freq, image_size=args.image_size,
                                     stride=args.stride, seed=args.seed)
        elif args.command == "import-utkface":
            from .builtin.facemed import import_utkface

            path = import_utkface(args.path, args.out, image_size=args.image_size, length=args.length,
                                  seed=args.seed)
        elif args.command == "import-table":
            from .own.table import import_table
            from .own.write import command_line

            path = import_table(args.path, args.out, event=args.event, absorbing=args.absorbing,
                                length=args.length, name=args.name, classes=args.classes,
                                condition=args.condition, image_size=args.image_size, channels=args.channels,
                                images_root=args.images, image_column=args.image_column,
                                sequence_column=args.sequence_column, split_column=args.split_column,
                                group_column=args.group_column, seed=args.seed, truncate=args.truncate,
                                command=command_line(argv))
        elif args.command == "import-folder":
            from .own.folder import import_folder
            from .own.write import command_line

            path = import_folder(args.path, args.out, event=args.event, absorbing=args.absorbing,
                                 length=args.length, name=args.name, classes=args.classes,
                                 condition=args.condition, image_size=args.image_size, channels=args.channels,
                                 sequence_column=args.sequence_column, split_column=args.split_column,
                                 group_column=args.group_column, seed=args.seed, truncate=args.truncate,
                                 command=command_line(argv))
        elif args.command == "import-arrays":
            from .own.arrays import import_arrays
            from .own.write import command_line

            path = import_arrays(args.path, args.out, event=args.event, absorbing=args.absorbing, name=args.name,
                                 classes=args.classes, condition=args.condition, seed=args.seed,
                                 command=command_line(argv))
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
