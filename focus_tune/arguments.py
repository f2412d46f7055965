"""Argument parsing shared by the command lines: one error line, exit code 2, bounded values.

Every bad flag is reported as ``error: argument --seed: expected an integer >= 0, got '-1'``
on one line (argparse's usage block is left out: ``--help`` prints it), with at most a short
prefix of the offending value quoted.
"""
from __future__ import annotations

import argparse
import math
import sys
from importlib import metadata

from .quote import short

MAX_INT = 2**31 - 1  # larger values are typos (a 300-digit seed, k2, length...)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse calls this for every bad argument
        print(f"error: {_bound(message)} (see {self.prog} --help)",
              file=sys.stderr)
        sys.exit(2)


def version_text() -> str:
    """What ``--version`` prints: ``focus-tune <version>``, from the installed package's metadata."""
    try:
        return f"focus-tune {metadata.version('focus-tune')}"
    except metadata.PackageNotFoundError:
        return "focus-tune (not installed: no version metadata; pip install -e . in a checkout)"


def error_exit(err: BaseException, limit: int = 600) -> int:
    """The one way a command line reports a failure it expected (bad config, data, model):
    ``error: <message on one line>`` on stderr, exit status 2."""
    print(f"error: {_bound(str(err), limit)}", file=sys.stderr)
    return 2


def _bound(message: str, limit: int = 300) -> str:
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 3] + "..."


def _integer(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {short(text, 40)}") from None
    if abs(value) > MAX_INT:
        raise argparse.ArgumentTypeError(f"expected an integer of at most {MAX_INT}, got {short(text, 40)}")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {short(text, 40)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {short(text, 40)}")
    return value


def int_at_least(low: int):
    def check(text: str) -> int:
        value = _integer(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {short(text, 40)}")
        return value

    check.__name__ = f"integer >= {low}"
    return check


def number_above(low: float, inclusive: bool = False):
    def check(text: str) -> float:
        value = _number(text)
        if value < low or (value == low and not inclusive):
            rel = ">=" if inclusive else ">"
            raise argparse.ArgumentTypeError(f"expected a number {rel} {low:g}, got {short(text, 40)}")
        return value

    check.__name__ = f"number > {low:g}"
    return check

