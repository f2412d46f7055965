"""Where a search keeps what must survive its driver: the run folder and its storage. The
search state itself (``STATE_FILE``, :class:`SearchState`) is ``focus_tune.state``'s, re-exported
here; Ray Tune's own experiment snapshot is periodic, which cannot give the state's guarantee
(docs/DESIGN.md says more).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..atomic import short
from ..state import STATE_FILE, SearchError, SearchState, read_state

__all__ = ["STATE_FILE", "SearchError", "SearchState", "check_storage", "checkpoint_uri", "is_uri", "read_state",
           "remove_if_empty", "run_dir", "tune_storage"]

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
