"""Values quoted in messages, bounded: ``short(value)`` is ``repr(value)`` cut to about 80
characters, so that an error names what it was given without printing megabytes of it."""
from __future__ import annotations

import reprlib

_REPR = reprlib.Repr()
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlong = 40
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6


def short(value, limit: int = 80) -> str:
    """``repr(value)`` cut to about ``limit`` characters, without building the whole repr first
    (a YAML alias bomb expands to gigabytes if printed in full)."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
