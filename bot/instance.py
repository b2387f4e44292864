"""One process per database and role: an exclusive `flock` on a lock file beside an SQLite database (the
engine's advisory lock on PostgreSQL, chosen by bot/bootstrap.py `instance_lock`), behind one shape."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from types import TracebackType
from typing import Final, Literal, Protocol

from core.values.errors import CompanionError

try:
    import fcntl
except ImportError:  # not POSIX; every host we support (and the Dockerfile's) is
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

Role = Literal["run", "chat"]
RUN: Final = "run"  # `companion run`: the gateway, serving every configured platform
CHAT: Final = "chat"  # `companion chat`: the terminal only, so it may run beside the gateway


# What a process says when its lock's connection dropped: without it a second process of its role could start.
LOCK_LOST = "the database connection holding the instance lock dropped (PostgreSQL restarted?)"


class DatabaseInstanceLock(Protocol):
    """One process per database and role, whatever the engine: `FileInstanceLock` beside an SQLite file,
    adapters/storage/postgres/instance.py's `AdvisoryInstanceLock` on PostgreSQL."""

    async def acquire(self) -> None:
        """Take it, or raise a CompanionError of one line naming the holder (safe to call twice)."""

    async def lost(self) -> None:
        """Completes when the lock was lost while held: the process must stop (never for a file lock)."""

    async def aclose(self) -> None:
        """Release it; safe to call twice."""


class PlatformConnectionLock(DatabaseInstanceLock, Protocol):
    """A connection one process of a shared database holds at a time (adapters/storage/postgres/gateway_lock.py
    `GatewayLock`, the Discord gateway's): `acquire` waits until it is this process's."""

    settle: float  # seconds a new holder waits at most for the last holder to let go of its conversations

    @property
    def held(self) -> bool:
        """Whether this process holds it now."""

    @property
    def taken(self) -> int:
        """How many times this process took it."""


@contextlib.asynccontextmanager
async def holding(lock: DatabaseInstanceLock) -> AsyncIterator[DatabaseInstanceLock]:
    """`lock` taken for the length of the block, released after it (also on failure)."""
    await lock.acquire()
    try:
        yield lock
    finally:
        await lock.aclose()


class InstanceLockError(CompanionError):
    """The lock beside the database could not be taken: another process holds it (`holder_pid`,
    when it wrote one) or the lock file could not be opened. The message is one line."""

    def __init__(self, message: str, *, holder_pid: int | None = None) -> None:
        super().__init__(message)
        self.holder_pid = holder_pid


def lock_path(db_path: str | os.PathLike[str], role: str) -> Path | None:
    """`<db>.<role>.lock` beside the database; None for an in-memory or URI database (nothing to guard)."""
    text = os.fspath(db_path)
    if text in ("", ":memory:") or text.startswith("file:"):
        return None
    db = Path(text).resolve()  # a symlink and its target, or two spellings of one path, share one lock
    return db.with_name(f"{db.name}.{role}.lock")


class InstanceLock:
    """An exclusive, non-blocking `flock` on `<db>.<role>.lock`, for as long as the `with` block runs.

    The file holds the holder's pid, for the message another process shows. The OS releases
    the lock when the process dies (SIGKILL included), so a lock is never stale. The file is
    left in place on release: unlinking it would let a third process lock a fresh inode while
    a second still holds the old one.

    `purpose` names the command taking the lock when it is not the role's own (`restore`
    takes both roles' locks so that nothing serves from a database it replaces).
    """

    def __init__(self, db_path: str | os.PathLike[str], role: str, *, purpose: str | None = None) -> None:
        self.path = lock_path(db_path, role)
        self._db = Path(db_path).resolve()
        self._role = role
        self._purpose = purpose or role
        self._fd: int | None = None

    def acquire(self) -> None:
        """Raises:
        InstanceLockError: another process holds the lock, or the lock file cannot be opened.
        """
        if self._fd is not None or self.path is None or fcntl is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited by child processes
        except OSError as exc:
            raise InstanceLockError(f"cannot open the lock file {self.path} ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise InstanceLockError(self._busy_message(holder), holder_pid=holder) from None
        except OSError as exc:
            os.close(fd)
            raise InstanceLockError(f"cannot lock {self.path} ({exc.strerror})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        log.debug("holding %s", self.path)

    def release(self) -> None:
        """Safe to call twice."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # no stale pid for whoever reads it next
        os.close(fd)  # closing the last descriptor releases the flock

    def _busy_message(self, holder: int | None) -> str:
        pid = f" (pid {holder})" if holder else ""
        if self._purpose == self._role:
            return f"another `companion {self._role}` is already using {self._db}{pid}; stop it first"
        return f"`companion {self._role}` is using {self._db}{pid}; stop it before `companion {self._purpose}`"

    def __enter__(self) -> InstanceLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class FileInstanceLock:
    """`InstanceLock` in the shape of `DatabaseInstanceLock`: the kernel keeps a `flock` for as long as the
    process lives, so it is never lost while held."""

    def __init__(self, db_path: str | os.PathLike[str], role: str, *, purpose: str | None = None) -> None:
        self._lock = InstanceLock(db_path, role, purpose=purpose)

    async def acquire(self) -> None:
        self._lock.acquire()

    async def lost(self) -> None:
        await asyncio.Event().wait()

    async def aclose(self) -> None:
        self._lock.release()


def _read_pid(fd: int) -> int | None:
    """The holder writes its pid just after locking; a reader in between sees an empty file."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
