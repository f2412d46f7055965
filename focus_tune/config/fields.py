"""The checks of a search-space file's fields: each takes the raw value and its dotted path
and returns the normalized value or raises :class:`ConfigError` naming the file and the field.

:class:`Context` carries the file name; the checkers are plain functions
``check(ctx, value, at) -> value`` that :mod:`focus_tune.config.space` maps to the dataclass fields.
"""

from __future__ import annotations

import math
import re
from dataclasses import MISSING, dataclass, fields
from typing import Any, Callable, Mapping

from ..errors import ConfigError
from ..names import SCENARIO_NAME
from ..quote import short

# Keys of earlier versions, with why they went (a clearer error than "unknown key").
REMOVED_KEYS = {
    "selection": "the search scores every trial at its last epoch, as the paper does ('best' chose a "
                 "candidate by its best epoch but tested its last one)",
}
# Keys renamed since: per section ("" the top level), each former name -> today's. A file, a
# --set or a search's saved config that uses the former name is read as if it used today's; one
# that gives both is refused.
RENAMED_KEYS = {"": {"game": "scenario"}, "train": {"absorbing": "event_sampling"}}

MAX_INT = 2**31 - 1  # a larger count, size or seed is a typo (and would name files nobody can open)
MAX_K2 = 1_000_000  # entries; k2 names trials, so it stays short


@dataclass(frozen=True)
class Context:
    """Where we are: the file name that prefixes every error."""

    file: str

    def error(self, at: str, message: str) -> ConfigError:
        """The error to raise: ``<file>: <field>: <message>``."""
        return ConfigError(f"{self.file}: {at}: {message}" if at else f"{self.file}: {message}")

    def mapping(self, value: Any, at: str) -> dict:
        """``value`` if it is a mapping, else the error at ``at``."""
        if not isinstance(value, dict):
            what = "must be" if at else "the file must be"
            raise self.error(at, f"{what} a mapping of keys to values, got {_kind(value)}")
        return value

    def current(self, d: Mapping, at: str) -> tuple[dict, dict[str, str]]:
        """``d`` with its keys' former names (:data:`RENAMED_KEYS` of the section ``at`` names:
        its last part) read as today's, and for each key of the result the key as it was written
        (for the error messages)."""
        renamed = RENAMED_KEYS.get(at.rsplit(".", 1)[-1], {})
        out, written = {}, {}
        for key, value in d.items():
            now = renamed.get(key, key)
            if now in out:
                raise self.error(_join(at, str(key)), f"{written[now]} and {key} are the same setting "
                                                      f"({key if now == key else written[now]} is its former "
                                                      f"name); give {now} only")
            out[now], written[now] = value, key
        return out, written

    def keys(self, d: Mapping, at: str, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
        """No unknown key (the error lists the allowed ones) and every required one."""
        allowed = (*required, *optional)
        for key in d:
            if key in REMOVED_KEYS and key not in allowed:
                raise self.error(_join(at, str(key)), f"no longer a setting: {REMOVED_KEYS[key]}; delete it")
            if key not in allowed:
                raise self.error(_join(at, str(key)), f"unknown key; allowed here: {', '.join(allowed)}")
        for key in required:
            if key not in d:
                raise self.error(_join(at, key), "missing (required)")

    def section(
        self, value: Any, at: str, checks: Mapping[str, Callable], required: tuple[str, ...]
    ) -> dict[str, Any]:
        """Validate a flat section (train or grid) key by key; returns normalized values, under
        today's names (a former name is read as today's, :data:`RENAMED_KEYS`)."""
        d, written = self.current(self.mapping(value, at), at)
        self.keys(d, at, required=required, optional=tuple(k for k in checks if k not in required))
        return {k: checks[k](self, v, f"{at}.{written[k]}") for k, v in d.items()}


def present(d: Mapping, key: str) -> Any:
    """An optional section: absent or left empty (``paper:`` with nothing after it) is {}."""
    return {} if key not in d or d[key] is None else d[key]


def _join(at: str, key: str) -> str:
    return f"{at}.{key}" if at else key


def _kind(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {short(value)}"


def allows(text: str) -> Callable[[Callable], Callable]:
    """Tag a check with what it allows, in words (the reference docs/CONFIG.md reads it)."""

    def tag(check: Callable) -> Callable:
        check.allowed = text
        return check

    return tag


def required_fields(cls) -> tuple[str, ...]:
    """The fields of a dataclass without a default."""
    return tuple(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)


def _int(ctx: Context, v: Any, at: str) -> int:
    # bool is an int subclass in Python; `epochs: yes` is a mistake, not 1.
    if isinstance(v, bool) or not isinstance(v, int):
        raise ctx.error(at, f"expected an integer, got {_kind(v)}")
    if abs(v) > MAX_INT:
        raise ctx.error(at, f"{short(v)} is too large; expected an integer of at most {MAX_INT}")
    return v


@allows("integer >= 1")
def positive_int(ctx: Context, v: Any, at: str) -> int:
    """An integer >= 1 (not a bool, at most MAX_INT)."""
    v = _int(ctx, v, at)
    if v < 1:
        raise ctx.error(at, f"{v} must be >= 1")
    return v


@allows("integer >= 0")
def non_negative_int(ctx: Context, v: Any, at: str) -> int:
    """An integer >= 0 (not a bool, at most MAX_INT)."""
    v = _int(ctx, v, at)
    if v < 0:
        raise ctx.error(at, f"{v} must be >= 0")
    return v


@allows("integer >= 1, or null")
def optional_positive_int(ctx: Context, v: Any, at: str) -> int | None:
    """None (the whole split) or a :func:`positive_int`."""
    return None if v is None else positive_int(ctx, v, at)


def _number(ctx: Context, v: Any, at: str) -> float:
    """An int or float (not a bool) as a float; NaN passes, the caller's rule decides."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        hint = ""
        if isinstance(v, str):
            try:
                float(v)
                hint = " (quoted? write the number without quotes)"
            except ValueError:
                pass
        raise ctx.error(at, f"expected a number, got {_kind(v)}{hint}")
    return float(v)


def _float(ctx: Context, v: Any, at: str) -> float:
    v = _number(ctx, v, at)
    if math.isnan(v):
        raise ctx.error(at, "is NaN; expected a number")
    return v


@allows("number > 0")
def positive_float(ctx: Context, v: Any, at: str) -> float:
    """A finite number > 0."""
    v = _float(ctx, v, at)
    if not (0 < v < math.inf):
        raise ctx.error(at, f"{v} must be a finite number > 0")
    return v


@allows("number >= 0")
def non_negative_float(ctx: Context, v: Any, at: str) -> float:
    """A finite number >= 0."""
    v = _float(ctx, v, at)
    if not (0 <= v < math.inf):
        raise ctx.error(at, f"{v} must be a finite number >= 0")
    return v


@allows("number in (0, 1)")
def alpha(ctx: Context, v: Any, at: str) -> float:
    """The level of an interval: a number in (0, 1)."""
    v = _float(ctx, v, at)
    if not (0 < v < 1):
        raise ctx.error(at, f"{v} must be in (0, 1), e.g. 0.9 for the 90% interval")
    return v


def choice(options: tuple[str, ...]) -> Callable[[Context, Any, str], str]:
    """A check that the value is one of ``options`` (the error lists them)."""

    def check(ctx: Context, v: Any, at: str) -> str:
        if v not in options or not isinstance(v, str):
            raise ctx.error(at, f"{short(v)} is not one of {', '.join(options)}")
        return v

    check.allowed = ", ".join(options)
    return check


def optional_choice(options: tuple[str, ...]) -> Callable[[Context, Any, str], str | None]:
    """None (the default it stands for) or one of ``options``."""
    check = choice(options)

    @allows(f"{check.allowed}, or null")
    def optional(ctx: Context, v: Any, at: str) -> str | None:
        return None if v is None else check(ctx, v, at)

    return optional


@allows("non-empty string")
def string(ctx: Context, v: Any, at: str) -> str:
    """A non-empty string."""
    if not isinstance(v, str) or not v:
        raise ctx.error(at, f"expected a non-empty string, got {_kind(v)}")
    return v


def check_lambda(value: float, what: str = "lambda") -> float:
    """The validity rule of one regularization weight: a finite number >= 0.

    Checked once, where a lambda enters: the config loader (which names the file and field)
    and :class:`LambdaSchedule`; never per training batch. Returns the value as a float
    (-0.0 as 0.0, so equal schedules print and name trials alike); raises ValueError
    saying what is wrong, e.g. ``-0.5 is negative; lambdas must be >= 0`` for ``what="lambdas"``.
    """
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"is NaN; {what} must be a number >= 0")
    if v < 0:
        raise ValueError(f"{v!r} is negative; {what} must be >= 0")
    if math.isinf(v):
        raise ValueError(f"{v!r} is not finite; {what} must be finite")
    return v + 0.0


@allows("1 to 64 letters, digits, '_', '-' or '.' (it names folders)")
def scenario_name(ctx: Context, v: Any, at: str) -> str:
    """A scenario's name (:data:`~focus_tune.names.SCENARIO_NAME`): it names folders, experiments
    and trial paths."""
    v = string(ctx, v, at)
    if not re.fullmatch(SCENARIO_NAME, v):
        raise ctx.error(at, f"{short(v)} must be 1 to 64 letters, digits, '_', '-' or '.' (it names folders)")
    return v


def grid_list(item: Callable[[Context, Any, str], Any], what: str):
    """A non-empty list without repeats, each element checked by ``item``."""

    def check(ctx: Context, v: Any, at: str) -> tuple:
        if not isinstance(v, list):
            raise ctx.error(at, f"expected a list of {what}, got {_kind(v)}")
        if not v:
            raise ctx.error(at, f"is empty; the grid needs at least one {what[:-1]}")
        out = tuple(item(ctx, x, f"{at}[{i}]") for i, x in enumerate(v))
        for i, x in enumerate(out):
            if x in out[:i]:
                # A repeated value would be the same candidate (and trial id) twice.
                raise ctx.error(f"{at}[{i}]", f"{x!r} repeats {at}[{out.index(x)}]; grid values must be distinct")
        return out

    check.allowed = f"non-empty list of distinct values, each {item.allowed}"
    return check


def lambda_weight(name: str) -> Callable[[Context, Any, str], float]:
    """A check of one regularization weight of the grid ``name``: a number (the type, here),
    valid by the one rule of lambdas, :func:`focus_tune.config.fields.check_lambda`."""

    def check(ctx: Context, v: Any, at: str) -> float:
        v = _number(ctx, v, at)
        try:
            return check_lambda(v, name)
        except ValueError as e:
            raise ctx.error(at, str(e)) from None

    check.allowed = "number >= 0"
    return check


@allows(f"integer in 1..{MAX_K2}")
def k2_entry(ctx: Context, v: Any, at: str) -> int:
    """A k2 value: the last regularized entry, 1..MAX_K2."""
    v = _int(ctx, v, at)
    if not 1 <= v <= MAX_K2:
        raise ctx.error(at, f"{v} is out of range; k2 (the last regularized entry) must be in 1..{MAX_K2}")
    return v
