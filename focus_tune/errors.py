"""The project's errors, in one module: :class:`FocusTuneError` and what derives from it.

Every error a user can act on (a bad search space, a broken dataset, a search that cannot
go on, a model that cannot be found) is a :class:`FocusTuneError`, so ``except
FocusTuneError`` catches all of them and nothing else. Each also keeps the builtin base it
had before this module existed (a :class:`ConfigError` is a ``ValueError``, a
:class:`ModelNotFound` a ``LookupError``), so code that catches the builtin keeps working.

Plain Python, importing nothing of the project: every module may import it. The modules
that raise an error build its message; a class here only names the failure.

Two exceptions of the project live elsewhere, on purpose: ``interrupt.Interrupted`` (Ctrl-C,
not a failure: ``except FocusTuneError`` must not swallow it) and
``config.strict_yaml.NotDecimal`` (a PyYAML ``ConstructorError``, which keeps the YAML
position; it never leaves the YAML reader, which turns it into a :class:`ConfigError`).
"""

from __future__ import annotations

from typing import Any, Iterable


class FocusTuneError(Exception):
    """The base of the project's errors: the message says what was wrong, where, and what to do."""


class ConfigError(FocusTuneError, ValueError):
    """A search-space file (or config dict, or ``--set``) that cannot be used; the message
    names the file and the field (``config.fields.Context``)."""


class DataError(FocusTuneError, ValueError):
    """A dataset folder or source file is missing, malformed or corrupted."""


class ImageError(FocusTuneError, ValueError):
    """An image that cannot be decoded: the message says why, on one line (``data.images``)."""


class ImageTooLarge(ImageError):
    """An image whose header claims more than ``data.images.MAX_PIXELS`` pixels: not decoded."""


class RatesError(FocusTuneError, ValueError):
    """A GPU rates file that was asked for and cannot be read: the message names it and what
    is wrong (``procedure.rates``)."""


class SearchError(FocusTuneError, RuntimeError):
    """A search that cannot start or continue; the message says what to do."""


class DiskFull(SearchError):
    """The storage of a search is full (ENOSPC or EDQUOT): the search stopped, its state holds
    what was saved before, and it continues with --resume once there is space again
    (``procedure.state.disk_full_at`` and ``disk_full_of`` build it)."""


class LockBusy(SearchError):
    """Another driver holds the run folder's lock (``search.lock``); the message names it and
    what to do. ``path``: the lock file; ``holder``: its ``search.lock.Holder`` (None when the
    lock is unreadable); ``age_s``: seconds since its heartbeat."""

    def __init__(self, message: str, path: Any = None, holder: Any = None, age_s: float | None = None):
        super().__init__(message)
        self.path, self.holder, self.age_s = path, holder, age_s


class TrackingUnavailable(SearchError):
    """The tracking server stayed unreachable for longer than the patience (``tracking.outage``)."""


class StageFailed(FocusTuneError, RuntimeError):
    """Every trial of a stage failed, so the stage has no winner and the search cannot go on."""

    def __init__(self, stage: str, trial_ids: Iterable[str]):
        self.stage = stage
        self.trial_ids = tuple(trial_ids)
        super().__init__(
            f"every trial of stage {stage!r} failed ({', '.join(self.trial_ids)}); "
            "see their logs, fix the cause and resume"
        )


class NonFiniteLoss(FocusTuneError, FloatingPointError):
    """The training loss became NaN or infinite: the trial cannot continue (``sim.train``)."""


class PredictError(FocusTuneError, RuntimeError):
    """Bad input to ``predict`` or a model that cannot be used; the message says what to do."""


class ModelNotFound(FocusTuneError, LookupError):
    """A model URI that names nothing in the MLflow store; the message says what the store has."""
