"""One search per run folder: ``search.lock``, a lock file that works on a shared filesystem.

Two drivers on one run folder (two terminals, or two hosts on shared storage) would write
the same search state and the same Tune experiment. The driver therefore holds
``<run folder>/search.lock`` while it runs, and a second driver is refused at once, before
it starts Ray or touches the state or MLflow, with a message naming the holder.

How:

- **Created atomically**: the holder's record (JSON: host, pid, the pid's start time, boot
  and pid namespace, start time, command) is written to a unique temporary file, fsynced,
  and hard-linked to ``search.lock``; the link fails if the lock exists (atomic on local
  disks and on NFS v3+, unlike ``fcntl`` locks, which some shared filesystems do not carry
  between hosts). Where hard links are not supported, ``O_CREAT | O_EXCL`` is used.
- **Heartbeat**: a daemon thread of the holder touches the lock's mtime every
  :data:`HEARTBEAT_S` seconds; :meth:`SearchLock.release` (called on every exit of the
  driver: normal, error, Ctrl-C) removes it.
- **Stale locks are taken over** (with a one-line notice): on the same machine (same host
  name, boot and pid namespace) when the holder's process is gone (a pid reused by another
  process is told apart by its start time), and from any host when the heartbeat is older
  than :data:`STALE_AFTER_S` seconds (a crashed host, or a lock left by ``kill -9`` on
  another machine). The clocks of the hosts must agree to within that margin.
- **Takeover is race-safe**: of the contenders that judged one lock stale, one takes it
  over: the one that creates (``O_EXCL``) the token file named after that lock's inode and
  mtime. It removes the lock only if the file there is still the very one judged (same
  inode and mtime), then links its own as anyone does, and removes the token. Nobody else
  ever moves or removes a lock, so no fresh lock is ever moved aside; an earlier version
  renamed the stale lock aside and put back a fresh one moved by mistake, and in the gap a
  third contender's lock got in, then the put-back failed and the fresh lock was deleted:
  two winners (8 contenders, 2 cores under load).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..durable import fsync_path
from ..errors import LockBusy

LOCK_FILE = "search.lock"
HEARTBEAT_S = 10.0  # how often the holder touches the lock
STALE_AFTER_S = 120.0  # a lock whose heartbeat is older than this is taken over, from any host
_NO_LINK = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV)


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: what ``search.lock`` records."""

    host: str
    pid: int
    pid_start: str  # the process's start time in clock ticks since boot (/proc/<pid>/stat), "" if unknown
    boot: str  # /proc/sys/kernel/random/boot_id: a rebooted machine holds nothing
    pid_ns: str  # the pid namespace (containers with one host name apart)
    started: str  # ISO time the lock was taken
    command: str

    @classmethod
    def me(cls, command: str | None = None) -> "Holder":
        pid = os.getpid()
        return cls(host=socket.gethostname(), pid=pid, pid_start=_pid_start(pid), boot=_boot_id(),
                   pid_ns=_pid_namespace(),
                   started=datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
                   command=command if command is not None else " ".join([sys.executable, *sys.argv]))

    @classmethod
    def parse(cls, text: str) -> "Holder | None":
        """The holder a lock file records, or None when it is not one (empty, being written, foreign)."""
        try:
            raw = json.loads(text)
            return cls(**{k: raw[k] for k in cls.__dataclass_fields__})
        except (ValueError, TypeError, KeyError):
            return None

    def same_machine(self, other: "Holder") -> bool:
        """Whether a pid of ``other`` can be looked up here (same host, boot and pid namespace)."""
        return (self.host, self.boot, self.pid_ns) == (other.host, other.boot, other.pid_ns)

    def alive(self) -> bool:
        """Whether this holder's process still runs (to be asked on its own machine only)."""
        if not os.path.exists("/proc/self/stat"):  # no /proc: the pid alone
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True  # it runs, as another user
            return True
        now = _pid_start(self.pid)
        return bool(now) and (not self.pid_start or now == self.pid_start)


def _lock_busy(path: Path, holder: Holder | None, age_s: float) -> LockBusy:
    """The error for a lock ``path`` held by ``holder`` (None: unreadable) whose heartbeat is ``age_s`` old."""
    who = (f"by pid {holder.pid} on host {holder.host} since {holder.started} "
           f"(heartbeat {age_s:.0f} s ago)" if holder else f"by an unreadable lock (modified {age_s:.0f} s ago)")
    return LockBusy(
        f"another search is running in {path.parent}: {path.name} is held {who}; wait for it to end, "
        f"or stop it (Ctrl-C) and continue with --resume; if it is gone, the lock is taken over once its "
        f"heartbeat is older than {STALE_AFTER_S:.0f} s (or delete {path})", path, holder, age_s)


class SearchLock:
    """The lock of one run folder (``folder/search.lock``).

    ``acquire()`` takes it or raises :class:`LockBusy`; ``release()`` gives it up (both are
    idempotent); as a context manager it holds the lock for the ``with`` block. ``notice``
    is the one-line message of a stale lock that ``acquire()`` took over, else None.
    """

    def __init__(self, folder: Path, command: str | None = None, stale_after_s: float = STALE_AFTER_S,
                 heartbeat_s: float = HEARTBEAT_S):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self.command, self.stale_after_s, self.heartbeat_s = command, stale_after_s, heartbeat_s
        self.holder: Holder | None = None  # this process's record while it holds the lock
        self.notice: str | None = None
        self._ino: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- taking and giving up ---------------------------------------------------------------
    def acquire(self) -> "SearchLock":
        if self.holder is not None:
            return self
        me = Holder.me(self.command)
        for _ in range(10):  # each round: create, or judge the lock there and take it over if stale
            if self._create(me):
                break
            try:
                st = os.stat(self.path)
                text = self.path.read_text(errors="replace")
            except FileNotFoundError:
                continue  # released meanwhile: try again
            holder = Holder.parse(text)
            age = time.time() - st.st_mtime
            why = self._stale(me, holder, age)
            if why is None:
                raise _lock_busy(self.path, holder, age)
            if self._take_over(st):
                who = (f"pid {holder.pid} on host {holder.host} since {holder.started}" if holder
                       else "an unreadable lock")
                self.notice = f"note: took over the stale lock {self.path} of {who}: {why}"
        else:  # the lock kept changing hands under us: someone else is starting right now
            raise _lock_busy(self.path, Holder.parse(self._read()), 0.0)
        self.holder = me
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="search-lock-heartbeat", daemon=True)
        self._thread.start()
        return self

    def release(self) -> None:
        """Stop the heartbeat and remove the lock if it is still this process's own."""
        if self.holder is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.holder, self._thread = None, None
        # Gone already (taken over as stale), or the folder unreachable: nothing to undo then.
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self._ino:
                self.path.unlink()
                fsync_path(self.folder)

    def __enter__(self) -> "SearchLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    # -- the steps --------------------------------------------------------------------------
    def _create(self, me: Holder) -> bool:
        """Write this process's record as the lock; False if a lock exists."""
        data = json.dumps(asdict(me), indent=1).encode()
        tmp = self.folder / f".{LOCK_FILE}.{me.host}.{me.pid}.{uuid.uuid4().hex[:8]}"
        try:
            with open(tmp, "xb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                return False
            except OSError as err:
                if err.errno not in _NO_LINK:
                    raise
                return self._create_excl(data)
            self._ino = os.stat(self.path).st_ino
        finally:
            tmp.unlink(missing_ok=True)
        fsync_path(self.folder)
        return True

    def _create_excl(self, data: bytes) -> bool:
        """The fallback for filesystems without hard links: O_CREAT | O_EXCL, then the record."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            self._ino = os.fstat(handle.fileno()).st_ino
        return True

    def _stale(self, me: Holder, holder: Holder | None, age_s: float) -> str | None:
        """Why the lock may be taken over, or None while its holder may still run."""
        if age_s > self.stale_after_s:
            return f"no heartbeat for {age_s:.0f} s"
        if holder is not None and holder.same_machine(me) and not holder.alive():
            return "that process has ended"
        return None

    def _take_over(self, judged: os.stat_result) -> bool:
        """Remove the lock judged stale; True if this contender removed that very file."""
        token = self.folder / f".{LOCK_FILE}.takeover-{judged.st_ino}-{judged.st_mtime_ns}"
        try:
            fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False  # another contender is taking this lock over
        os.close(fd)
        try:
            now = os.stat(self.path)
            if (now.st_ino, now.st_mtime_ns) != (judged.st_ino, judged.st_mtime_ns):
                return False  # taken over already, or a heartbeat since: judge it again
            os.unlink(self.path)
            return True
        except FileNotFoundError:
            return False
        finally:
            token.unlink(missing_ok=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            with contextlib.suppress(OSError):  # a full disk or a network hiccup: the next beat tries again
                os.utime(self.path)

    def _read(self) -> str:
        try:
            return self.path.read_text(errors="replace")
        except OSError:
            return ""


def _pid_start(pid: int) -> str:
    """A process's start time (field 22 of /proc/<pid>/stat), "" if it is not running (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return ""
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[19] if len(fields) > 19 and fields[0] != "Z" else ""


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""
