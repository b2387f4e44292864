"""Every query class over one Database, and opening them: bot/bootstrap.py hands each core consumer
the ones its ports name (core/ports/store/), and mypy checks each port against its class there.

Every SQL statement of the companion lives in the query modules, with the privacy predicates
inside it: timeline.py (messages, the masked view, summaries, pads), modes.py (segments, adapter
offsets), attempts.py (the lockouts' logs), memory.py (memory, goals, follow-ups, capture,
analytics), privacy.py (forgetting, checkpoints, export, crossings), bindings.py (mirrors),
proactive.py (reminders and nudges), links.py (linked accounts), chats.py (moved chats),
quotes.py (quotes and edits), outbox.py, web.py (sign-in) and inbox.py (webhook updates). Every lasting write passes through
the one guard of guard.py.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from adapters.storage.attempts import AttemptQueries
from adapters.storage.bindings import BindingQueries
from adapters.storage.chats import ChatQueries
from adapters.storage.claims import ClaimQueries, JobSlots
from adapters.storage.database import Database
from adapters.storage.engine import Database as Engine
from adapters.storage.inbox import InboxQueries, TransitKeys
from adapters.storage.links import LinkQueries
from adapters.storage.memory import MemoryQueries
from adapters.storage.modes import ModeQueries
from adapters.storage.outbox import OutboxQueries
from adapters.storage.privacy import Checkpoints, LifetimeQueries
from adapters.storage.proactive import ProactiveQueries
from adapters.storage.quotes import QuoteQueries
from adapters.storage.timeline import TimelineQueries
from adapters.storage.web import WebQueries


class StoreDatabase(Protocol):
    """A database the stores sit on: SQLite's `Database` or PostgreSQL's `PostgresDatabase`."""

    @property
    def engine(self) -> Engine: ...

    @property
    def transit(self) -> TransitKeys | None: ...

    async def start(self) -> object: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Stores:
    """Every query class over one Database (`database`: its lifecycle, and raw SQL for tests and
    bench/ only). Each class implements the ports of one data group."""

    database: StoreDatabase
    timeline: TimelineQueries
    checkpoints: Checkpoints | None  # SQLite only: the WAL checkpoint a deletion of private rows owes
    modes: ModeQueries  # also the adapters' offsets (core.ports.chat.AdapterStateStore)
    memory: MemoryQueries
    lifetime: LifetimeQueries
    bindings: BindingQueries
    proactive: ProactiveQueries
    links: LinkQueries
    chats: ChatQueries
    quotes: QuoteQueries
    outbox: OutboxQueries
    web: WebQueries
    inbox: InboxQueries  # the webhook inbox (issue 33)
    passphrase_attempts: AttemptQueries
    link_attempts: AttemptQueries
    # A process of a shared PostgreSQL database (COMPANION_SHARED_DATABASE): its chat claims; None alone.
    claims: ClaimQueries | None = None
    job_slots: JobSlots | None = None  # and each scheduled run once across its processes

    @classmethod
    def over(cls, database: StoreDatabase, *, process_id: int | None = None) -> Stores:
        """The query classes over `database` (started or not: nothing is read here); `process_id`: this process's
        row in gateway_processes on a shared database (its claims, and recovery leaving the others' alone)."""
        timeline = TimelineQueries(database.engine)
        checkpoints = Checkpoints(database) if isinstance(database, Database) else None
        return cls(
            database=database,
            timeline=timeline,
            checkpoints=checkpoints,
            modes=ModeQueries(database.engine, checkpoints, process_id=process_id),
            memory=MemoryQueries(database.engine),
            lifetime=LifetimeQueries(database.engine, timeline, checkpoints),
            bindings=BindingQueries(database.engine),
            proactive=ProactiveQueries(database.engine),
            links=LinkQueries(database.engine),
            chats=ChatQueries(database.engine),
            quotes=QuoteQueries(database.engine),
            outbox=OutboxQueries(database.engine),
            web=WebQueries(database.engine),
            inbox=InboxQueries(database.engine, database.transit, process_id=process_id),
            passphrase_attempts=AttemptQueries(database.engine, "valve_attempts"),
            link_attempts=AttemptQueries(database.engine, "link_attempts"),
            claims=None if process_id is None else ClaimQueries(database.engine, process_id),
            job_slots=None if process_id is None else JobSlots(database.engine, process_id),
        )


def sqlite_stores(path: str | os.PathLike[str]) -> Stores:
    """The stores of the SQLite database at `path`, not opened yet (`stores.database.start()`)."""
    return Stores.over(Database(path))


def store_database(
    path: str | os.PathLike[str], *, url: str | None = None, key_dir: Path | None = None, process_id: int | None = None
) -> StoreDatabase:
    """The database the settings choose, not opened yet: PostgreSQL at `url` (COMPANION_DATABASE_URL, its keys
    in `key_dir`) when given, else the SQLite file at `path` (COMPANION_DB_PATH)."""
    if url is None:
        return Database(path)
    # Imported only when configured: the driver is the `postgres` extra.
    from adapters.storage.postgres.engine import PostgresDatabase

    return PostgresDatabase(url, key_dir=key_dir, process_id=process_id)


@asynccontextmanager
async def open_stores(
    path: str | os.PathLike[str], *, url: str | None = None, key_dir: Path | None = None, process_id: int | None = None
) -> AsyncIterator[Stores]:
    """The database the settings choose (`store_database`) opened, created and migrated, with every query
    class over it; closed at the end, also on failure. `process_id`: see `Stores.over` (PostgreSQL only).

    Raises:
        core.values.errors.StoreError: the database cannot be opened or used (one line; a URL's password masked).
        core.values.errors.MigrationError: its schema cannot be brought to this code's version.
    """
    database = store_database(path, url=url, key_dir=key_dir, process_id=process_id)
    stores = Stores.over(database, process_id=process_id)
    await stores.database.start()
    try:
        yield stores
    finally:
        await stores.database.aclose()
