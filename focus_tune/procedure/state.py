"""The search state: everything a search must remember to resume, in one JSON file per run
folder (``search_state.json``), and the one place that reads and writes it.

The state file is written atomically after every finished trial (and every checkpoint),
so a driver killed at any moment (kill -9 included) resumes with ``--resume`` without
retraining a finished trial. Plain Python and numpy: the driver, the dry run's cost model
and ``focus_tune.predict`` (which a run folder's state tells where its data is) read it here.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..durable import disk_full, write_atomic
from ..errors import DiskFull, SearchError
from ..quote import short

STATE_FILE = "search_state.json"
# Keys of a state's fingerprint present only where the search was given --set / --experiment:
# a search made without them keeps the fingerprint it had before these flags existed.
OVERRIDES_KEY, EXPERIMENT_KEY = "overrides", "experiment"


def disk_full_at(folder: Path, detail: str) -> DiskFull:
    """The error that ends a search whose storage is full: ``folder`` (the run folder) is full;
    ``detail``: what failed, in words."""
    what = "disk quota exceeded" if "quota" in detail.lower() else "no space left on device"
    return DiskFull(f"{folder}: {what} ({short(detail, 160)[1:-1]}); the search stopped and its state holds every "
                    f"trial finished before; free space there, then rerun the same command with --resume")


def disk_full_of(err: BaseException, folder: Path) -> DiskFull:
    """:func:`disk_full_at` from the error that met the full disk (an OSError, or an error that wraps one)."""
    full = disk_full(err) or err
    where = getattr(full, "filename", None)
    return disk_full_at(folder, f"writing {where}: {full.strerror}" if where and getattr(full, "strerror", None)
                        else f"{type(full).__name__}: {full}")


@dataclass
class SearchState:
    """Everything the driver must remember to resume: saved after every finished trial."""

    path: Path
    results: dict[str, float | None] = field(default_factory=dict)  # trial id -> selection score
    # trial id -> per-item influences on its score (job.encode_influence), for decisions' noise
    influence: dict[str, str] = field(default_factory=dict)
    checkpoints: dict[str, str] = field(default_factory=dict)  # trial id -> latest checkpoint path
    finals: dict[str, dict] = field(default_factory=dict)  # trial id -> test result
    trial_seconds: dict[str, float] = field(default_factory=dict)  # Tune's time_total_s of each trial
    fit_seconds: list[float] = field(default_factory=list)  # wall time of each driver start's Tuner.fit
    slots: int = 0  # trials that ran at once: the largest number seen running
    attempts: int = 0  # driver starts; names the Tune experiments of a resumed search apart
    # one record per driver start: its Ray cluster (session name), Ray job, host and pid; a
    # resumed search on the same cluster waits for the trials of an earlier, dead driver to stop
    drivers: list[dict] = field(default_factory=list)
    parent_run_id: str | None = None
    fingerprint: dict = field(default_factory=dict)
    # racing (focus_tune.procedure.racing): trial id -> its validation at the race epoch ({"epoch",
    # "score", "influence"}), and the trainings the race stopped -> why (racing.Lost's fields)
    race: dict[str, dict] = field(default_factory=dict)
    stopped: dict[str, dict] = field(default_factory=dict)
    # a 'none' final's post-hoc rows: trial id -> {row: seconds of validation sampling to choose its temperatures}
    posthoc_seconds: dict[str, dict] = field(default_factory=dict)
    # trial id -> how often its Tune trial crashed past its retries (a crash, not a NaN loss):
    # the searcher hands such a trial out again, and --resume runs one that failed of it again
    crashed: dict[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> "SearchState":
        what = None
        try:
            raw = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
            what = f"unreadable ({short(str(err), 100)[1:-1]})"
        else:
            names = {f for f in cls.__dataclass_fields__ if f != "path"}
            kinds = {"results": dict, "influence": dict, "checkpoints": dict, "finals": dict, "trial_seconds": dict,
                     "fit_seconds": list, "slots": int, "attempts": int, "drivers": list, "fingerprint": dict,
                     "race": dict, "stopped": dict, "posthoc_seconds": dict, "crashed": dict}
            if not isinstance(raw, dict) or set(raw) - names:
                what = f"not a search state (fields {short(sorted(raw) if isinstance(raw, dict) else raw)})"
            else:
                wrong = [k for k, t in kinds.items() if k in raw and not isinstance(raw[k], t)]
                if wrong:
                    what = f"field(s) {', '.join(wrong)} of the wrong type"
        if what:
            raise SearchError(f"{path}: {what}; it cannot be resumed: move it away to start the search again")
        return cls(path=path, **raw)

    def retry_crashed(self) -> list[str]:
        """On --resume: the trials recorded as failed because they crashed (past their retries,
        twice) lose that result and run again, from their last checkpoint; a NaN loss or a lost
        race stays as it was. Every trial without a result starts its crash count afresh.
        Returns the ids of the failed ones that run again."""
        again = sorted(t for t, n in self.crashed.items() if n and t in self.results and self.results[t] is None
                       and t not in self.stopped)
        for tid in again:
            del self.results[tid]
        for tid in self.crashed:
            if tid not in self.results:
                self.crashed[tid] = 0
        return again

    def difference_se(self, a: str, b: str, race: bool = False) -> float | None:
        """Standard error of the difference of two trials' scores (paired over the validation
        items), from their recorded influences; None when either has none (a failed trial, or a
        search state from before they were recorded). ``race``: of their scores at the race epoch."""
        influence = {t: r["influence"] for t, r in self.race.items() if "influence" in r} if race else self.influence
        if a not in influence or b not in influence:
            return None
        from ..scoring.metrics import difference_se

        x, y = _decoded(influence[a]), _decoded(influence[b])
        return difference_se(x, y) if x.shape == y.shape else None

    def save(self) -> None:
        data = {k: v for k, v in self.__dict__.items() if k != "path"}
        write_atomic(self.path, json.dumps(data, indent=1))  # atomic and durable (fsync file and folder)


@functools.lru_cache(maxsize=1024)
def _decoded(text: str):
    from .job import decode_influence

    return decode_influence(text)


def read_state(folder: Path) -> "SearchState | None":
    """The search state of a run folder, or None where no search ran there (the one reader of
    the state file: the driver, the dry run's cost and predict read it through here)."""
    path = Path(folder) / STATE_FILE
    return SearchState.load(path) if path.exists() else None
