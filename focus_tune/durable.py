"""Durable, atomic file writes, and telling a full disk from other write errors.

``write_atomic(path, text)`` writes a sibling temporary file, fsyncs it, renames it over
``path`` and fsyncs the folder: after a crash or a power cut the file holds either its old
or its new content, never an empty or half-written one (a bare ``os.replace`` without the
fsyncs can leave a zero-length file on ext4/xfs after a power cut).
"""
from __future__ import annotations

import errno
import os
import uuid
from pathlib import Path

_FULL = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXT = ("no space left on device", "disk quota exceeded")


def disk_full(err: BaseException | None) -> BaseException | None:
    """The error in ``err``'s chain (causes, contexts, Ray's wrapped ``cause``) that says the
    disk is full (ENOSPC) or the quota is spent (EDQUOT), or None. pyarrow, which persists
    Ray Tune's checkpoints, raises an OSError whose errno may be unset: its text counts too."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and (err.errno in _FULL or any(t in str(err).lower() for t in _FULL_TEXT)):
            return err
        err = getattr(err, "cause", None) or err.__cause__ or err.__context__
    return None


def fsync_path(path: str | os.PathLike) -> None:
    """fsync a file or a folder (a folder's fsync makes a rename in it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Replace ``path`` by ``data`` atomically and durably (fsync of the file and of its folder)."""
    path = Path(path)
    tmp = path.parent / f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    raw = data.encode() if isinstance(data, str) else data
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)
