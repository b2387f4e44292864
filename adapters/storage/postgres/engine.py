"""The PostgreSQL engine: psycopg 3's pool, every read and write one round trip in libpq's pipeline mode, driven
at the protocol level (`_Session`: the commands of a trip queued and sent in one flush, the engine's own prepared
statements).

A write is BEGIN, its statements and COMMIT sent together with one Sync: the server runs them in order (each
sees what the ones before it wrote, triggers included) and the client waits once. A failure anywhere aborts
the rest, and the transaction is rolled back whole (one more trip, on that path only). `Ref(i)` becomes
`currval(pg_get_serial_sequence('<table>', 'id'))`: the id statement i drew, in the same session and
transaction (never `lastval()`, which an insert by a trigger moves), with the session's sequence state
discarded first so that an insert which inserted nothing is an error, never another write's id.
Reads have a pool of their own, so that a read never waits for a connection behind the writes.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import re
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.storage.engine import POSTGRES, Counters, Fetch, Ref, Result, Statement
from adapters.storage.inbox import TransitKeys
from adapters.storage.intervals import bind_segments
from adapters.storage.keys import KeyDir, KeyDirError
from adapters.storage.postgres.errors import OLDEST_SERVER, PostgresUrl, extra_missing, parse_url, too_old, translate
from adapters.storage.postgres.instance import listen
from adapters.storage.postgres.migrate import migrate
from adapters.storage.sealing import IntervalKeys, Sealer, Unkeyed

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.abc import Buffer
    from psycopg.pq import Format
    from psycopg.pq.abc import PGconn, PGresult
    from psycopg_pool import AsyncConnectionPool

log = logging.getLogger(__name__)

POOL_SIZE = 8
# Reads have a pool of their own (as SQLite has its reader), so that a read never waits for a connection behind
# a write. As many as the writes: a read never has fewer connections to wait for than in one shared pool. Under
# 200 conversations at once a read still waits up to ~2 s for one, behind the other reads, whether 4, 8 or 24
# (docs/benchmarks.md): the busy event loop, not the number of connections, sets that wait.
READ_POOL_SIZE = POOL_SIZE
CONNECT_SECONDS = 10.0
POOL_WAIT_SECONDS = 10.0  # for a connection of a pool: as long as the valve's mode read may take
READ = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"  # several statements, one snapshot
# In a read of several statements (the context, the views), each prepared statement runs its generic plan: the
# server would plan the fold's count anew at every turn (150-190 µs of its CPU, a custom plan each time, the
# generic one no slower to run; pg_stat_statements, docs/benchmarks.md).
GENERIC_PLANS = "SET LOCAL plan_cache_mode = force_generic_plan"
# A parameter `:name` outside string literals, quoted names and comments; `::` is left alone.
_TOKENS = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|::|:([A-Za-z_][A-Za-z0-9_]*)""")
_TABLE = re.compile(r"^[a-z_][a-z0-9_]*$")

Rendered = tuple[bytes, list[object]]  # the SQL with `$n` placeholders, and their values in order


class PostgresDatabase:
    """The store's `Database` (adapters/storage/engine.py) on PostgreSQL: a pool of `pool_size` connections for
    the writes and one of `read_pool_size` for the reads, opened by `start` after the migrations ran on a
    connection of their own.

    PostgreSQL never ships without sealing: with `key_dir` every private word is sealed under its interval's
    key (`IntervalKeys` over `KeyDir(key_dir)`) before it is sent; without one the store still starts (the
    migrator, doctor, normal mode and the tools work) but refuses every private write: no interval opens,
    no private word is written (`Unkeyed`), and the schema's CHECKs refuse plain text in a private row."""

    dialect = POSTGRES

    def __init__(
        self,
        url: str,
        *,
        key_dir: Path | None = None,
        pool_size: int = POOL_SIZE,
        read_pool_size: int = READ_POOL_SIZE,
        prepare_threshold: int | None = 5,
        process_id: int | None = None,
    ) -> None:
        self.target: PostgresUrl = parse_url(url)
        # A process of a shared database (COMPANION_SHARED_DATABASE): every connection of the pools names it
        # (companion.process), and the schema's fence refuses its writes into a conversation another holds.
        self.process_id = process_id
        # COMPANION_KEY_DIR: where the private intervals' keys live (adapters/storage/keys.py), never in the database.
        self.key_dir = key_dir
        self.keys = None if key_dir is None else KeyDir(key_dir)
        # The webhook inbox's transit keys (adapters/storage/inbox.py), in a folder of their own inside it.
        self.transit = None if key_dir is None else TransitKeys(KeyDir(key_dir / "transit"))
        self.sealer: Sealer = Unkeyed()
        self._no_cryptography = False
        if self.keys is not None:
            try:
                self.sealer = IntervalKeys(self.keys)
            except ImportError:  # `start` says which extra to install, as for psycopg
                self._no_cryptography = True
        self.counters = Counters()
        self._pool_size = pool_size
        self._read_pool_size = read_pool_size
        # None behind PgBouncer in transaction mode, which cannot keep a prepared statement on one server.
        self._prepare_threshold = prepare_threshold
        self._pool: AsyncConnectionPool[Any] | None = None  # the writes' (and `tx`'s)
        self._reads: AsyncConnectionPool[Any] | None = None

    def _session(self) -> dict[str, str]:
        """The connection options naming this process to the fence (none: not a shared database's process)."""
        return {} if self.process_id is None else {"options": f"-c companion.process={int(self.process_id)}"}

    def listen(self, channel: str, name: str) -> AsyncIterator[None]:
        """An item per NOTIFY on `channel`, from a connection of its own named `name` (the webhook inbox's wake-up
        across processes: adapters/storage/inbox.py `arrivals`)."""
        return listen(self.target, channel, name)

    @property
    def engine(self) -> PostgresDatabase:
        """The engine interface itself (SQLite's `Database` keeps its engine beside its connections)."""
        return self

    # --- lifecycle ----------------------------------------------------------

    async def start(self) -> list[str]:
        """Reach the server, check its version, apply the migrations, open the pool; return the migrations applied
        now. Safe to call twice.

        Raises:
            StoreError: in one line: the driver missing, the server unreachable, the password refused, the database
                missing, the server too old, the key folder unusable (KeyDirError); MigrationError: the schema
                cannot be brought to this version.
        """
        if self._pool is not None:
            return []
        if self._no_cryptography:
            raise extra_missing()
        if self.keys is not None:  # a folder others may read, or not ours, refuses the start in one line
            try:
                await asyncio.to_thread(self.keys.ensure)
                if self.transit is not None:
                    await asyncio.to_thread(self.transit.keys.ensure)
            except OSError as exc:
                raise KeyDirError(
                    f"COMPANION_KEY_DIR: {self.keys.path} cannot be created ({type(exc).__name__})"
                ) from exc
        try:
            import psycopg
            from psycopg_pool import AsyncConnectionPool
        except ImportError as exc:
            raise extra_missing() from exc
        url = self.target.url
        try:
            first = await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=int(CONNECT_SECONDS))
        except psycopg.Error as exc:
            raise translate(exc, self.target) from exc
        try:
            if first.info.server_version < OLDEST_SERVER:
                raise too_old(first.info.server_version, self.target, OLDEST_SERVER)
            applied = await migrate(first, self.target)
        finally:
            await first.close()
        pools: list[AsyncConnectionPool[Any]] = [
            AsyncConnectionPool(
                url,
                min_size=1,
                max_size=size,
                open=False,
                name=name,
                connection_class=_connection_class(),
                # psycopg prepares nothing: the engine prepares its statements itself (`_Session`).
                kwargs={"autocommit": True, "prepare_threshold": None, **self._session()},
            )
            for name, size in (("companion", self._pool_size), ("companion-reads", self._read_pool_size))
        ]
        try:
            for pool in pools:
                await pool.open(wait=True, timeout=CONNECT_SECONDS)
        except Exception as exc:
            for pool in pools:
                await pool.close()
            try:
                await (await psycopg.AsyncConnection.connect(url, connect_timeout=int(CONNECT_SECONDS))).close()
            except psycopg.Error as cause:
                raise translate(cause, self.target) from cause
            raise translate(exc, self.target) from exc
        self._pool, self._reads = pools
        await bind_segments(self)
        return applied

    async def aclose(self) -> None:
        pools, self._pool, self._reads = (self._pool, self._reads), None, None
        for pool in pools:
            if pool is not None:
                await pool.close()

    def _connections(self, *, reads: bool = False) -> AsyncConnectionPool[Any]:
        """The writes' pool, or the reads' own."""
        pool = self._reads if reads else self._pool
        if pool is None:
            from core.values.errors import StoreError

            raise StoreError("the store is not started")
        return pool

    async def _take(self, *, reads: bool = False) -> tuple[AsyncConnectionPool[Any], AsyncConnection[Any]]:
        """A connection of the writes' pool (or the reads'), waited for at most `POOL_WAIT_SECONDS`, and its pool
        to put it back into: a server gone (or every connection busy that long) is one StoreError line, not the
        pool's own 30 s and error."""
        import psycopg

        pool = self._connections(reads=reads)
        try:
            conn = await pool.getconn(timeout=POOL_WAIT_SECONDS)
        except psycopg.Error as exc:  # psycopg_pool.PoolTimeout
            raise translate(exc, self.target) from exc
        return pool, conn

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        """A connection of the writes' pool, as `_take` gives it, put back when the block ends."""
        pool, conn = await self._take()
        try:
            yield conn
        finally:
            await pool.putconn(conn)

    # --- one trip each ------------------------------------------------------

    async def read(self, *statements: Statement) -> list[Result]:
        """One trip, one snapshot (a repeatable-read, read-only transaction when there are several)."""
        rendered = render_all(statements)
        pool, conn = await self._take(reads=True)
        try:  # not through contextlib's context manager: 3 µs of the loop's CPU a trip
            if len(rendered) == 1:
                return await self._run(conn, (), rendered, statements, ())
            return await self._run(conn, (READ, GENERIC_PLANS), rendered, statements, ("COMMIT",))
        finally:
            await pool.putconn(conn)

    async def write(self, *statements: Statement, durable: bool = True) -> list[Result]:
        """One trip: BEGIN, the statements, COMMIT; rolled back whole when any of them fails."""
        rendered = render_all(statements)
        pool, conn = await self._take()
        try:
            results = await self._run(conn, _begin(durable, statements, begun=False), rendered, statements, ("COMMIT",))
        finally:
            await pool.putconn(conn)
        self._committed(durable)
        return results

    @asynccontextmanager
    async def tx(self, *, durable: bool = True) -> AsyncIterator[PostgresTx]:
        """A write transaction over several trips (each `run` one), committed in one more when the block ends."""
        async with self._connection() as conn:
            tx = PostgresTx(self, conn, durable)
            try:
                yield tx
            except BaseException:
                if tx.begun:
                    await self._rollback(conn)
                raise
            if tx.begun:
                await self._run(conn, (), [], (), ("COMMIT",))
                self._committed(durable)

    # --- the pipeline -------------------------------------------------------

    async def _run(
        self,
        conn: AsyncConnection[Any],
        before: Sequence[str],
        rendered: Sequence[Rendered],
        statements: Sequence[Statement],
        after: Sequence[str],
    ) -> list[Result]:
        """`before`, the statements and `after` in one pipeline: one Sync, one wait for the answers."""
        import psycopg

        self.counters.trips += 1
        self.counters.statements += len(rendered)
        session = self._session_of(conn)
        try:
            answers = await session.pipeline(before, rendered, after)
        except psycopg.Error as exc:
            await self._rollback(conn)
            if conn.broken:
                await self._drop_lost_connections()
            raise translate(exc, self.target) from exc
        return [session.result(answer, statement.fetch) for answer, statement in zip(answers, statements, strict=True)]

    def _session_of(self, conn: AsyncConnection[Any]) -> _Session:
        """What this engine keeps of a pooled connection (its statements prepared), made at its first trip and kept
        on the connection itself: it goes when the pool drops the connection."""
        session: _Session | None = getattr(conn, "companion_session", None)
        if session is None:
            session = _Session(conn, self._prepare_threshold)
            conn.companion_session = session  # type: ignore[attr-defined]
        return session

    async def _rollback(self, conn: AsyncConnection[Any]) -> None:
        """After a failed pipeline the transaction is aborted and waits for its ROLLBACK; a broken connection is
        the pool's to throw away."""
        import psycopg
        from psycopg.pq import TransactionStatus

        if conn.closed or conn.info.transaction_status == TransactionStatus.IDLE:
            return
        self.counters.trips += 1
        try:  # through the engine's own pipeline: psycopg, seeing a ROLLBACK, would deallocate every statement
            await self._session_of(conn).pipeline(("ROLLBACK",), (), ())
        except psycopg.Error:
            log.warning("a rollback failed; the pool drops the connection")

    async def _drop_lost_connections(self) -> None:
        """A connection lost (the server restarted, most likely) took the idle ones of both pools with it: each
        is tried now and replaced when lost, so that one operation fails for it, not one for each stale one."""
        for pool in (self._pool, self._reads):
            if pool is not None:
                await pool.check()

    def _committed(self, durable: bool) -> None:
        self.counters.commits += 1
        self.counters.fsynced_commits += int(durable)


@functools.cache
def _connection_class() -> type[AsyncConnection[Any]]:
    """The pools' connections: psycopg's, with room for the engine's `_Session` of each."""
    from psycopg import AsyncConnection

    class SessionConnection(AsyncConnection[Any]):
        companion_session: _Session | None = None

    return SessionConnection


class PostgresTx:
    """The transaction of `PostgresDatabase.tx`; BEGIN goes with the first `run`'s statements."""

    def __init__(self, database: PostgresDatabase, conn: AsyncConnection[Any], durable: bool) -> None:
        self._database = database
        self._conn = conn
        self._durable = durable
        self.begun = False

    async def run(self, *statements: Statement) -> list[Result]:
        """The statements in one trip, inside the transaction (a `Ref` names a statement of this same call)."""
        before = _begin(self._durable, statements, begun=self.begun)
        self.begun = True
        return await self._database._run(self._conn, before, render_all(statements), statements, ())


def _begin(durable: bool, statements: Sequence[Statement], *, begun: bool) -> tuple[str, ...]:
    """What goes before the statements: BEGIN (once) and its settings, and DISCARD SEQUENCES for Refs."""
    begin = []
    if not begun:
        begin.append("BEGIN")
        if not durable:  # the commit does not wait for the WAL flush: this transaction only
            begin.append("SET LOCAL synchronous_commit = off")
    if any(isinstance(v, Ref) for s in statements for v in s.params.values()):
        # currval() of an earlier transaction on this pooled connection must not stand in for an insert that
        # inserted nothing: forget every currval, so such a Ref fails the write instead.
        begin.append("DISCARD SEQUENCES")
    return tuple(begin)


# Statements prepared a connection at most (psycopg keeps 100): past it, new ones run unprepared.
PREPARED_MAX = 200
_SEEN_MAX = 1_000  # statements counted towards the threshold, per connection, before the count starts again
# libpq's codes (psycopg.pq.ExecStatus, psycopg.waiting), as ints: an enum's member is looked up at each use.
_FATAL_ERROR = 7
_PIPELINE_SYNC = 10
_PIPELINE_ABORTED = 11
_WAIT_R = 1  # a generator of psycopg's waits for the socket to be readable (Wait.R), and is told it is (Ready.R)

Key = tuple[bytes, tuple[int, ...]]  # a statement as the server knows it: its SQL and its parameters' types


class _Session:
    """One pooled connection as the engine drives it: libpq's pipeline at the protocol level, every command of a
    trip queued before the one Sync and sent in one flush, the answers read after it. Through psycopg's cursors each
    statement was a cursor, a Transformer, a flush and a poll of the socket (15-20 µs of the loop's CPU); this
    sends once a trip.

    A statement seen `prepare_threshold` times on the connection is prepared there (its Parse queued in the same
    pipeline, before its first Execute) and named thereafter, as psycopg does; None: never (PgBouncer's
    transaction mode). A name counts as prepared only once the server answered its Parse."""

    def __init__(self, conn: AsyncConnection[Any], prepare_threshold: int | None) -> None:
        from psycopg import errors, generators, waiting
        from psycopg.adapt import PyFormat, Transformer
        from psycopg.pq import Format

        self._conn = conn
        self._generators = generators
        self._tx = Transformer(conn)
        self._auto = PyFormat.AUTO
        self._text = Format.TEXT
        self._errors = errors
        self._waiting = waiting
        self._threshold = prepare_threshold
        self._prepared: dict[Key, bytes] = {}
        self._seen: dict[Key, int] = {}
        self._names = itertools.count()

    async def pipeline(
        self, before: Sequence[str], rendered: Sequence[Rendered], after: Sequence[str]
    ) -> list[PGresult]:
        """Send `before`, the statements and `after`, then one Sync; return each statement's answer.

        Raises:
            psycopg.Error: the first command the server refused (the rest of the trip was skipped), or the
                connection lost. Interrupted in between (a cancelled wait), the connection is closed: its pipeline
                holds answers no one will read, and the pool throws a closed connection away.
        """
        pgconn = self._conn.pgconn
        tx, auto = self._tx, self._auto
        # Every value made ready before anything is queued: a value that cannot be sent queues nothing. BEGIN,
        # COMMIT and the settings are commands like the statements (prepared as they are: a trip's BEGIN and COMMIT
        # unnamed took 40-50 µs longer on the clock), their answers only checked.
        queued: list[tuple[bytes, Sequence[Buffer | None] | None, tuple[int, ...], list[Format] | None, bool]] = [
            (_command(command), None, (), None, False) for command in before
        ]
        for sql, params in rendered:
            if params:
                dumped = tx.dump_sequence(params, [auto] * len(params))
                queued.append((sql, dumped, tuple(tx.types or ()), list(tx.formats or ()), True))
            else:
                queued.append((sql, None, (), None, True))
        queued += [(_command(command), None, (), None, False) for command in after]
        # What each answer is for: a key a Parse, True a statement's Execute, False a command's.
        expect: list[Key | bool] = []
        naming: dict[Key, bytes] = {}  # Parses queued in this trip
        prepared, text = self._prepared, self._text
        pgconn.enter_pipeline_mode()
        try:
            for sql, values, types, formats, answered in queued:
                key = (sql, types)
                name = prepared.get(key) or naming.get(key)
                if name is None and self._due(key):
                    name = naming[key] = b"companion_%d" % next(self._names)
                    pgconn.send_prepare(name, sql, param_types=types)
                    expect.append(key)
                if name is None:
                    pgconn.send_query_params(sql, values, param_types=types, param_formats=formats, result_format=text)
                else:
                    pgconn.send_query_prepared(name, values, param_formats=formats, result_format=text)
                expect.append(answered)
            pgconn.pipeline_sync()
            fetched = await self._wait(self._exchange(pgconn), pgconn.socket)
            pgconn.exit_pipeline_mode()
        except BaseException:
            from psycopg.pq import PipelineStatus

            if not self._conn.broken and pgconn.pipeline_status != PipelineStatus.OFF:
                await self._conn.close()
            raise
        refused: Exception | None = None
        answers: list[PGresult] = []
        for what, results in zip(expect, fetched, strict=True):
            for result in results:
                status = result.status
                if status == _FATAL_ERROR:
                    refused = refused or self._errors.error_from_result(result, encoding=self._conn.info.encoding)
                elif status == _PIPELINE_ABORTED:
                    pass
                elif isinstance(what, tuple):  # its Parse answered: the name holds on this connection
                    prepared[what] = naming[what]
            if what is True:
                answers.append(results[0])
        if refused is not None:
            raise refused
        return answers

    async def _wait(self, exchange: Generator[Any, Any, list[list[PGresult]]], fd: int) -> list[list[PGresult]]:
        """Drive the trip's generator until it returns. Its answers (the query flushed whole by the Sync, as it
        nearly always is) are read by the loop itself, in `_Answers`; any other wait (the query not flushed whole)
        is psycopg's."""
        try:
            wait = next(exchange)
            while wait == _WAIT_R:
                answers = _Answers(exchange, asyncio.get_running_loop(), fd)
                try:
                    finished, wait = await answers.future
                finally:
                    answers.stop()
                if finished:
                    fetched: list[list[PGresult]] = wait
                    return fetched
        except StopIteration as done:
            answered: list[list[PGresult]] = done.value
            return answered
        except OSError as exc:  # the socket closed under the wait, as psycopg's wait says it
            raise self._errors.OperationalError("connection socket closed") from exc
        return await self._waiting.wait_async(_resumed(wait, exchange), fd, interval=WAIT_INTERVAL)

    def _exchange(self, pgconn: PGconn) -> Generator[Any, Any, list[list[PGresult]]]:
        """psycopg's generator of a trip: flush what was queued, then read every command's answers up to the Sync."""
        send, fetch_many = self._generators.send, self._generators.fetch_many
        yield from send(pgconn)
        fetched: list[list[PGresult]] = []
        while True:
            results = yield from fetch_many(pgconn)
            if results and results[0].status == _PIPELINE_SYNC:
                return fetched
            fetched.append(results)

    def _due(self, key: Key) -> bool:
        """Whether the statement is prepared now: seen often enough, with room for it."""
        if self._threshold is None or len(self._prepared) >= PREPARED_MAX:
            return False
        seen = self._seen.get(key, 0)
        if seen >= self._threshold:
            self._seen.pop(key, None)
            return True
        if len(self._seen) >= _SEEN_MAX:
            self._seen.clear()
        self._seen[key] = seen + 1
        return False

    def result(self, answer: PGresult, fetch: Fetch) -> Result:
        """A statement's answer as the engine's Result (rows as dicts, text format as psycopg's cursors read it)."""
        rows: Sequence[dict[str, Any]] = ()
        if fetch is Fetch.ONE or fetch is Fetch.ALL:
            count = answer.ntuples if fetch is Fetch.ALL else min(answer.ntuples, 1)
            if count:
                tx = self._tx
                tx.set_pgresult(answer)
                rows = _rows_of(tuple(map(answer.fname, range(answer.nfields))))(tx.load_rows(0, count, tuple))
        tuples = answer.command_tuples
        return Result(rows=rows, rowcount=answer.ntuples if answer.nfields else (-1 if tuples is None else tuples))


# How often psycopg's own wait (a query not flushed whole at once) wakes up to look again, when the socket said nothing.
WAIT_INTERVAL = 0.1


class _Answers:
    """A trip's answers read as they arrive, by the loop: each time the socket is readable it hands the bytes to
    libpq and parses what came (`exchange`, psycopg's generator) in the reader's callback, and only the last one
    wakes the trip (`future`: what the generator returned, or its error). A large answer comes in 8 kB pieces
    (160 messages of 300 characters are 4 of them, of 1,000 characters 11), and the trip's task was woken, and the
    socket given to the selector and taken back again, for each: 80 rows of 600 characters took 210 µs of the
    loop's CPU that way, 157 µs this."""

    __slots__ = ("_exchange", "_fd", "_loop", "future", "reading")

    def __init__(self, exchange: Generator[Any, Any, Any], loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self._exchange = exchange
        self._loop = loop
        self._fd = fd
        self.future: asyncio.Future[Any] = loop.create_future()
        loop.add_reader(fd, self._readable)
        self.reading = True

    def _readable(self) -> None:
        future = self.future
        if future.done():  # the trip cancelled in this same round of the loop, before its reader was called
            return
        try:
            wait = self._exchange.send(_WAIT_R)
        except StopIteration as done:  # every answer read
            self.stop()
            future.set_result((True, done.value))
        except Exception as exc:  # noqa: BLE001 - the trip raises it (a server's refusal is an answer, not this)
            self.stop()
            future.set_exception(exc)
        else:
            if wait != _WAIT_R:  # a wait of another kind: the trip's own to make
                self.stop()
                future.set_result((False, wait))

    def stop(self) -> None:
        if self.reading:
            self.reading = False
            self._loop.remove_reader(self._fd)


def _resumed(wait: Any, exchange: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
    """`exchange` waiting for `wait`, as a generator psycopg's `wait_async` can take over."""
    ready = yield wait
    while True:
        try:
            wait = exchange.send(ready)
        except StopIteration as done:
            return done.value
        ready = yield wait


@functools.lru_cache(maxsize=64)
def _command(command: str) -> bytes:
    return command.encode()


@functools.lru_cache(maxsize=1024)
def _rows_of(fields: tuple[bytes | None, ...]) -> Callable[[list[tuple[Any, ...]]], list[dict[str, Any]]]:
    """What makes the dicts of an answer's rows, from its column names: a dict display of the names, compiled
    once (3x faster than dict(zip()) for each row: 80 rows of the context read took 38 µs that way, 9 µs this).
    A name is written as its repr(), a string literal whatever the name holds; a name given twice keeps its last
    column, as dict(zip()) did."""
    names = [(field or b"").decode() for field in fields]
    body = ", ".join(f"{name!r}: row[{i}]" for i, name in enumerate(names))
    maker: Callable[[list[tuple[Any, ...]]], list[dict[str, Any]]] = eval(  # noqa: S307 - literals of repr() only
        f"lambda rows: [{{{body}}} for row in rows]", {"__builtins__": {}}
    )
    return maker


# --- SQL: named parameters and Refs -------------------------------------------


def render_all(statements: Sequence[Statement]) -> list[Rendered]:
    return [render(statement, index, statements) for index, statement in enumerate(statements)]


def render(statement: Statement, index: int, statements: Sequence[Statement]) -> Rendered:
    """`:name` as libpq's `$n` (the same name the same `$n`), with the values in that order; a `Ref` value as the
    SQL of the id it names.

    Raises:
        ValueError: a parameter without a value, or a `Ref` that does not name an earlier insert of its table.
    """
    sql, order = _positional(statement.sql, ())
    given = statement.params
    try:
        values = [given[name] for name in order]
    except KeyError as missing:
        raise ValueError(f"statement {index} uses :{missing.args[0]} but gives no value for it") from None
    for value in values:
        if isinstance(value, Ref):
            refs = tuple(
                (name, _ref_sql(ref, index, statements))
                for name, ref in zip(order, values, strict=True)
                if isinstance(ref, Ref)
            )
            sql, order = _positional(statement.sql, refs)
            return sql, [given[name] for name in order]
    return sql, values


@functools.lru_cache(maxsize=2048)
def _positional(sql: str, refs: tuple[tuple[str, str], ...]) -> tuple[bytes, tuple[str, ...]]:
    """The SQL with every `:name` as its `$n` (or as the SQL `refs` gives for it), encoded, and the names of the
    `$n` in their order."""
    chunks, names = _split(sql)
    instead = dict(refs)
    parts = [chunks[0]]
    numbers: dict[str, int] = {}
    for name, chunk in zip(names, chunks[1:], strict=True):
        parts += (instead[name] if name in instead else f"${numbers.setdefault(name, len(numbers) + 1)}", chunk)
    return "".join(parts).encode(), tuple(numbers)


@functools.lru_cache(maxsize=2048)
def _split(sql: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The SQL around each `:name`, and the names, in order."""
    chunks: list[str] = []
    names: list[str] = []
    last = 0
    for match in _TOKENS.finditer(sql):
        if match.group(1) is None:
            continue
        chunks.append(sql[last : match.start()])
        names.append(match.group(1))
        last = match.end()
    chunks.append(sql[last:])
    return tuple(chunks), tuple(names)


def _ref_sql(ref: Ref, index: int, statements: Sequence[Statement]) -> str:
    if not 0 <= ref.statement < index:
        raise ValueError(f"statement {index} refers to statement {ref.statement}, which does not come before it")
    table = statements[ref.statement].inserts
    if table is None or not _TABLE.match(table):
        raise ValueError(f"statement {ref.statement} names no table it inserts into (Statement.inserts)")
    # currval() is the latest id of the table's sequence in this session: only one insert of it may come first.
    others = [i for i in range(index) if i != ref.statement and statements[i].inserts == table]
    if others:
        raise ValueError(
            f"statements {ref.statement} and {others[0]} both insert into {table}: a Ref cannot tell them apart"
        )
    return f"currval(pg_get_serial_sequence('{table}', 'id'))"
