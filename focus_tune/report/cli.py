"""``python -m focus_tune.report RESULTS_CSV``: the differences from none of a finished report."""

from __future__ import annotations

import argparse
from typing import Sequence

from .columns import ordered_families
from .markdown import difference_lines
from .tables import read_finals


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m focus_tune.report RESULTS_CSV``: the differences from none, paired by seed, with
    Holm-adjusted p-values."""
    ap = argparse.ArgumentParser(prog="python -m focus_tune.report", description=main.__doc__)
    ap.add_argument("results_csv", help="a report's results.csv")
    args = ap.parse_args(argv)
    finals = read_finals(args.results_csv)
    lines = difference_lines(ordered_families(finals), finals)
    print("\n".join(lines) if lines else "no family to compare with none in this file")
    return 0
