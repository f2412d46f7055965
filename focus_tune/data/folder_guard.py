"""Never replace someone's data: a folder a dataset is written to must be absent, empty, or a
dataset folder of ours (``check_replaceable``), checked before writing and again before the
new folder is moved into its place (``dataset_writer``, ``own.write``). And leave nothing
behind: the temporary folder of a write that was killed is removed by the next write to the
same place (``temporary_folder``, ``remove_abandoned``)."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import uuid
from pathlib import Path

from ..errors import DataError
from ..quote import short
from .dataset_format import MANIFEST, MAX_MANIFEST_BYTES, SPLIT_FILES


def check_replaceable(folder: Path) -> None:
    """Raise DataError unless ``folder`` is absent, empty, or a dataset folder of ours.

    Ours means: a real folder (not a symlink) holding nothing but the three split files and a
    manifest.json that parses as a focus_tune manifest (a JSON object with its generator and
    the SHA-256 of exactly those three files). Anything else is someone's data and is never
    replaced.
    """
    if not os.path.lexists(folder):
        return
    if folder.is_symlink() or not folder.is_dir():
        kind = "a symbolic link" if folder.is_symlink() else "a file"
        raise DataError(f"{folder}: exists and is {kind}; choose a new or empty folder for the dataset")
    names = sorted(p.name for p in folder.iterdir())
    if not names:
        return
    foreign = [n for n in names if n not in (*SPLIT_FILES, MANIFEST)]
    if not foreign and _is_our_manifest(folder / MANIFEST):
        return
    listed = ", ".join(short(n, 40) for n in (foreign or names)[:3]) + (", ..." if len(foreign or names) > 3 else "")
    raise DataError(f"{folder}: exists and holds files that are not a focus_tune dataset ({listed}); "
                    "nothing was changed: choose a new or empty folder, or move those files away first")


def _is_our_manifest(file: Path) -> bool:
    try:
        if file.is_symlink() or not file.is_file() or file.stat().st_size > MAX_MANIFEST_BYTES:
            return False
        raw = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return (isinstance(raw, dict) and isinstance(raw.get("generator"), str) and "format_version" in raw
            and isinstance(raw.get("files"), dict) and set(raw["files"]) == set(SPLIT_FILES))


def temporary_folder(out_dir: Path) -> Path:
    """The hidden folder a write of ``out_dir`` fills before it is renamed into place:
    ``.NAME.tmp-HOST-PID-RANDOM`` beside it, named for the process that owns it."""
    return out_dir.parent / f".{out_dir.name}.tmp-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def remove_abandoned(out_dir: Path) -> list[Path]:
    """Remove the temporary folders of ``out_dir`` left by writes on this host whose process is
    gone (killed mid-write: nothing reads them, but they hold the data written so far); a
    folder of a live process, or of another host (shared storage), is left alone. Returns what
    was removed. The names of a write from before the host was named (``.NAME.tmp-PID-RANDOM``)
    count as this host's."""
    pattern = re.compile(rf"\.{re.escape(out_dir.name)}\.tmp-(?:(?P<host>.+)-)?(?P<pid>\d+)-[0-9a-f]{{8}}")
    removed = []
    if not out_dir.parent.is_dir():
        return removed
    for entry in out_dir.parent.iterdir():
        m = pattern.fullmatch(entry.name)
        if not m or entry.is_symlink() or not entry.is_dir():
            continue
        if m["host"] not in (None, socket.gethostname()) or _alive(int(m["pid"])):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
