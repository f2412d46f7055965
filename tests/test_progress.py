"""The search's progress: a live bar on a terminal, plain lines elsewhere, an ETA from
measured trial times, and the MLflow UI command at the start of a real search."""

from __future__ import annotations

import io
import re

import pytest

from focus_tune.search.progress import CLEAR, Progress, choose_mode, fmt_s


class Stream(io.StringIO):
    """A text stream that says whether it is a terminal."""

    def __init__(self, tty: bool, encoding: str = "utf-8"):
        super().__init__()
        self.tty = tty
        self._encoding = encoding

    def isatty(self) -> bool:
        return self.tty

    @property
    def encoding(self):
        return self._encoding


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _progress(tty: bool, **kw) -> tuple[Progress, Stream, Clock]:
    stream, clock = Stream(tty), Clock()
    progress = Progress(4, 1, stream=stream, clock=clock, width=130, **kw)
    progress.stage_of.update({"stage1-a": "stage1", "stage1-b": "stage1", "final-x": "final none"})
    progress.evaluation_ids.add("final-x")
    return progress, stream, clock


def _run_two_trials(progress: Progress, clock: Clock) -> None:
    progress.handed_out("stage1-a", "stage1")
    progress.handed_out("stage1-b", "stage1")
    progress.started("stage1-a")
    progress.started("stage1-b")
    for epoch in (1, 2):
        clock.t += 10
        progress.epoch("stage1-a", epoch, 4, 10.0 * epoch)
        progress.epoch("stage1-b", epoch, 4, 10.0 * epoch)
    progress.evaluated("stage1-a", 2, 4, 0.25)
    clock.t += 20
    progress.trial_done("stage1-a", 0.2, 40.0)
    progress.failed("stage1-b", "training loss became nan")  # the driver's order for a failed trial
    progress.trial_done("stage1-b", None, 40.0)


def test_not_a_terminal_prints_plain_lines_only():
    progress, stream, clock = _progress(tty=False)
    assert progress.mode == "lines"
    _run_two_trials(progress, clock)
    progress.tick(force=True)
    progress.close()
    out = stream.getvalue()
    assert "\r" not in out and "\x1b" not in out, "no bar, no escape codes in a log"
    lines = out.splitlines()
    assert lines[:2] == ["  [stage1] stage1-a: training", "  [stage1] stage1-b: training"]
    assert lines[2] == "  [stage1] stage1-a: epoch 2/4, val ECE 0.2500"
    assert lines[3].startswith("  [stage1] stage1-a: val ECE 0.2000 | 1/5 trials | "
                               "best stage1 val ECE 0.2000 (stage1-a) | ETA ")
    assert lines[4] == "  [stage1] stage1-b FAILED: training loss became nan"
    assert lines[5].startswith("  [stage1] stage1-b: failed | 2/5 trials | best stage1 val ECE 0.2000 (stage1-a)")
    assert len(lines) == 6


def test_terminal_keeps_a_bar_below_the_same_lines():
    progress, stream, clock = _progress(tty=True)
    assert progress.mode == "bar"
    _run_two_trials(progress, clock)
    out = stream.getvalue()
    # Every line is printed after erasing the bar, and the bar is redrawn below it.
    printed = [chunk.split("\n")[0] for chunk in out.split(CLEAR) if "\n" in chunk]
    assert "  [stage1] stage1-a: training" in printed
    assert any(p.startswith("  [stage1] stage1-a: val ECE 0.2000 | 1/5 trials") for p in printed)
    bar = out.rsplit(CLEAR, 1)[1]
    assert "\n" not in bar
    assert bar.startswith("\u2588") or bar.startswith("\u2591")
    cells, text = bar.split(" ", 1)
    assert cells == "\u2588" * 10 + "\u2591" * 14, "2 of 5 trials: 10 of 24 cells"
    assert re.fullmatch(r"2/5 trials \| waiting \| 1 failed \| ETA \dm\d\ds \(0m40s elapsed\) \| "
                        r"best stage1 0\.2000 \(stage1-a\)", text), text
    progress.close()
    assert stream.getvalue().endswith(CLEAR), "close() erases the bar so the report starts on a clean line"


def test_bar_redraws_at_most_once_a_second_and_fits_narrow_terminals():
    progress, stream, clock = _progress(tty=True)
    progress.width = 40
    progress.tick(force=True)
    size = len(stream.getvalue())
    progress.tick()
    assert len(stream.getvalue()) == size, "no redraw within a second"
    clock.t += 1.5
    progress.tick()
    assert len(stream.getvalue()) > size
    bars = stream.getvalue().split(CLEAR)[1:]
    assert all(len(bar) <= 39 for bar in bars)
    assert bars[-1] == "\u2591" * 7 + " 0/5 trials | starting | ETA --", "the ETA is the last to go"


def test_ascii_bar_when_the_terminal_is_not_utf8():
    progress, stream, clock = _progress(tty=True)
    progress._unicode = False
    progress.done_trainings = 2
    assert "#" in progress.bar_text() and "\u2588" not in progress.bar_text()


def test_mode_from_environment_and_term():
    assert choose_mode(Stream(True), {}) == "bar"
    assert choose_mode(Stream(False), {}) == "lines"
    assert choose_mode(Stream(True), {"TERM": "dumb"}) == "lines"
    assert choose_mode(Stream(False), {"FOCUS_TUNE_PROGRESS": "bar"}) == "bar"
    assert choose_mode(Stream(True), {"FOCUS_TUNE_PROGRESS": "lines"}) == "lines"
    assert choose_mode(object(), {}) == "lines"  # a stream without isatty


def test_eta_uses_measured_trial_times_and_parallelism():
    progress, _, clock = _progress(tty=False)
    assert progress.eta() is None, "nothing measured yet"
    progress.started("stage1-a")
    progress.started("stage1-b")
    clock.t += 10
    progress.epoch("stage1-a", 1, 4, 10.0)  # 10 s per epoch x 4 epochs: T = 40 s before any trial ends
    progress.epoch("stage1-b", 1, 4, 10.0)
    assert progress.training_seconds() == pytest.approx(40.0)
    # 2 trials ran 10 s each in 10 s of wall: parallelism 2. Left: 4 trainings x 40 s + 1
    # evaluation x 4 s (T / 10 until one is measured) - 20 s already done = 144 s of work.
    assert progress.eta() == pytest.approx(144 / 2)
    clock.t += 30
    progress.trial_done("stage1-a", 0.2, 40.0)
    progress.trial_done("stage1-b", 0.3, 40.0)
    # T = 40 measured; 80 trial-seconds in 40 s: parallelism 2; left 2 x 40 + 4 = 84 s of work.
    assert progress.eta() == pytest.approx(84 / 2)
    progress.started("final-x")
    clock.t += 2
    progress.trial_done("final-x", 0.2, 2.0)
    # The evaluation's own time replaces the guess: 82 trial-seconds in 42 s; left 2 x 40 s.
    assert progress.eta() == pytest.approx(80 / (82 / 42))
    assert fmt_s(progress.eta()) == "0m40s"


def test_resumed_search_counts_what_was_done_before():
    stream = Stream(False)
    progress = Progress(10, 3, done_trainings=6, done_evaluations=1, stream=stream)
    assert (progress.done, progress.total) == (7, 13)
    progress.stage_of["t"] = "joint"
    progress.trial_done("t", 0.1, 5.0)
    assert "8/13 trials" in stream.getvalue()


@pytest.mark.slow
def test_search_prints_the_mlflow_ui_command_first_and_lines_in_ci(smoke_search):
    out = smoke_search.out  # a pipe, not a terminal: lines, no bar
    lines = out.splitlines()
    ui = next(i for i, line in enumerate(lines) if line.startswith("MLflow: experiment focus-tune/facemed, run "))
    first_trial = next(i for i, line in enumerate(lines) if line.endswith(": training"))
    assert ui < first_trial, "the MLflow UI command comes before any trial runs"
    assert f"mlflow ui --backend-store-uri sqlite:///{smoke_search.work / 'mlflow.db'} --workers 1" in lines[ui]
    assert "\r" not in out and CLEAR not in out and "\u2588" not in out, "no bar in a log"
    counts = [re.search(r"\| (\d+)/(\d+) trials \|", line) for line in lines]
    counts = [(int(m[1]), int(m[2])) for m in counts if m]
    assert counts and counts[-1][0] == counts[-1][1], "the last finished trial completes the count"
    assert "use it: python -m focus_tune.predict --model runs:/" in out
    # the last line: the model recommended by the validation evidence, and why (focus_tune.procedure.recommend)
    assert re.match(r"use it: python -m focus_tune.predict --model runs:/\S+/model-(none|constant|time-dependent) .*"
                    r"\((none|constant|time-dependent): .*validation", lines[-1]), lines[-1]
