"""Where a search keeps what must survive its driver: the run folder and the search state.

The state file is written atomically after every finished trial (and every checkpoint),
so a driver killed at any moment (kill -9 included) resumes with ``--resume`` without
retraining a finished trial. Ray Tune's own experiment snapshot is periodic, which cannot
give that guarantee; docs/DESIGN.md says more.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..atomic import short, write_atomic
from ..job import decode_influence
from ..metrics import difference_se

STATE_FILE = "search_state.json"


class SearchError(RuntimeError):
    """A search that cannot start or continue; the message says what to do."""


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
    slots: int = 0  # trials that could run at once (the largest number seen running)
    attempts: int = 0  # driver starts; names the Tune experiments of a resumed search apart
    parent_run_id: str | None = None
    fingerprint: dict = field(default_factory=dict)

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
                     "fit_seconds": list, "slots": int, "attempts": int, "fingerprint": dict}
            if not isinstance(raw, dict) or set(raw) - names:
                what = f"not a search state (fields {short(sorted(raw) if isinstance(raw, dict) else raw)})"
            else:
                wrong = [k for k, t in kinds.items() if k in raw and not isinstance(raw[k], t)]
                if wrong:
                    what = f"field(s) {', '.join(wrong)} of the wrong type"
        if what:
            raise SearchError(f"{path}: {what}; it cannot be resumed: move it away to start the search again")
        return cls(path=path, **raw)

    def difference_se(self, a: str, b: str) -> float | None:
        """Standard error of the difference of two trials' scores (paired over the validation
        items), from their recorded influences; None when either has none (a failed trial, or a
        search state from before they were recorded)."""
        if a not in self.influence or b not in self.influence:
            return None
        x, y = _decoded(self.influence[a]), _decoded(self.influence[b])
        return difference_se(x, y) if x.shape == y.shape else None

    def save(self) -> None:
        data = {k: v for k, v in self.__dict__.items() if k != "path"}
        write_atomic(self.path, json.dumps(data, indent=1))  # atomic and durable (fsync file and folder)


@functools.lru_cache(maxsize=1024)
def _decoded(text: str):
    return decode_influence(text)


def read_state(folder: Path) -> "SearchState | None":
    """The search state of a run folder, or None where no search ran there (the one reader of
    the state file: the driver, the dry run's cost and predict read it through here)."""
    path = Path(folder) / STATE_FILE
    return SearchState.load(path) if path.exists() else None


def is_uri(storage: str) -> bool:
    return "://" in storage


def run_dir(opts) -> Path:
    """Where the search state and the report live (``opts``: the search's options, storage,
    game, profile and seed): under --storage, or runs/ for a URI storage."""
    base = Path("runs") if is_uri(opts.storage) else Path(opts.storage)
    return base / f"{opts.game}-{opts.profile}-seed{opts.seed}"


def tune_storage(storage: str, folder: Path) -> str:
    """Ray Tune's storage_path for this search: the run folder, or the same name under a URI."""
    if is_uri(storage):
        return f"{storage.rstrip('/')}/{folder.name}"
    return str(folder.resolve())


def checkpoint_uri(checkpoint) -> str:
    """A checkpoint's location that tune.Checkpoint(...) reopens: a path, or a URI off the local disk."""
    kind = checkpoint.filesystem.type_name
    return checkpoint.path if kind == "local" else f"{kind}://{checkpoint.path}"


def check_storage(opts, folder: Path) -> list[Path]:
    """Make the run folder and prove it writable; returns the folders created here (deepest first)."""
    base = folder.parent
    if base.exists() and not base.is_dir():
        raise SearchError(f"--storage {short(str(base))[1:-1]}: is a file; expected a folder for the search runs")
    created = [d for d in (folder, *folder.parents) if not d.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise SearchError(f"--storage {short(opts.storage)[1:-1]}: cannot write {folder} ({err.strerror or err}); "
                          "choose a folder you can write") from None
    return created


def remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass
