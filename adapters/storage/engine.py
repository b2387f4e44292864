"""The engine-neutral database interface: statements with named parameters, run in one trip per call.

A query class builds `Statement`s (SQL with `:name` parameters only, the same text on every engine) and hands
them to a `Database`:

- `read(*statements)`: one round trip, every statement in one snapshot (a read-only transaction);
- `write(*statements, durable=...)`: one round trip holding BEGIN, the statements in order (each sees what the
  ones before it wrote, triggers included) and COMMIT; a failure anywhere rolls the whole write back;
- `tx(durable=...)`: a transaction over several trips, for a write whose next statement depends on Python
  logic between them (rare paths only).

A statement may use the id an earlier statement of the same write inserted: pass `Ref(i)` as a parameter
value (the engine binds it server-side, so the write stays one trip). Nothing here imports a driver: the
SQLite engine and the PostgreSQL engine (adapters/storage/postgres/) each implement `Database`, each
with the `Sealer` the query classes pass a private row's words through.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from adapters.storage.sealing import Sealer

Row = Mapping[str, Any]


class Fetch(enum.Enum):
    """What a statement gives back: nothing, its first row, every row, or how many rows it changed."""

    NONE = "none"
    ONE = "one"
    ALL = "all"
    ROWCOUNT = "rowcount"


class Ref(NamedTuple):
    """As a parameter value: the id that statement number `statement` of the same write inserted (which must name
    its table in `Statement.inserts`, and be the only statement of the write inserting into it before this one)."""

    statement: int


@dataclass(frozen=True, slots=True)
class Statement:
    """One SQL statement with named `:params` (never `?`, never `::type` casts: `CAST(x AS type)`)."""

    sql: str
    params: Mapping[str, object] = field(default_factory=dict)
    fetch: Fetch = Fetch.NONE
    inserts: str | None = None  # the table whose new id a later `Ref(i)` names


@dataclass(frozen=True, slots=True)
class Result:
    """What one statement gave back: its rows (as `fetch` asked) and the number of rows it changed."""

    rows: Sequence[Row] = ()
    rowcount: int = -1

    @property
    def one(self) -> Row | None:
        return self.rows[0] if self.rows else None

    @property
    def scalar(self) -> Any:
        """The first column of the first row, or None without a row."""
        row = self.one
        return next(iter(row.values())) if row else None


@dataclass(slots=True)
class Counters:
    """What an engine did since it started, read in-process by bench/ (never exported on /metrics: a counter a
    private turn moves would count private turns). `trips`: round trips to the server (or to SQLite's thread)."""

    trips: int = 0
    statements: int = 0
    commits: int = 0
    fsynced_commits: int = 0


@dataclass(frozen=True, slots=True)
class Dialect:
    """Only what cannot be written once for every engine; everything else is portable SQL."""

    name: str  # "sqlite" or "postgres"
    join_in_order: str  # a join the planner must not reorder: SQLite's CROSS JOIN, PostgreSQL's JOIN
    # Ends a SELECT that locks the rows it reads until the write commits. SQLite needs none: a write is
    # BEGIN IMMEDIATE, so no other writer runs between its statements; PostgreSQL's read committed does.
    for_update: str


SQLITE = Dialect(name="sqlite", join_in_order="CROSS JOIN", for_update="")
POSTGRES = Dialect(name="postgres", join_in_order="JOIN", for_update=" FOR UPDATE")


class Tx(Protocol):
    """An open write transaction of `Database.tx`: each `run` is one trip; it commits when the block ends."""

    async def run(self, *statements: Statement) -> list[Result]: ...


class Database(Protocol):
    """One store engine. Every method raises `StoreError` (core/values/errors.py) in one line on failure,
    translated once by the engine; `PrivateWriteRefused` and `IntervalEnded` pass as they are."""

    dialect: Dialect
    counters: Counters
    # The private rows' words pass through it on every write and read (adapters/storage/sealing.py):
    # `Plaintext` on SQLite by default, `IntervalKeys` on PostgreSQL, which never receives a private word.
    sealer: Sealer

    async def read(self, *statements: Statement) -> list[Result]:
        """Run `statements` in one trip and one snapshot; return a `Result` each, in order."""
        ...

    async def write(self, *statements: Statement, durable: bool = True) -> list[Result]:
        """Run `statements` in one trip and one transaction, whole or not at all.

        `durable=False` commits without waiting for the disk: the write survives a crash of the companion, and
        of the server only once a later durable commit follows. Only for marks whose loss repeats an action (a
        delivery marked sent)."""
        ...

    def tx(self, *, durable: bool = True) -> AbstractAsyncContextManager[Tx]:
        """A write transaction over several trips; rolled back whole if the block raises."""
        ...

    async def aclose(self) -> None:
        """Close every connection; safe to call twice."""
        ...
