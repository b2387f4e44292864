"""`companion move-to-postgres`: the SQLite file's normal rows into an empty PostgreSQL database in one transaction,
its private intervals left behind and then deleted from the file.

The steps (docs/operations.md says them for the operator):
1. the target's two advisory instance locks (the caller holds the file's two locks); a target holding any row of
   the companion's tables is refused, unless it holds this file's own move (the marker: step 4 is finished then);
2. the file read in one read transaction (one WAL snapshot), row by row: no copy of it in memory;
3. one PostgreSQL transaction: the migrations, then every table by `MOVE_PLAN` in foreign-key order by COPY, the
   identities set past the file's ids, the counts compared, the marker written; COMMIT;
4. every segment deleted from the file (the cascades take every private row; secure_delete; the WAL emptied): the
   private intervals end at the move, rather than stay in a file nobody sweeps any more.
Killed or failing before the COMMIT, PostgreSQL rolls back whole and the file is as it was; after it, a second run
finds the marker, checks that the file still holds exactly what was moved, and finishes step 4.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.storage.backup import private_rows_left
from adapters.storage.migrate import known_migrations as sqlite_migrations
from adapters.storage.postgres.errors import PostgresUrl, extra_missing, parse_url, translate
from adapters.storage.postgres.instance import KEYS, AdvisoryInstanceLock
from adapters.storage.postgres.migrate import migrate
from adapters.storage.privacy import CHECKPOINT_OWED
from core.values.errors import MigrationError, StoreError

if TYPE_CHECKING:
    from psycopg import AsyncConnection

log = logging.getLogger(__name__)

# The target's adapter_state row saying which file's rows it holds: the digest of every row moved, in order.
MARKER = "store:moved_from"
APPLICATION = "companion move-to-postgres"
# A test stops the command here (`after:<table>`, `in:<table>` after that table's first row, `commit`) until a
# line arrives on stdin, to kill it or its connection at that point (tests/bot/test_move_to_postgres.py).
PAUSE_ENV = "COMPANION_TEST_MOVE_PAUSE"
BATCH = 1000
CHECKPOINT_TRIES = 50


@dataclass(frozen=True, slots=True)
class Copy:
    """Copy the table's rows (those matching `where`, SQLite's SQL, when given) with the columns it has.
    `replace`: earlier tables' triggers write rows of it on PostgreSQL; they are deleted and the file's copied
    after every other table, so the target holds the file's rows as they are."""

    where: str | None = None
    replace: bool = False


@dataclass(frozen=True, slots=True)
class Skip:
    """Not copied, and why."""

    why: str


Plan = Copy | Skip

PRIVATE = Skip("private: the intervals live on SQLite are left behind (PRIVACY.md)")
NORMAL = "segment_id IS NULL"
DERIVED = Skip("derived: PostgreSQL's triggers fill recall_index from the rows copied")

# Every table of either schema has an entry (tests/bot/test_move_to_postgres.py fails for one without): a table a
# later migration adds is copied or left behind by a decision, never by default.
MOVE_PLAN: dict[str, Plan] = {
    "people": Copy(),
    "accounts": Copy(),
    "conversations": Copy(),
    "segments": PRIVATE,
    "crossings": PRIVATE,
    "messages": Copy(NORMAL),
    "summaries": Copy(NORMAL),
    "pad_entries": Copy(NORMAL),
    "valve_attempts": Copy(),
    # The checkpoint a deletion owes is the file's own WAL's; the marker is the target's.
    "adapter_state": Copy(f"name NOT IN ('{CHECKPOINT_OWED}', '{MARKER}')"),
    "notes": Copy(),
    "note_sources": Copy("message_id IN (SELECT id FROM messages WHERE segment_id IS NULL)"),
    "goals": Copy(),
    "followups": Copy(),
    "tool_operations": Copy(NORMAL),
    "agent_runs": Copy(),
    "agent_events": Copy(),
    "artifacts": Copy(),
    "bindings": Copy(),
    # A retraction (0014) names no interval and carries none of its words: copied, the gateway on PostgreSQL
    # still withdraws what the ended interval showed.
    "deliveries": Copy(NORMAL),
    "proactive_people": Copy(replace=True),
    "proactive_decisions": Copy(NORMAL),
    "link_codes": Copy(),
    "link_attempts": Copy(),
    "web_login_codes": Skip("sign-in credentials: sign in again on the new store"),
    "web_sessions": Skip("sign-in credentials: sign in again on the new store"),
    "health_probe": Copy(),
    # Processes and their claims describe who serves now, not the conversations: the new store has its own.
    "gateway_processes": Skip("the processes of a shared database register at their start"),
    "chat_claims": Skip("claims are taken again by the processes serving the new store"),
    "job_runs": Skip("the scheduled runs of the processes of a shared database"),
    # An update waiting in the file's inbox refuses the move (`_refuse_waiting_updates`); a handled one's tombstone
    # is not needed: a late redelivery finds its message copied (the inbox key makes it a no-op).
    "webhook_inbox": Skip("the webhook's updates are answered on the file before a move; their tombstones stay"),
    "recall_fts": DERIVED,
    "recall_index": DERIVED,
    "schema_migrations": Skip("each engine's own: PostgreSQL's migrations are applied first"),
}


@dataclass(slots=True)
class MoveResult:
    target: str  # where: host:port/database
    setting: str  # the line to set: COMPANION_DATABASE_URL=<the URL, its password masked>
    moved: dict[str, int] = field(default_factory=dict)  # table -> rows copied
    intervals_left: int = 0  # private intervals deleted from the file
    resumed: bool = False  # the copy was committed by an earlier run; only step 4 ran now

    @property
    def rows(self) -> int:
        return sum(self.moved.values())


# --- the source ------------------------------------------------------------------------------------------


def source_tables(db: sqlite3.Connection) -> list[str]:
    """The file's tables: not SQLite's own, nor the shadow tables of a virtual table (FTS5 keeps its index in them)."""
    rows = db.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
    )
    found = [(str(name), str(sql or "")) for name, sql in rows]
    virtual = [name for name, sql in found if sql.upper().startswith("CREATE VIRTUAL TABLE")]
    return sorted(name for name, _ in found if not any(name.startswith(f"{v}_") for v in virtual))


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [str(row[1]) for row in db.execute(f'PRAGMA table_info("{table}")')]


def _fk_order(db: sqlite3.Connection, tables: list[str]) -> list[str]:
    """`tables` with every table after those its foreign keys name (the file's schema says which)."""
    wanted = set(tables)
    parents = {t: {str(r[2]) for r in db.execute(f'PRAGMA foreign_key_list("{t}")')} & wanted - {t} for t in tables}
    ordered: list[str] = []
    while len(ordered) < len(tables):
        ready = [t for t in tables if t not in ordered and parents[t] <= set(ordered)]
        if not ready:
            raise StoreError(f"the tables {sorted(wanted - set(ordered))} name each other; no order to copy them in")
        ordered.extend(ready)
    return ordered


@dataclass(frozen=True, slots=True)
class TableStep:
    table: str
    columns: list[str]
    where: str | None
    replace: bool

    def select(self) -> str:
        cols = ", ".join(f'"{c}"' for c in self.columns)
        where = f" WHERE {self.where}" if self.where else ""
        return f'SELECT {cols} FROM "{self.table}"{where} ORDER BY rowid'

    def count(self) -> str:
        where = f" WHERE {self.where}" if self.where else ""
        return f'SELECT count(*) FROM "{self.table}"{where}'


def plan_steps(db: sqlite3.Connection) -> list[TableStep]:
    """The copies, in the order they run.

    Raises:
        StoreError: a table of the file has no entry in MOVE_PLAN (nothing is copied by default).
    """
    tables = source_tables(db)
    missing = [t for t in tables if t not in MOVE_PLAN]
    if missing:
        raise StoreError(f"MOVE_PLAN has no entry for the table {missing[0]}: nothing was moved")
    copies = {t: plan for t in tables if isinstance(plan := MOVE_PLAN[t], Copy)}
    ordered = _fk_order(db, list(copies))
    last = [t for t in ordered if copies[t].replace]
    return [
        TableStep(t, _columns(db, t), copies[t].where, copies[t].replace)
        for t in [*(t for t in ordered if t not in last), *last]
    ]


def _rows(db: sqlite3.Connection, step: TableStep) -> Iterator[tuple[Any, ...]]:
    cursor = db.execute(step.select())
    while batch := cursor.fetchmany(BATCH):
        yield from batch


class Digest:
    """What the file holds for the move, row by row in the copy's order: equal digests, equal rows."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def table(self, step: TableStep) -> None:
        self._hash.update(repr((step.table, step.columns)).encode())

    def row(self, row: tuple[Any, ...]) -> None:
        self._hash.update(repr(row).encode())

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


async def open_source(path: Path) -> sqlite3.Connection:
    """The file for reading, brought to this code's schema first when it is older (as `companion run` would).

    Raises:
        StoreError: no database there, or not a companion database; MigrationError: a newer companion wrote it.
    """
    if _older_than_this_code(path):
        from adapters.storage.database import Database

        database = Database(path)
        await database.start()
        await database.aclose()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA query_only = ON")
    db.execute("PRAGMA busy_timeout = 5000")
    return db


def _older_than_this_code(path: Path) -> bool:
    """Whether the file misses a migration this code ships (see `open_source`)."""
    if not path.is_file():
        raise StoreError(f"there is no database at {path} to move (COMPANION_DB_PATH)")
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        try:
            applied = {str(r[0]) for r in db.execute("SELECT name FROM schema_migrations")}
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path} is not a companion database ({exc})") from exc
    known = {m.name for m in sqlite_migrations()}
    if applied - known:
        raise MigrationError(
            f"{path} was written by a newer companion (migration {sorted(applied - known)[-1]}); upgrade first"
        )
    return bool(known - applied)


def _refuse_waiting_updates(source: sqlite3.Connection) -> None:
    """A webhook update stored (Telegram got its 200) but not yet handled would be lost by the move: refused."""
    if "webhook_inbox" not in source_tables(source):
        return
    (waiting,) = source.execute("SELECT count(*) FROM webhook_inbox WHERE handled_at IS NULL").fetchone()
    if waiting:
        raise StoreError(
            f"{waiting} Telegram updates wait in the file's webhook inbox: start the companion on the file once to "
            "answer them, stop it, then move; nothing was moved"
        )


def _end_read(source: sqlite3.Connection) -> None:
    """End the read transaction; on a failure's way out, its own failure must not hide the first."""
    with contextlib.suppress(sqlite3.Error):
        source.execute("COMMIT")


# --- the target ------------------------------------------------------------------------------------------


async def _table_columns(conn: AsyncConnection[Any], table: str) -> set[str]:
    """The columns a COPY may name: not generated, not an identity GENERATED ALWAYS."""
    cursor = await conn.execute(
        b"SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        b" AND table_name = %s AND is_generated = 'NEVER' AND coalesce(identity_generation, '') <> 'ALWAYS'",
        (table,),
    )
    return {str(r[0]) for r in await cursor.fetchall()}


async def _target_tables(conn: AsyncConnection[Any]) -> list[str]:
    cursor = await conn.execute(
        b"SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        b" AND table_type = 'BASE TABLE' ORDER BY table_name"
    )
    return [str(r[0]) for r in await cursor.fetchall()]


async def _holding_rows(conn: AsyncConnection[Any]) -> list[str]:
    """The companion's tables on the target that hold a row (schema_migrations aside: an empty schema is empty)."""
    present = set(await _target_tables(conn))
    holding = []
    for table in sorted(present & (MOVE_PLAN.keys() - {"schema_migrations"})):
        cursor = await conn.execute(f'SELECT EXISTS (SELECT 1 FROM "{table}")'.encode())
        row = await cursor.fetchone()
        if row and row[0]:
            holding.append(table)
    return holding


async def _marker(conn: AsyncConnection[Any]) -> dict[str, Any] | None:
    if "adapter_state" not in await _target_tables(conn):
        return None
    cursor = await conn.execute(b"SELECT value FROM adapter_state WHERE name = %s", (MARKER,))
    row = await cursor.fetchone()
    return json.loads(str(row[0])) if row else None


# --- the move --------------------------------------------------------------------------------------------


async def move_to_postgres(path: Path, url: str) -> MoveResult:
    """Steps 1 to 4 of the module's docstring; the caller holds both of the file's instance locks.

    Raises:
        StoreError: in one line: a companion holds the target, the target is not empty, PostgreSQL failed (the
            copy rolled back: the file is as it was), the file cannot be read.
    """
    target = parse_url(url)
    try:
        import psycopg
    except ImportError as exc:
        raise extra_missing() from exc
    source = await open_source(path)
    locks = [AdvisoryInstanceLock(url, role, purpose="move-to-postgres") for role in KEYS]  # type: ignore[arg-type]
    try:
        for lock in locks:
            await lock.acquire()
        try:
            conn = await psycopg.AsyncConnection.connect(url, autocommit=True, application_name=APPLICATION)
        except psycopg.Error as exc:
            raise translate(exc, target) from exc
        try:
            result = await _copy_unless_moved(source, conn, target, path)
        finally:
            await conn.close()
    finally:
        source.close()
        for lock in reversed(locks):
            await lock.aclose()
    _pause("commit")
    result.intervals_left = end_private_intervals(path)
    return result


async def _copy_unless_moved(
    source: sqlite3.Connection, conn: AsyncConnection[Any], target: PostgresUrl, path: Path
) -> MoveResult:
    import psycopg

    result = MoveResult(target=f"{target.where}/{target.database}", setting=f"COMPANION_DATABASE_URL={target.masked}")
    try:
        marker = await _marker(conn)
        if marker is not None:
            if marker.get("digest") != _digest_only(source):
                raise StoreError(
                    f"{result.target} holds a move of another database, or of {path} before it changed since; "
                    "nothing was changed (move into an empty database)"
                )
            result.moved = {str(k): int(v) for k, v in marker.get("moved", {}).items()}
            result.resumed = True
            return result
        holding = await _holding_rows(conn)
        if holding:
            raise StoreError(
                f"{result.target} is not empty: {len(holding)} tables hold rows ({', '.join(holding)}); "
                "nothing was moved (name an empty database)"
            )
        result.moved = await _copy(source, conn, target, path)
    except psycopg.Error as exc:
        # Rolled back, or (the connection lost at the COMMIT) committed with its marker: a rerun settles either.
        raise StoreError(f"{translate(exc, target)}; the move did not complete: run it again") from exc
    return result


def _digest_only(source: sqlite3.Connection) -> str:
    digest = Digest()
    source.execute("BEGIN")
    try:
        for step in plan_steps(source):
            digest.table(step)
            for row in _rows(source, step):
                digest.row(row)
    finally:
        _end_read(source)
    return digest.hexdigest()


async def _copy(
    source: sqlite3.Connection, conn: AsyncConnection[Any], target: PostgresUrl, path: Path
) -> dict[str, int]:
    """Step 3 in one PostgreSQL transaction, reading the file in one read transaction; the rows copied per table."""
    moved: dict[str, int] = {}
    digest = Digest()
    source.execute("BEGIN")  # the snapshot starts at the first read and holds until the COMMIT below
    try:
        async with conn.transaction():
            await migrate(conn, target)
            steps = plan_steps(source)
            _refuse_waiting_updates(source)
            unplanned = [t for t in await _target_tables(conn) if t not in MOVE_PLAN]
            if unplanned:
                raise StoreError(f"MOVE_PLAN has no entry for the table {unplanned[0]}: nothing was moved")
            for step in steps:
                moved[step.table] = await _copy_table(source, conn, step, digest)
                _pause(f"after:{step.table}")
            await _set_identities(source, conn)
            await conn.execute(
                b"INSERT INTO adapter_state (name, value, updated_at) VALUES (%s, %s, %s)",
                (MARKER, json.dumps({"digest": digest.hexdigest(), "from": str(path), "moved": moved}), time.time()),
            )
    finally:
        _end_read(source)
    return moved


async def _copy_table(source: sqlite3.Connection, conn: AsyncConnection[Any], step: TableStep, digest: Digest) -> int:
    """COPY the table's rows; the rows sent, checked against the file's count and the target's.

    Raises:
        StoreError: a column the target does not have, or the counts differ.
    """
    known = await _table_columns(conn, step.table)
    unknown = [c for c in step.columns if c not in known]
    if unknown:
        raise StoreError(f"the column {step.table}.{unknown[0]} is not in PostgreSQL's schema: nothing was moved")
    if step.replace:  # rows earlier tables' triggers wrote: the file's own take their place
        await conn.execute(f'DELETE FROM "{step.table}"'.encode())
    digest.table(step)
    sent = 0
    cols = ", ".join(f'"{c}"' for c in step.columns)
    cursor = conn.cursor()
    async with cursor.copy(f'COPY "{step.table}" ({cols}) FROM STDIN'.encode()) as copy:
        for row in _rows(source, step):
            await copy.write_row(row)
            digest.row(row)
            sent += 1
            if sent == 1:
                _pause(f"in:{step.table}")
    (expected,) = source.execute(step.count()).fetchone()
    found = await (await conn.execute(f'SELECT count(*) FROM "{step.table}"'.encode())).fetchone()
    if not found or not sent == expected == found[0]:
        raise StoreError(
            f"{step.table}: {expected} rows to move, {sent} sent, {found[0] if found else '?'} arrived: nothing was moved"
        )
    log.info("moved %s: %d rows", step.table, sent)
    return sent


async def _set_identities(source: sqlite3.Connection, conn: AsyncConnection[Any]) -> None:
    """Every identity past the file's highest id, private rows' included: an id is never given twice, and the
    ids a summary's watermark or an anchor names keep their order."""
    cursor = await conn.execute(
        b"SELECT table_name FROM information_schema.columns WHERE table_schema = current_schema()"
        b" AND column_name = 'id' AND identity_generation = 'BY DEFAULT'"
    )
    identities = [str(r[0]) for r in await cursor.fetchall()]
    present = set(source_tables(source))
    autoincrement = source.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").fetchone()
    sequences = dict(source.execute("SELECT name, seq FROM sqlite_sequence").fetchall()) if autoincrement else {}
    for table in identities:
        highest = int(sequences.get(table) or 0)
        if table in present:
            (most,) = source.execute(f'SELECT coalesce(max(id), 0) FROM "{table}"').fetchone()
            highest = max(highest, int(most))
        if highest > 0:
            await conn.execute(b"SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", (table, highest))


# --- step 4 ----------------------------------------------------------------------------------------------


def end_private_intervals(path: Path) -> int:
    """Delete every segment from the file (every private row goes with it), overwrite the freed pages and empty
    the WAL; the number of intervals deleted.

    Raises:
        StoreError: the cascades did not run, or a reader kept the WAL from being emptied (run the move again).
    """
    db = sqlite3.connect(path, isolation_level=None, timeout=5)
    try:
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA secure_delete = ON")
        if db.execute("PRAGMA foreign_keys").fetchone()[0] != 1:
            raise StoreError("SQLite refused PRAGMA foreign_keys=ON; cannot delete the private rows by cascade")
        db.execute("BEGIN IMMEDIATE")
        deleted = db.execute("DELETE FROM segments").rowcount
        leftovers = private_rows_left(db)
        if leftovers:
            db.execute("ROLLBACK")
            raise StoreError(f"{leftovers} private rows did not cascade away from {path}; run the move again")
        db.execute("COMMIT")
        for _ in range(CHECKPOINT_TRIES):
            busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                break
            time.sleep(0.1)
        else:
            raise StoreError(f"a reader kept the WAL of {path} from being emptied; run the move again")
    finally:
        db.close()
    log.info("deleted %d private intervals from the file", deleted)
    return int(deleted)


def _pause(at: str) -> None:
    """The tests' stop (PAUSE_ENV): say where, then wait for a line on stdin."""
    if os.environ.get(PAUSE_ENV) != at:
        return
    print(f"paused at {at}", file=sys.stderr, flush=True)
    sys.stdin.readline()
