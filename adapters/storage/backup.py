"""Backups without private rows, and restores that can never bring one back.

Both copy the database with SQLite's online backup API (consistent while the
gateway writes) into a database that lives only in memory (so they need RAM the
size of the database), delete every segment there (the cascades remove every
private row with it) and VACUUM; only then is the copy written to a partial file
that is renamed into place. No file ever holds a private row, so a kill at any
stage leaves at most a private-free partial file, which the next run removes.
Seed 001: expiry in the live database does not erase a row from an existing
backup, so backups never hold private rows in the first place.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from adapters.storage.migrate import known_migrations
from core.values.errors import MigrationError, StoreError

log = logging.getLogger(__name__)

BACKUP_PREFIX = "companion-backup-"
_PRIVATE_TABLES = ("segments", "crossings")
# Credentials of the web sign-in (hashes): a restored backup must not sign anyone in again.
_CREDENTIAL_TABLES = ("web_sessions", "web_login_codes")


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
    _remove_leftovers(dest.parent, f"{BACKUP_PREFIX}*.partial", partial)
    copy = _copy_into_memory(sqlite3.connect(db_path))
    try:
        _drop_private_rows(copy)
        _write_file(copy, partial)
    finally:
        copy.close()
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
    except BaseException:
        source.close()
        raise
    copy = _copy_into_memory(source)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    staging = db_path.with_name(db_path.name + ".restoring")
    _remove_leftovers(db_path.parent, staging.name)
    try:
        _drop_private_rows(copy, now=time.time())
        _write_file(copy, staging)
    finally:
        copy.close()
    for suffix in ("-wal", "-shm"):
        Path(str(db_path) + suffix).unlink(missing_ok=True)
    os.replace(staging, db_path)
    log.info("restored a backup of %d bytes", db_path.stat().st_size)
    return db_path


# --- the stages; each leaves on disk nothing that holds a private row --------------


def _remove_leftovers(folder: Path, pattern: str, *also: Path) -> None:
    """Partial files a killed backup or restore left (private-free, but not a backup)."""
    for path in {*folder.glob(pattern), *also}:
        for leftover in (path, Path(f"{path}-journal")):
            leftover.unlink(missing_ok=True)


def _copy_into_memory(source: sqlite3.Connection) -> sqlite3.Connection:
    """Copy the database (closing `source`) into one that lives only in memory: temp_store
    MEMORY keeps the statement journals and VACUUM's scratch database off the disk too."""
    copy = sqlite3.connect(":memory:", isolation_level=None)
    try:
        copy.execute("PRAGMA temp_store = MEMORY")
        source.backup(copy)
    except BaseException:
        copy.close()
        raise
    finally:
        source.close()
    return copy


def _drop_private_rows(db: sqlite3.Connection, now: float | None = None) -> None:
    db.isolation_level = None
    db.execute("PRAGMA foreign_keys = ON")
    db.execute("PRAGMA secure_delete = ON")
    if db.execute("PRAGMA foreign_keys").fetchone()[0] != 1:
        raise StoreError("SQLite refused PRAGMA foreign_keys=ON; cannot drop private rows by cascade")
    db.execute("BEGIN IMMEDIATE")
    for table in _PRIVATE_TABLES + _CREDENTIAL_TABLES:
        if _has_table(db, table):
            db.execute(f"DELETE FROM {table}")
    if "retracts" in {row[1] for row in db.execute("PRAGMA table_info(deliveries)")}:
        # What an ended interval's answer showed, waiting to be withdrawn: which messages it showed is
        # the interval's too, kept only until the edit is made (0014); a copy does not carry it.
        db.execute("DELETE FROM deliveries WHERE retracts = 1")
    if now is not None and _has_table(db, "artifacts"):
        db.execute("DELETE FROM artifacts WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))
    leftovers = private_rows_left(db)
    if leftovers:
        db.execute("ROLLBACK")
        raise StoreError(f"{leftovers} private rows did not cascade away; refusing to write this copy")
    db.execute("COMMIT")
    db.execute("VACUUM")


def private_rows_left(db: sqlite3.Connection) -> int:
    """The private rows a deletion of every segment left (none when the cascades ran)."""
    return int(
        db.execute(
            "SELECT (SELECT count(*) FROM messages WHERE mode = 'private' OR segment_id IS NOT NULL)"
            " + (SELECT count(*) FROM summaries WHERE mode = 'private')"
            " + (SELECT count(*) FROM pad_entries WHERE mode = 'private')"
        ).fetchone()[0]
    )


def _write_file(copy: sqlite3.Connection, path: Path) -> None:
    """Write the private-free copy to `path` (rollback-journal mode, so it is one file)."""
    path.unlink(missing_ok=True)
    dest = sqlite3.connect(path, isolation_level=None)
    try:
        copy.backup(dest, pages=_PAGES_PER_STEP, progress=_written)
        dest.execute("PRAGMA journal_mode = DELETE")
    finally:
        dest.close()


_PAGES_PER_STEP = 256


def _written(status: int, remaining: int, total: int) -> None:
    log.debug("backup copy: %d of %d pages written", total - remaining, total)


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
