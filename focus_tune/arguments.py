"""Argument parsing shared by the command lines: flags declared as dataclass fields, one error
line, exit code 2, bounded values.

A command's options are a frozen dataclass whose every field is a flag (:func:`flag`: its help,
its check, its choices); :func:`add_flags` writes the argparse arguments from the fields, as
``scripts/config_doc.py`` writes docs/CONFIG.md from the search space's, and :func:`check_value`
checks a value given in Python (``run_search(seed=...)``) as the flag checks its text. Every bad
flag is reported as ``error: argument --seed: expected an integer >= 0, got '-1'`` on one line
(argparse's usage block is left out: ``--help`` prints it), with at most a short prefix of the
offending value quoted.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import MISSING, Field, dataclass, field, fields
from importlib import metadata
from typing import Any, Callable, Iterable, Mapping

from .quote import short

MAX_INT = 2**31 - 1  # larger values are typos (a 300-digit seed, k2, length...)
FLAG = "flag"  # the metadata key of a field's Flag


@dataclass(frozen=True)
class Flag:
    """How a dataclass field is given on the command line (:func:`flag`)."""

    help: str
    name: str | None = None  # the flag; None: --<field name with '-' for '_'>
    type: Callable[[str], Any] | None = None  # the text's check and value; raises argparse.ArgumentTypeError
    choices: tuple | None = None
    metavar: str | None = None
    repeat: bool = False  # given any number of times, each one item of a tuple, in order


def flag(help: str, default: Any = None, **how: Any) -> Any:
    """A dataclass field that is a command-line flag: ``help``, its ``default`` (``False``: a
    switch, ``--flag`` sets it), and how its text is read (:class:`Flag`'s ``name``, ``type``,
    ``choices``, ``metavar``, ``repeat``)."""
    return field(default=default, metadata={FLAG: Flag(help, **how)})


def flag_name(f: Field) -> str:
    """The flag of a field of :func:`flag`: ``--game``, ``--data-root``."""
    return f.metadata[FLAG].name or "--" + f.name.replace("_", "-")


def flag_fields(cls) -> dict[str, Field]:
    """The fields of the options dataclass ``cls``, by name; a TypeError names one that is no flag."""
    out = {f.name: f for f in fields(cls)}
    for name, f in out.items():
        if FLAG not in f.metadata or f.default is MISSING or f.default is True:
            raise TypeError(f"{cls.__name__}.{name}: every field of a command's options is a flag with a default, "
                            "a switch's False (focus_tune.arguments.flag)")
    return out


def add_flags(parser: argparse.ArgumentParser, cls, names: Iterable[str] | None = None,
              helps: Mapping[str, str] | None = None) -> None:
    """Add a flag to ``parser`` for each field of the options dataclass ``cls`` (those of
    ``names``, in that order), its value stored under the field's name; ``helps`` replaces a
    field's help text for this command (where the flag means something narrower in it)."""
    by_name = flag_fields(cls)
    for name in by_name if names is None else names:
        f = by_name[name]
        spec: Flag = f.metadata[FLAG]
        how: dict[str, Any] = {"dest": f.name, "help": (helps or {}).get(f.name, spec.help)}
        if isinstance(f.default, bool):
            how["action"] = "store_true"
        else:
            how.update(type=spec.type, choices=spec.choices, metavar=spec.metavar)
            how.update({"action": "append", "default": list(f.default)} if spec.repeat else {"default": f.default})
        parser.add_argument(flag_name(f), **how)


def parsed(cls, namespace: argparse.Namespace) -> dict[str, Any]:
    """The values of the fields of ``cls`` that ``namespace`` holds (a repeated flag's as a tuple)."""
    values = vars(namespace)
    return {name: tuple(values[name]) if f.metadata[FLAG].repeat else values[name]
            for name, f in flag_fields(cls).items() if name in values}


def check_value(f: Field, value: Any) -> Any:
    """``value`` given in Python for the field ``f``, checked and converted as its flag's text
    would be (its type on ``str(value)``, its choices; a switch takes only True or False); an
    argparse.ArgumentTypeError (or the type's ValueError) says what is wrong. None is the
    flag not given. Not for a repeated flag: its items' forms are the command's to read."""
    spec: Flag = f.metadata[FLAG]
    if spec.repeat:
        raise TypeError(f"{f.name}: a repeated flag's values are read by its command, not check_value")
    if isinstance(f.default, bool):
        if not isinstance(value, bool):
            raise argparse.ArgumentTypeError("expected True or False")
        return value
    if value is None:
        return None
    if spec.type is not None:
        value = spec.type(str(value))
    if spec.choices is not None and value not in spec.choices:
        raise argparse.ArgumentTypeError(f"choose one of {', '.join(map(str, spec.choices))}")
    return value


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

