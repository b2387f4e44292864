"""Backups without private rows, and restores that can never bring one back.

Both work on a copy made with SQLite's online backup API (consistent while the
gateway writes), delete every segment in the copy (the cascades remove every
private row with it), and VACUUM, so nothing of a private row survives in a free
page of the file. Seed 001: expiry in the live database does not erase a row from
an existing backup, so backups never hold private rows in the first place.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from adapters.storage.migrate import known_migrations
from core.errors import MigrationError, StoreError

log = logging.getLogger(__name__)

BACKUP_PREFIX = "companion-backup-"
_PRIVATE_TABLES = ("segments", "crossings")


@dataclass(frozen=True, slots=True)
class BackupResult:
    path: Path
    size: int
    pruned: list[Path]


def backup(
    db_path: Path, target: Path, *, folder: bool = True, retention_days: float, now: float | None = None
) -> BackupResult:
    """Write a private-free snapshot of `db_path` into the folder `target` (or to the file
    `target` when `folder` is False), then prune that folder's backups older than
    `retention_days` (0 keeps all)."""
    now = time.time() if now is None else now
    if not db_path.exists():
        raise StoreError(f"there is no database at {db_path} to back up")
    if folder:
        target.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
        dest = target / f"{BACKUP_PREFIX}{stamp}.db"
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        dest = target
    partial = dest.with_name(dest.name + ".partial")
    partial.unlink(missing_ok=True)
    source = sqlite3.connect(db_path)
    try:
        copy = sqlite3.connect(partial)
        try:
            source.backup(copy)
            _drop_private_rows(copy)
        finally:
            copy.close()
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        source.close()
    os.replace(partial, dest)
    pruned = _prune(dest.parent, retention_days, now, keep=dest)
    log.info("backup written (%d bytes), %d old backups pruned", dest.stat().st_size, len(pruned))
    return BackupResult(dest, dest.stat().st_size, pruned)


def restore(backup_path: Path, db_path: Path) -> Path:
    """Replace the database at `db_path` with `backup_path`, with every private row dropped and
    expiry applied before anything can serve from it. Stop the gateway first."""
    if not backup_path.is_file():
        raise StoreError(f"there is no backup at {backup_path}")
    source = sqlite3.connect(f"file:{backup_path}?mode=ro", uri=True)
    try:
        _check_is_companion(source, backup_path)
        db_path.parent.mkdir(parents=True, exist_ok=True)
        staging = db_path.with_name(db_path.name + ".restoring")
        staging.unlink(missing_ok=True)
        copy = sqlite3.connect(staging)
        try:
            source.backup(copy)
            _drop_private_rows(copy, now=time.time())
        finally:
            copy.close()
    finally:
        source.close()
    for suffix in ("-wal", "-shm"):
        Path(str(db_path) + suffix).unlink(missing_ok=True)
    os.replace(staging, db_path)
    log.info("restored a backup of %d bytes", db_path.stat().st_size)
    return db_path


def _drop_private_rows(db: sqlite3.Connection, now: float | None = None) -> None:
    db.isolation_level = None
    db.execute("PRAGMA foreign_keys = ON")
    db.execute("PRAGMA secure_delete = ON")
    if db.execute("PRAGMA foreign_keys").fetchone()[0] != 1:
        raise StoreError("SQLite refused PRAGMA foreign_keys=ON; cannot drop private rows by cascade")
    db.execute("BEGIN IMMEDIATE")
    for table in _PRIVATE_TABLES:
        if _has_table(db, table):
            db.execute(f"DELETE FROM {table}")  # noqa: S608 - constant names
    if now is not None and _has_table(db, "artifacts"):
        db.execute("DELETE FROM artifacts WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))
    leftovers = db.execute(
        "SELECT (SELECT count(*) FROM messages WHERE mode = 'private' OR segment_id IS NOT NULL)"
        " + (SELECT count(*) FROM summaries WHERE mode = 'private')"
        " + (SELECT count(*) FROM pad_entries WHERE mode = 'private')"
    ).fetchone()[0]
    if leftovers:
        db.execute("ROLLBACK")
        raise StoreError(f"{leftovers} private rows did not cascade away; refusing to write this copy")
    db.execute("COMMIT")
    db.execute("PRAGMA journal_mode = DELETE")
    db.execute("VACUUM")


def _has_table(db: sqlite3.Connection, name: str) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def _check_is_companion(db: sqlite3.Connection, path: Path) -> None:
    try:
        applied = [r[0] for r in db.execute("SELECT name FROM schema_migrations")]
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a companion database ({exc})") from exc
    unknown = sorted(set(applied) - {m.name for m in known_migrations()})
    if unknown:
        raise MigrationError(f"{path} was written by a newer companion (migration {unknown[-1]}); upgrade first")


def _prune(folder: Path, retention_days: float, now: float, keep: Path) -> list[Path]:
    if retention_days <= 0:
        return []
    cutoff = now - retention_days * 86400
    pruned = []
    for path in folder.glob(f"{BACKUP_PREFIX}*.db"):
        if path != keep and path.stat().st_mtime < cutoff:
            path.unlink()
            pruned.append(path)
    return pruned
