"""A tracking server that goes away mid-search: every MLflow call the search makes waits for
it, bounded, with one visible line, instead of failing the trials or the search.

MLflow's REST client retries on its own (urllib3: 7 retries with a backoff of 2, about four
silent minutes), then raises an ``MlflowException`` whose context is the ``requests`` error
(``ConnectionError`` for a refused connection, ``RetryError`` for 5xx answers, ``Timeout``,
``ChunkedEncodingError`` for an answer cut off when the server stopped while sending it).
For a server (``http://``, ``https://``) the search shortens those retries
(:data:`HTTP_DEFAULTS`, unless the variables are set) and :class:`PatientClient` does the
waiting: a line on stderr when the server stops answering, retries with a capped backoff,
a line when it answers again, and :class:`TrackingUnavailable` once it has been unreachable
for ``FOCUS_TUNE_TRACKING_PATIENCE_S`` seconds (default 600). A 4xx answer (a bad
parameter, a missing run) is not an outage: it raises at once.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time

from ..errors import SearchError, TrackingUnavailable
from ..interrupt import INTERRUPT, Interrupted

PATIENCE_ENV = "FOCUS_TUNE_TRACKING_PATIENCE_S"
DEFAULT_PATIENCE_S = 600.0
MAX_DELAY_S = 5.0  # the backoff between tries is capped: a server back is seen within that
# MLflow's own retries for a server, short (about 2 s: 2 retries, backoff 1) so that the waiting
# is PatientClient's, visible and bounded; a request that hangs fails after 30 s (MLflow: 120).
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def patience_s() -> float:
    """``FOCUS_TUNE_TRACKING_PATIENCE_S`` (seconds), or 600."""
    text = os.environ.get(PATIENCE_ENV, "").strip()
    if not text:
        return DEFAULT_PATIENCE_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise SearchError(f"{PATIENCE_ENV}={text[:40]!r}: expected a number of seconds >= 0")
    return value


def outage_cause(err: BaseException) -> str | None:
    """What makes ``err`` an outage (``'ConnectionError'``, ``'ReadTimeout'``, ``'HTTP 503'``),
    or None for any other error (a 4xx answer, a bug)."""
    import requests

    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, requests.HTTPError):  # the artifact uploads raise these
            status = getattr(err.response, "status_code", None)
            return f"HTTP {status}" if status is not None and status >= 500 else None
        if isinstance(err, requests.exceptions.RetryError):  # 5xx or 429 until MLflow's retries ran out
            return "RetryError: the server answered 5xx"
        # ChunkedEncodingError: the server went away in the middle of its answer (the request
        # may have been carried out, as with a read timeout: every retried call is idempotent
        # or asks ``found`` first)
        if isinstance(err, (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError,
                            ConnectionError, TimeoutError)):
            return type(err).__name__
        err = err.__cause__ or err.__context__
    return None


def _span(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


class PatientClient:
    """An ``MlflowClient`` whose every method waits out an outage of the server (see the
    module). ``failure`` is set once the patience ran out (or an interrupt came while
    waiting): from then on every call raises :class:`TrackingUnavailable` at once, so that
    the search ends without waiting again. For a local store (``enabled=False``) calls go
    straight through."""

    def __init__(self, client, uri: str, patience: float | None = None, enabled: bool = True, out=None):
        self.raw, self.uri, self.enabled = client, uri, enabled
        self.patience = patience_s() if patience is None else patience
        self.out = out
        self.down_since: float | None = None
        self.failure: TrackingUnavailable | None = None

    def __getattr__(self, name):
        if name.startswith("__") or name == "raw":  # copy and pickle ask before __init__ has run
            raise AttributeError(name)
        attr = getattr(self.raw, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def patient(*args, **kwargs):
            return self.call(attr, *args, **kwargs)

        return patient

    def call(self, fn, *args, found=None, **kwargs):
        """``fn(*args, **kwargs)``, waiting for the server. ``found``: for a call that is not
        idempotent (creating a run), what an earlier try made if it reached the server before
        its answer was lost (None if it did not); asked before each retry."""
        if not self.enabled:
            return fn(*args, **kwargs)
        if self.failure is not None:
            raise TrackingUnavailable(str(self.failure))
        delay, retry = 1.0, False
        while True:
            started = time.monotonic()
            try:
                result = found() if retry and found is not None else None
                if result is None:
                    result = fn(*args, **kwargs)
            except Exception as err:
                cause = outage_cause(err)
                if cause is None:
                    raise
                if self.down_since is None:
                    self.down_since = started
                    self._say(f"MLflow at {self.uri}: unreachable ({cause}); retrying for up to "
                              f"{_span(self.patience)} (the trials wait at their next report)")
                waited = time.monotonic() - self.down_since
                if waited >= self.patience:
                    self.failure = TrackingUnavailable(
                        f"MLflow at {self.uri}: unreachable for {waited:.0f} s ({PATIENCE_ENV}={self.patience:g}; "
                        f"last: {cause}); the search state is kept: rerun the same command with --resume once "
                        f"the server is back")
                    raise self.failure from None
                self._wait(min(delay, self.patience - waited))
                delay, retry = min(2 * delay, MAX_DELAY_S), True
                continue
            if self.down_since is not None:
                self._say(f"MLflow at {self.uri}: reachable again after {time.monotonic() - self.down_since:.0f} s")
                self.down_since = None
            return result

    def _wait(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while True:
            if INTERRUPT.event.is_set():  # Ctrl-C while waiting: stop waiting, for good
                self.failure = TrackingUnavailable(f"MLflow at {self.uri}: unreachable when the search was "
                                                   f"interrupted")
                raise Interrupted(INTERRUPT.signal_name)
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.25))

    def _say(self, line: str) -> None:
        print(line, file=self.out or sys.stderr, flush=True)
