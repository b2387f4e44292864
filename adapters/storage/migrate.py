"""Applies the numbered SQL files in `migrations/`, each in one transaction, recorded with name and time."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from importlib import resources

import aiosqlite

from core.values.errors import MigrationError

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    name: str
    sql: str


def known_migrations() -> list[Migration]:
    """The migrations this code ships, in order."""
    folder = resources.files("migrations")
    found = sorted(p.name for p in folder.iterdir() if _NAME.match(p.name))
    return [Migration(name, (folder / name).read_text(encoding="utf-8")) for name in found]


async def applied_migrations(db: aiosqlite.Connection) -> list[str]:
    await db.execute("CREATE TABLE IF NOT EXISTS schema_migrations ( name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    async with db.execute("SELECT name FROM schema_migrations ORDER BY name") as cur:
        return [row[0] for row in await cur.fetchall()]


async def migrate(db: aiosqlite.Connection, migrations: list[Migration] | None = None) -> list[str]:
    """Bring the schema up to date; return the names applied now.

    Raises:
        MigrationError: the database carries a migration this code does not know,
            or a migration failed (it is rolled back whole).
    """
    migrations = known_migrations() if migrations is None else migrations
    known = {m.name for m in migrations}
    applied = await applied_migrations(db)
    unknown = [name for name in applied if name not in known]
    if unknown:
        raise MigrationError(
            f"the database has migration {unknown[-1]} which this version of companion does not know; "
            "it was written by a newer version: upgrade companion, or restore a backup made by this version"
        )
    done: list[str] = []
    for migration in migrations:
        if migration.name in applied:
            continue
        started = time.perf_counter()
        try:
            await db.execute("BEGIN IMMEDIATE")
            # executescript would COMMIT first; run statement by statement inside our transaction.
            for statement in _statements(migration.sql):
                await db.execute(statement)
            await db.execute(
                "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
                (migration.name, time.time()),
            )
            await db.execute("COMMIT")
        except Exception as exc:
            await db.execute("ROLLBACK")
            raise MigrationError(f"migration {migration.name} failed and was rolled back: {exc}") from exc
        log.info("applied migration %s in %.1f ms", migration.name, (time.perf_counter() - started) * 1e3)
        done.append(migration.name)
    return done


def _statements(sql: str) -> list[str]:
    """Split a migration into complete statements (sqlite3.complete_statement knows about strings and triggers)."""
    import sqlite3

    statements: list[str] = []
    buffer = ""
    for line in sql.splitlines(keepends=True):
        if not buffer and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        raise MigrationError(f"incomplete SQL statement at the end of a migration: {buffer.strip()[:60]}")
    return statements
