"""Where a search keeps what must survive its driver: the run folder and its storage. The
search state itself (``STATE_FILE``, :class:`SearchState`) is ``focus_tune.procedure.state``'s, re-exported
here; Ray Tune's own experiment snapshot is periodic, which cannot give the state's guarantee
(docs/DESIGN.md says more).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..config.fields import RENAMED_KEYS
from ..config.space import dump_search_config, override_text
from ..durable import write_atomic
from ..errors import SearchError
from ..procedure.state import EXPERIMENT_KEY, OVERRIDES_KEY, STATE_FILE, SearchState, read_state
from ..quote import short

__all__ = ["CONFIG_FILE", "STATE_FILE", "SearchState", "check_resumable", "check_storage",
           "checkpoint_uri", "fingerprint", "is_uri", "read_state", "remove_if_empty", "run_dir", "tune_storage",
           "write_config"]

CONFIG_FILE = "config.yaml"  # the run's resolved search space, as --print-config prints it


def write_config(folder: Path, cfg, overrides=()) -> Path:
    """``<run folder>/config.yaml``: the resolved search space of the run (``--set`` applied),
    the file ``--print-config`` prints; ``--space`` takes it back (with the same ``--profile``,
    and ``--game`` or ``--data``) and gives the same configuration, so the same search."""
    path = Path(folder) / CONFIG_FILE
    write_atomic(path, dump_search_config(cfg, overrides))
    return path

def is_uri(storage: str) -> bool:
    return "://" in storage


def run_dir(opts) -> Path:
    """Where the search state and the report live (``opts``: the search's options, with its
    storage and ``folder_name``): under --storage, or runs/ for a URI storage."""
    base = Path("runs") if is_uri(opts.storage) else Path(opts.storage)
    return base / opts.folder_name


def fingerprint(opts, cfg, data_path: Path, files) -> dict:
    """What a resumed search must share with the search it continues (JSON types): the resolved
    config, the dataset (folder, files), the joint stage's method and, where given, the --set
    overrides (config.apply_overrides) and the --experiment its MLflow runs are in."""
    d = {"config": cfg.to_dict(), "data": str(Path(data_path).resolve()), "files": files,
         "joint_search": opts.joint_search, "joint_budget": opts.joint_budget}
    if opts.overrides:
        d[OVERRIDES_KEY] = dict(opts.overrides)
    if opts.experiment is not None:
        d[EXPERIMENT_KEY] = opts.experiment
    return json.loads(json.dumps(d, default=str))


def _current(fingerprint: dict) -> dict:
    """``fingerprint`` with its config's keys under today's names."""
    config = fingerprint.get("config")
    if not isinstance(config, dict):
        return fingerprint
    config = {RENAMED_KEYS[""].get(k, k): v for k, v in config.items()}
    if isinstance(config.get("train"), dict):
        config["train"] = {RENAMED_KEYS["train"].get(k, k): v for k, v in config["train"].items()}
    return {**fingerprint, "config": config}


def check_resumable(state_path: Path, recorded: dict, now: dict) -> None:
    """Refuse to resume the search of ``state_path`` (fingerprint ``recorded``) with another
    fingerprint: a --set override or an --experiment that differs by name, else as another
    config or dataset. A config recorded under a key's former name (``config.fields.RENAMED_KEYS``:
    ``game``, ``train.absorbing``) is the same config under today's."""
    if _current(recorded) == now:
        return
    differ = []
    was, given = recorded.get(OVERRIDES_KEY, {}), now.get(OVERRIDES_KEY, {})  # absent: made without --set
    for key in sorted(set(was) | set(given)):
        if (key in was, was.get(key)) != (key in given, given.get(key)):
            made = f"--set {override_text(key, was[key])}" if key in was else f"no --set {key}"
            asked = f"--set {override_text(key, given[key])}" if key in given else f"no --set {key}"
            differ.append(f"it was made with {made}, this command gives {asked}")
    if recorded.get(EXPERIMENT_KEY) != now.get(EXPERIMENT_KEY):  # absent: focus-tune/<scenario>
        made, asked = (f"--experiment {d[EXPERIMENT_KEY]}" if EXPERIMENT_KEY in d else "no --experiment"
                       for d in (recorded, now))
        differ.append(f"its MLflow runs are in {made}, this command gives {asked}")
    if differ:
        raise SearchError(f"{state_path}: cannot resume: {'; '.join(differ)}; resume with the flags it was made "
                          "with, or start another search with --name NAME")
    raise SearchError(f"{state_path} was made with another config or dataset; resume with the same arguments, "
                      "or start another search with --name NAME (or another --storage)")


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
