"""Progress of a search: a live bar on a terminal, plain lines everywhere else.

Both modes print the same lines (a trial handed a slot, its evaluations, a finished or
failed trial), so logs and CI output read as before. On a terminal a one-line bar stays below
them and is redrawn in place (``\\r``): trials done / total, the stages running, the best
validation ECE so far, the elapsed time and the ETA. The mode is the stream's
``isatty()``; ``FOCUS_TUNE_PROGRESS=bar|lines`` overrides it, and ``TERM=dumb`` means lines.

The ETA uses measured trial times, not the rate at which trials happened to finish
(which jumps when several trials end together):

* T, the seconds of one training: the mean ``time_total_s`` of the trainings finished in
  this session; before the first one finishes, the running trials' seconds per epoch
  times their epochs. Finals that only evaluate a search checkpoint count as E seconds,
  their measured mean once one finished, else T / 10.
* P, the parallelism: trial-seconds of work done in this session (finished trials plus
  the running ones so far) over the wall time since it began. It includes what the
  cluster really gave: trials waiting for a core, slots idle while a stage waits.
* ETA = (remaining trainings x T + remaining evaluations x E - the work the running
  trials have done) / P.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, TextIO

ENV_MODE = "FOCUS_TUNE_PROGRESS"
MODES = ("bar", "lines")
BAR_CELLS = 24  # the bar's width in characters, less on a narrow terminal
REDRAW_S = 1.0  # tick() redraws the bar at most this often
EVAL_FRACTION = 0.1  # an evaluation's assumed cost relative to a training, until one is measured
CLEAR = "\r\x1b[2K"  # carriage return + erase the line


def fmt_s(seconds: float) -> str:
    """``12m05s`` (minutes may exceed 59: a search is read in minutes)."""
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


def choose_mode(stream: TextIO, environ: dict | None = None) -> str:
    """"bar" on a terminal, "lines" otherwise; ``FOCUS_TUNE_PROGRESS`` forces either."""
    environ = os.environ if environ is None else environ
    forced = environ.get(ENV_MODE, "").strip().lower()
    if forced in MODES:
        return forced
    if environ.get("TERM") == "dumb":
        return "lines"
    try:
        return "bar" if stream.isatty() else "lines"
    except (AttributeError, ValueError):  # a stream without isatty, or a closed one
        return "lines"


@dataclass
class _Running:
    started: float  # clock time when the trial started (or first reported)
    epochs: int = 0  # epochs per training, once known
    first_epoch: int | None = None  # the first epoch reported in this session (a resumed trial starts later)
    epoch: int = 0
    seconds: float = 0.0  # Tune's time_total_s at the last report


@dataclass
class Progress:
    """The search's progress: counts, best scores, ETA; prints lines and, on a TTY, a bar.

    ``trainings`` and ``evaluations`` are the search's totals (finals that reuse a search
    checkpoint only evaluate it), ``done_trainings`` and ``done_evaluations`` what an
    earlier session of a resumed search finished. ``stage_of`` maps a trial id to the
    label shown for it; ``evaluation_ids`` are the trials that only evaluate.
    """

    trainings: int
    evaluations: int = 0
    done_trainings: int = 0
    done_evaluations: int = 0
    stream: TextIO | None = None
    mode: str | None = None
    clock: Callable[[], float] = time.monotonic
    width: int | None = None  # columns of the bar; default: the terminal's
    score_name: str = "val ECE"  # what a trial's selection score is (TrainConfig.select_by)
    stage_of: dict[str, str] = field(default_factory=dict)
    evaluation_ids: set[str] = field(default_factory=set)

    def __post_init__(self):
        self.stream = self.stream or sys.stdout
        self.mode = self.mode or choose_mode(self.stream)
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        self.t0 = self.clock()
        self.best: dict[str, tuple[float, str]] = {}
        self.last_stage: str | None = None
        self.current: str = "starting"
        self.running: dict[str, _Running] = {}
        self.queued: dict[str, str] = {}  # trials handed out and not finished -> their stage
        self.train_seconds: list[float] = []
        self.eval_seconds: list[float] = []
        self.failed_count = 0
        self._bar_shown = False
        self._last_draw = -float("inf")
        self._unicode = "utf" in (getattr(self.stream, "encoding", None) or "").lower()

    # -- counts -------------------------------------------------------------------------------
    @property
    def total(self) -> int:
        return self.trainings + self.evaluations

    @property
    def done(self) -> int:
        return self.done_trainings + self.done_evaluations

    @property
    def live(self) -> bool:
        return self.mode == "bar"

    # -- events from the driver -----------------------------------------------------------------
    def handed_out(self, tid: str, stage: str, evaluation: bool = False) -> None:
        """The searcher gave trial ``tid`` (of ``stage``; ``evaluation``: it only evaluates a
        checkpoint) a slot: a line, and the bar's stages."""
        self.stage_of[tid] = stage
        if evaluation:
            self.evaluation_ids.add(tid)
        self.queued[tid] = stage
        self._update_current()
        self.line(f"  [{stage}] {tid}: {'evaluating' if tid in self.evaluation_ids else 'training'}")

    def _update_current(self) -> None:
        self.current = ", ".join(dict.fromkeys(self.queued.values())) or "waiting"

    def started(self, tid: str) -> None:
        self.running.setdefault(tid, _Running(started=self.clock()))
        self.tick(force=True)

    def epoch(self, tid: str, epoch: int, epochs: int, seconds: float | None) -> None:
        """Every result of a trial (one per epoch): what the ETA learns the epoch time from."""
        run = self.running.setdefault(tid, _Running(started=self.clock()))
        run.epochs, run.epoch = int(epochs), int(epoch)
        if run.first_epoch is None:
            run.first_epoch = int(epoch)
        if seconds is not None:
            run.seconds = float(seconds)
        self.tick()

    def evaluated(self, tid: str, epoch: int, epochs: int, score: float) -> None:
        if epoch < epochs:  # the last evaluation is printed when the trial completes
            self.line(f"  [{self.stage_of.get(tid, '?')}] {tid}: epoch {epoch}/{epochs}, {self.score_name} {score:.4f}")

    def trial_done(self, tid: str, score: float | None, seconds: float | None = None,
                   stopped: str | None = None) -> None:
        """A trial ended: its score, or failed (None), or ``stopped`` by racing (why, in words)."""
        run = self.running.pop(tid, None)
        self.queued.pop(tid, None)
        self._update_current()
        if seconds is None or seconds <= 0:  # not measured by Tune: the wall time seen here
            seconds = self.clock() - run.started if run else None
        is_eval = tid in self.evaluation_ids
        if is_eval:
            self.done_evaluations += 1
        else:
            self.done_trainings += 1
        if seconds is not None and score is not None:
            (self.eval_seconds if is_eval else self.train_seconds).append(float(seconds))
        stage = self.stage_of.get(tid, "?")
        if not stage.startswith("final"):  # the bar's "best": a search stage, not a final's seeds
            self.last_stage = stage
        if score is not None and (stage not in self.best or score < self.best[stage][0]):
            self.best[stage] = (score, tid)
        best = self.best.get(stage)
        best_s = f"best {stage} {self.score_name} {best[0]:.4f} ({best[1]})" if best else "no result yet"
        score_s = stopped if stopped else "failed" if score is None else f"{self.score_name} {score:.4f}"
        self.line(f"  [{stage}] {tid}: {score_s} | {self.done}/{self.total} trials | {best_s} | "
                  f"ETA {self._eta_text()}")

    def failed(self, tid: str, why: str) -> None:
        self.failed_count += 1
        self.line(f"  [{self.stage_of.get(tid, '?')}] {tid} FAILED: {why}")

    # -- the ETA -------------------------------------------------------------------------------
    def training_seconds(self) -> float | None:
        """T: the measured seconds of one training, or None before anything was measured."""
        if self.train_seconds:
            return sum(self.train_seconds) / len(self.train_seconds)
        per_training = [r.seconds / (r.epoch - r.first_epoch + 1) * r.epochs for r in self.running.values()
                        if r.epochs and r.first_epoch is not None and r.seconds > 0]
        return sum(per_training) / len(per_training) if per_training else None

    def eta(self) -> float | None:
        """Seconds left, or None while no trial time has been measured."""
        T = self.training_seconds()
        if T is None:
            return None
        E = sum(self.eval_seconds) / len(self.eval_seconds) if self.eval_seconds else EVAL_FRACTION * T
        now = self.clock()
        elapsed = now - self.t0
        running = [(now - r.started, tid in self.evaluation_ids) for tid, r in self.running.items()]
        busy = sum(self.train_seconds) + sum(self.eval_seconds) + sum(s for s, _ in running)
        if elapsed <= 0 or busy <= 0:
            return None
        parallel = busy / elapsed
        left_train = max(0, self.trainings - self.done_trainings)
        left_eval = max(0, self.evaluations - self.done_evaluations)
        in_flight = sum(min(s, E if ev else T) for s, ev in running)
        return max(0.0, left_train * T + left_eval * E - in_flight) / parallel

    def _eta_text(self) -> str:
        eta = self.eta()
        return "--" if eta is None else fmt_s(eta)

    # -- drawing -------------------------------------------------------------------------------
    def line(self, text: str) -> None:
        """Print a line; on a TTY above the bar, which is redrawn below it."""
        if self.live and self._bar_shown:
            self.stream.write(CLEAR)
        self.stream.write(text + "\n")
        if self.live:
            self._draw()
        self.stream.flush()

    def tick(self, force: bool = False) -> None:
        """Redraw the bar (at most once per REDRAW_S unless forced); nothing without a TTY."""
        if self.live and (force or self.clock() - self._last_draw >= REDRAW_S):
            self._draw()
            self.stream.flush()

    def bar_text(self) -> str:
        """The bar's one line, fitted to the width: the bar, trials done / total, the stages
        running, failures, ETA and elapsed time, then the best score of the latest search
        stage (cut first when the terminal is narrow)."""
        width = self.width or shutil.get_terminal_size((100, 24)).columns
        width = max(20, width - 1)  # never the last column: some terminals wrap there
        parts = [f"{self.done}/{self.total} trials", self.current]
        if self.failed_count:
            parts.append(f"{self.failed_count} failed")
        eta = f"ETA {self._eta_text()}"
        best = self.best.get(self.last_stage) if self.last_stage else None
        best_s = [f"best {self.last_stage} {best[0]:.4f} ({best[1]})"] if best else []
        cells = min(BAR_CELLS, max(5, width // 5))
        filled = min(cells, round(cells * self.done / self.total)) if self.total else cells
        full, empty = ("\u2588", "\u2591") if self._unicode else ("#", "-")
        bar = f"{full * filled}{empty * (cells - filled)} "
        elapsed = f"{eta} ({fmt_s(self.clock() - self.t0)} elapsed)"
        for tail in ([elapsed, *best_s], [elapsed], [eta]):  # the most that fits, the ETA last to go
            line = bar + " | ".join(parts + tail)
            if len(line) <= width:
                return line
        return line[: width - 3] + "..."

    def _draw(self) -> None:
        self.stream.write(CLEAR + self.bar_text())
        self._bar_shown = True
        self._last_draw = self.clock()

    def close(self) -> None:
        """Erase the bar (the lines above it stay): call before printing anything else."""
        if self.live and self._bar_shown:
            self.stream.write(CLEAR)
            self.stream.flush()
            self._bar_shown = False
