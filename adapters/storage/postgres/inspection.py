"""`companion doctor`'s look at a PostgreSQL database: one read-only transaction, names and counts only.

Nothing here writes or waits on a lock: the connection is read-only (`default_transaction_read_only`), runs no
migration and takes no advisory lock, so a running gateway is never blocked or disturbed; whether a gateway holds
the instance lock is read from `pg_locks`. Of private mode only the number of open intervals is read.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.storage.postgres.errors import PostgresUrl, extra_missing, parse_url, translate
from adapters.storage.postgres.instance import HOLDER, KEYS, holder_pid
from adapters.storage.postgres.migrate import known_migrations
from adapters.storage.postgres.processes import ALIVE
from core.values.errors import StoreError

if TYPE_CHECKING:
    from psycopg import AsyncConnection

CONNECT_SECONDS = 5
TABLE_RIGHTS = "SELECT, INSERT, UPDATE, DELETE"
# currval() (the engine's `Ref`) needs a right on the identity's sequence beyond INSERT on its table.
SEQUENCE_RIGHTS = "USAGE"


@dataclasses.dataclass(frozen=True, slots=True)
class PostgresFacts:
    """What `inspect_postgres` found. `problem`: why the database could not be read (one line, password masked)."""

    target: PostgresUrl
    version: str = ""
    applied: int = 0
    migrations_readable: bool = True  # False: the user may not read schema_migrations (its rights say more)
    pending: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    may_create: bool | None = None  # CREATE on schema public; asked only with migrations pending
    missing_rights: tuple[str, ...] = ()  # tables (and sequences) the user lacks a right on
    holders: dict[str, str] = dataclasses.field(default_factory=dict)  # role -> "(pid N)" of who holds its lock
    open_private_intervals: int = 0
    # A shared database's live processes (COMPANION_SHARED_DATABASE): (id, host, pid, conversations held).
    live_processes: tuple[tuple[int, str, int, int], ...] = ()
    interval_keys: tuple[str | None, ...] = ()  # the key id every interval names (None: none), not secret
    data_directory: Path | None = None  # the server's, when this user may read it
    problem: str | None = None


async def inspect_postgres(url: str) -> PostgresFacts:
    """Read-only facts about the database at `url` (reachable, version, migrations, rights, lock holders)."""
    target = parse_url(url)
    try:
        import psycopg
    except ImportError:
        return PostgresFacts(target, problem=str(extra_missing()))
    try:
        conn = await psycopg.AsyncConnection.connect(
            target.url,
            connect_timeout=CONNECT_SECONDS,
            application_name="companion doctor",
            options="-c default_transaction_read_only=on",
        )
    except psycopg.Error as exc:
        return PostgresFacts(target, problem=str(translate(exc, target)))
    try:
        async with conn.transaction():
            return await _facts(conn, target)
    except psycopg.Error as exc:
        return PostgresFacts(target, problem=str(translate(exc, target)))
    except StoreError as exc:
        return PostgresFacts(target, problem=str(exc))
    finally:
        await conn.close()


async def _facts(conn: AsyncConnection[Any], target: PostgresUrl) -> PostgresFacts:
    version = str(await _one(conn, "SHOW server_version")).split()[0]
    applied: list[str] = []
    exists = bool(await _one(conn, "SELECT to_regclass('schema_migrations') IS NOT NULL"))
    readable = not exists or bool(await _one(conn, "SELECT has_table_privilege('schema_migrations', 'SELECT')"))
    if exists and readable:
        applied = [str(row[0]) for row in await _all(conn, "SELECT name FROM schema_migrations ORDER BY name")]
    known = [m.name for m in known_migrations()]
    pending = tuple(name for name in known if name not in applied) if readable else ()
    unknown = tuple(sorted(set(applied) - set(known)))
    may_create = None
    if pending:
        may_create = bool(await _one(conn, "SELECT has_schema_privilege('public', 'CREATE')"))
    missing = [
        str(row[0])
        for row in await _all(
            conn,
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'"
            f" AND ((c.relkind = 'r' AND NOT has_table_privilege(c.oid, '{TABLE_RIGHTS}'))"
            f" OR (c.relkind = 'S' AND NOT has_sequence_privilege(c.oid, '{SEQUENCE_RIGHTS}'))) ORDER BY c.relname",
        )
    ]
    holders: dict[str, str] = {}
    for role, key in KEYS.items():
        rows = await _all(conn, HOLDER, {"key": key})
        if rows:
            holders[role] = holder_pid(rows[0])
    intervals, keys = 0, ()
    if await _one(conn, "SELECT to_regclass('segments') IS NOT NULL") and "segments" not in missing:
        intervals = int(str(await _one(conn, "SELECT count(*) FROM segments WHERE ended_at IS NULL") or 0))
        if await _one(
            conn,
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'segments' AND column_name = 'key_id'",
        ):
            keys = tuple(row[0] for row in await _all(conn, "SELECT key_id FROM segments ORDER BY id"))
    live: tuple[tuple[int, str, int, int], ...] = ()
    if await _one(conn, "SELECT to_regclass('gateway_processes') IS NOT NULL") and "gateway_processes" not in missing:
        live = tuple(
            (int(row[0]), str(row[1]), int(row[2]), int(row[3]))
            for row in await _all(
                conn,
                "SELECT p.id, p.host, p.pid, (SELECT count(*) FROM chat_claims c WHERE c.holder = p.id)"
                f" FROM gateway_processes p WHERE {ALIVE} ORDER BY p.id",
            )
        )
    # Readable by a superuser or pg_read_all_settings only; the view hides the row from others.
    found = await _all(conn, "SELECT setting FROM pg_settings WHERE name = 'data_directory'")
    data_directory = Path(str(found[0][0])) if found and found[0][0] else None
    return PostgresFacts(
        target,
        version=version,
        applied=len(applied),
        migrations_readable=readable,
        pending=pending,
        unknown=unknown,
        may_create=may_create,
        missing_rights=tuple(missing),
        holders=holders,
        open_private_intervals=intervals,
        live_processes=live,
        interval_keys=keys,
        data_directory=data_directory,
    )


async def _all(conn: AsyncConnection[Any], sql: str, params: dict[str, object] | None = None) -> list[Any]:
    cursor = await conn.execute(sql.encode(), params)
    return list(await cursor.fetchall())


async def _one(conn: AsyncConnection[Any], sql: str) -> object:
    rows = await _all(conn, sql)
    return rows[0][0] if rows else None
