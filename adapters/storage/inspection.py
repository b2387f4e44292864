"""`companion doctor`'s look at the database: opened read-only, read for names and counts only.

Nothing here writes: the connection is a `mode=ro` URI with `query_only` on, no migration runs, and
no lock file is taken, so a running gateway is never blocked or disturbed. A WAL database is read
through its -wal and -shm files; when there are none (no process has it open), `immutable=1` reads
the file as it is, so that the look leaves no file behind either. Of private mode only the number
of open intervals is read: never an id, a time or a text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from pathlib import Path

from adapters.storage.migrate import known_migrations


@dataclasses.dataclass(frozen=True, slots=True)
class DatabaseFacts:
    """What `inspect_database` found. `problem`: why it could not be read (our words)."""

    exists: bool
    size_bytes: int = 0
    applied: int = 0
    pending: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    open_private_intervals: int = 0
    problem: str | None = None


def inspect_database(path: Path) -> DatabaseFacts:
    """Read-only facts about the database at `path` (which may not exist yet)."""
    if not path.is_file():
        return DatabaseFacts(exists=False)
    wal = path.with_name(path.name + "-wal")
    size = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    mode = "mode=ro" if wal.exists() else "mode=ro&immutable=1"
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True, timeout=2.0)
    except sqlite3.Error as exc:
        return DatabaseFacts(True, size, problem=f"cannot be opened ({type(exc).__name__})")
    try:
        db.execute("PRAGMA query_only = ON")
        try:
            applied = [row[0] for row in db.execute("SELECT name FROM schema_migrations")]
        except sqlite3.DatabaseError as exc:
            return DatabaseFacts(True, size, problem=f"is not a companion database ({type(exc).__name__})")
        known = [m.name for m in known_migrations()]
        pending = tuple(name for name in known if name not in applied)
        unknown = tuple(sorted(set(applied) - set(known)))
        open_intervals = 0
        if "segments" in _tables(db):
            open_intervals = db.execute("SELECT count(*) FROM segments WHERE ended_at IS NULL").fetchone()[0]
        return DatabaseFacts(True, size, len(applied), pending, unknown, open_intervals)
    except sqlite3.Error as exc:
        return DatabaseFacts(True, size, problem=f"could not be read ({type(exc).__name__})")
    finally:
        with contextlib.suppress(sqlite3.Error):
            db.close()


def _tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
