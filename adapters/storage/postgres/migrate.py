"""Applies the numbered SQL files of `migrations/postgres/`, each in one transaction, under an advisory lock."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from adapters.storage.postgres.errors import PostgresUrl, translate
from core.values.errors import MigrationError

if TYPE_CHECKING:
    from psycopg import AsyncConnection

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
# Two companions starting at once on one database migrate one after the other: the second finds the work done.
# (hashtext('companion'), 0); the instance locks of `run` and `chat` are 1 and 2.
LOCK = "SELECT pg_advisory_xact_lock(hashtext('companion'), 0)"
TABLE = "CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at double precision NOT NULL)"


@dataclass(frozen=True, slots=True)
class Migration:
    name: str
    sql: str


def known_migrations() -> list[Migration]:
    """The PostgreSQL migrations this code ships, in order."""
    folder = resources.files("migrations.postgres")
    found = sorted(p.name for p in folder.iterdir() if _NAME.match(p.name))
    return [Migration(name, (folder / name).read_text(encoding="utf-8")) for name in found]


def newer_migration(name: str) -> MigrationError:
    return MigrationError(
        f"the database has migration {name} which this version of companion does not know; "
        "it was written by a newer version: upgrade companion, or restore a backup made by this version"
    )


async def migrate(
    conn: AsyncConnection[Any], target: PostgresUrl, migrations: list[Migration] | None = None
) -> list[str]:
    """Bring the schema up to date on `conn` (autocommit); return the names applied now.

    Raises:
        MigrationError: the database carries a migration this code does not know, or one failed (rolled back
            whole: PostgreSQL's DDL is transactional), or the user may not create tables.
    """
    migrations = known_migrations() if migrations is None else migrations
    done: list[str] = []
    while (name := await _apply_next(conn, target, migrations)) is not None:
        done.append(name)
    return done


async def _apply_next(conn: AsyncConnection[Any], target: PostgresUrl, migrations: list[Migration]) -> str | None:
    """One transaction: take the lock, read what is applied, apply the first missing file; None when none is."""
    import psycopg

    running: str | None = None
    started = time.perf_counter()
    try:
        async with conn.transaction():
            await conn.execute(LOCK.encode())
            await conn.execute(TABLE.encode())
            cursor = await conn.execute(b"SELECT name FROM schema_migrations ORDER BY name")
            applied = {str(row[0]) for row in await cursor.fetchall()}
            unknown = sorted(applied - {m.name for m in migrations})
            if unknown:
                raise newer_migration(unknown[-1])
            pending = next((m for m in migrations if m.name not in applied), None)
            if pending is None:
                return None
            running = pending.name
            # No parameters: the file goes as one simple query, every statement of it in this transaction.
            await conn.execute(pending.sql.encode())
            await conn.execute(
                b"INSERT INTO schema_migrations (name, applied_at) VALUES (%s, %s)", (pending.name, time.time())
            )
    except psycopg.Error as exc:
        raise translate(exc, target, migrating=running or "schema_migrations") from exc
    log.info("applied migration %s in %.1f ms", running, (time.perf_counter() - started) * 1e3)
    return running
