"""Sealed intervals on every engine: a private word reaches the database only sealed under its interval's key, the
key is made before its segment and shredded before its rows, and an interval without its key is masked, never shown.

Each case runs over the sealer PostgreSQL ships with (`IntervalKeys` over a key folder of the test's own), on
PostgreSQL and on SQLite (which ships `Plaintext`, but seals alike when given keys)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from adapters.storage.engine import Database, Fetch, Statement
from adapters.storage.intervals import KEY_LOST, ORPHAN_GRACE
from adapters.storage.keys import KeyDir
from adapters.storage.modes import ModeQueries, reconcile
from adapters.storage.outbox import OutboxQueries
from adapters.storage.privacy import LifetimeQueries
from adapters.storage.quotes import QuoteQueries
from adapters.storage.sealing import SEALED_PATTERN, IntervalKeys, KeyLost
from adapters.storage.timeline import TimelineQueries
from core.values.errors import StoreError
from core.values.model import DeliveryTarget, Summary
from tests.adapters.store.seed import conversation, count, person

pytestmark = [
    pytest.mark.engines,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("cryptography") is None,
        reason="pip install -e '.[postgres]': IntervalKeys needs cryptography",
    ),
]

CANARY = "SEAL-CANARY-31 plum"
TARGET = DeliveryTarget("telegram", "1")


@dataclass
class Keyed:
    """An engine sealing with interval keys in `folder`, and how to start it again on the same database and folder."""

    engine: Database
    folder: Path
    backend: str
    where: str  # the SQLite file or the PostgreSQL URL

    async def restart(self) -> Database:
        """The process again: a new engine (its keys read from the folder, its segments bound), the old one closed."""
        await self.engine.aclose()
        if self.backend == "postgres":
            from adapters.storage.postgres.engine import PostgresDatabase

            database = PostgresDatabase(self.where, key_dir=self.folder)
            await database.start()
            self.engine = database
        else:
            from adapters.storage.database import Database as SqliteDatabase

            sqlite = SqliteDatabase(self.where, sealer=IntervalKeys(KeyDir(self.folder)))
            await sqlite.start()
            self.engine = sqlite.engine
        return self.engine


@pytest.fixture
async def keyed(store_backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Keyed]:
    folder = tmp_path / "keys"
    if store_backend == "postgres":
        from adapters.storage.postgres.engine import PostgresDatabase

        url = request.getfixturevalue("postgres_url")
        database = PostgresDatabase(url, key_dir=folder)
        await database.start()
        made = Keyed(database, folder, store_backend, url)
    else:
        from adapters.storage.database import Database as SqliteDatabase

        keys = KeyDir(folder)
        keys.ensure()
        sqlite = SqliteDatabase(tmp_path / "sealed.db", sealer=IntervalKeys(keys))
        await sqlite.start()
        made = Keyed(sqlite.engine, folder, store_backend, str(tmp_path / "sealed.db"))
    try:
        yield made
    finally:
        await made.engine.aclose()


@dataclass
class Interval:
    person: int
    conversation: int
    segment: int
    reply: int  # its pending delivery


async def lived_in(engine: Database, *, expires_at: float | None = None, words: str = CANARY) -> Interval:
    """A private interval opened as the valve opens one, holding `words` in every column that can hold words: the
    person's message, the answer and its pending reply, the summary with a pad fact, a pending crossing."""
    timeline = TimelineQueries(engine)
    who = await person(engine)
    c = await conversation(engine, who)
    segment = (await ModeQueries(engine).open_segment(c, 10.0, expires_at)).id
    said = await timeline.add_inbound(
        c, f"{words} asked", 11.0, segment_id=segment, account_id=None, platform_message_id="7", said=words
    )
    recorded = await timeline.record_reply(
        c, f"{words} answered", 12.0, stored_text=f"{words} answered", segment_id=segment, target=TARGET
    )
    await timeline.save_summary(
        c,
        Summary(f"{words} summed up", said or 0),
        13.0,
        segment_id=segment,
        pad_person_id=who,
        pad_facts=(f"{words} a fact",),
    )
    await LifetimeQueries(engine, timeline).request_crossing(segment, f"{words} destination", 14.0, 99.0)
    assert recorded.delivery_id is not None
    return Interval(who, c, segment, recorded.delivery_id)


# Every column that can hold a private row's words, as it is stored.
STORED = (
    "SELECT text AS v FROM messages WHERE segment_id IS NOT NULL",
    "SELECT said AS v FROM messages WHERE segment_id IS NOT NULL AND said IS NOT NULL",
    "SELECT text AS v FROM summaries WHERE segment_id IS NOT NULL",
    "SELECT text AS v FROM pad_entries WHERE segment_id IS NOT NULL",
    "SELECT text AS v FROM deliveries WHERE segment_id IS NOT NULL AND text IS NOT NULL",
    "SELECT destination AS v FROM crossings",
)


async def stored_values(engine: Database) -> list[str]:
    results = await engine.read(*(Statement(sql, fetch=Fetch.ALL) for sql in STORED))
    return [row["v"] for result in results for row in result.rows]


def key_files(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".key"))


# --- what reaches the database ------------------------------------------------------------------------


async def test_a_private_message_reaches_postgres_only_sealed(keyed: Keyed) -> None:
    engine = keyed.engine
    lived = await lived_in(engine)

    stored = await stored_values(engine)
    assert len(stored) == 6  # message, answer, summary, pad fact, pending reply, crossing: no `said`
    for value in stored:
        assert "CANARY" not in value and "plum" not in value
        assert re.fullmatch(SEALED_PATTERN, value), "a private row holds its words only sealed"
    # ... and the interval reads its own words back, whole.
    timeline = TimelineQueries(engine)
    view = await timeline.view(lived.conversation, visible_segment=lived.segment, after=0, limit=10)
    assert [item.text for item in view] == [f"{CANARY} asked", f"{CANARY} answered"]
    summary = await timeline.private_summary(lived.segment)
    assert summary is not None and summary.text == f"{CANARY} summed up"
    assert [entry.text for entry in await timeline.private_pad(lived.person, lived.conversation)] == [
        f"{CANARY} a fact"
    ]
    (pending,) = await OutboxQueries(engine).pending_of(lived.conversation, lived.reply, 20.0)
    assert pending.text == f"{CANARY} answered"


async def test_no_key_reaches_the_database(keyed: Keyed) -> None:
    lived = await lived_in(keyed.engine)
    (found,) = await keyed.engine.read(
        Statement("SELECT key_id FROM segments WHERE id = :s", {"s": lived.segment}, Fetch.ONE)
    )
    key_id = found.scalar
    (name,) = key_files(keyed.folder)
    assert name.startswith(f"{key_id}.") and re.fullmatch(r"[0-9a-f]{32}", key_id)  # a name, never the key
    key = (keyed.folder / name).read_bytes()
    (every,) = await keyed.engine.read(Statement("SELECT key_id FROM segments", fetch=Fetch.ALL))
    assert all(key.hex() not in str(row["key_id"]) for row in every.rows)


async def test_postgres_refuses_a_private_word_in_plain_text(keyed: Keyed) -> None:
    if keyed.backend != "postgres":
        pytest.skip("SQLite keeps private text in plain text until expiry: no such CHECK there")
    engine = keyed.engine
    lived = await lived_in(engine)
    refused = [
        ("UPDATE messages SET text = 'plum' WHERE segment_id = :s", "messages_private_text_sealed"),
        ("UPDATE messages SET said = 'plum' WHERE segment_id = :s", "messages_private_said_kept_nowhere"),
        ("UPDATE summaries SET text = 'plum' WHERE segment_id = :s", "summaries_private_text_sealed"),
        ("UPDATE pad_entries SET text = 'plum' WHERE segment_id = :s", "pad_entries_private_text_sealed"),
        ("UPDATE deliveries SET text = 'plum' WHERE segment_id = :s", "deliveries_private_text_sealed"),
        ("UPDATE crossings SET destination = 'plum' WHERE segment_id = :s", "crossings_destination_sealed"),
    ]
    for sql, check in refused:
        with pytest.raises(StoreError, match=check):
            await engine.write(Statement(sql, {"s": lived.segment}))


async def test_postgres_without_a_key_folder_opens_no_interval(
    store_backend: str, request: pytest.FixtureRequest
) -> None:
    if store_backend != "postgres":
        pytest.skip("SQLite keeps plain text: it needs no key folder")
    from adapters.storage.postgres.engine import PostgresDatabase

    engine = PostgresDatabase(request.getfixturevalue("postgres_url"))  # no key_dir
    await engine.start()
    try:
        c = await conversation(engine, await person(engine))
        with pytest.raises(KeyLost):
            await ModeQueries(engine).open_segment(c, 10.0, None)
        assert await count(engine, "SELECT count(*) FROM segments") == 0
    finally:
        await engine.aclose()


# --- the keys' life ----------------------------------------------------------------------------------


async def test_a_key_is_made_before_its_segment_and_outlives_a_restart(keyed: Keyed) -> None:
    lived = await lived_in(keyed.engine)
    assert len(key_files(keyed.folder)) == 1
    engine = await keyed.restart()
    # A later interval of the same conversation reads the earlier one's pad facts, until they expire.
    await ModeQueries(engine).close_open_segments(lived.conversation, 30.0, "command")
    later = await ModeQueries(engine).open_segment(lived.conversation, 31.0, None)
    assert later.id != lived.segment
    facts = await TimelineQueries(engine).private_pad(lived.person, lived.conversation)
    assert [entry.text for entry in facts] == [f"{CANARY} a fact"]
    assert len(key_files(keyed.folder)) == 2


async def test_a_key_made_for_no_segment_is_shredded_at_once(keyed: Keyed) -> None:
    modes = ModeQueries(keyed.engine)
    c = await conversation(keyed.engine, await person(keyed.engine))
    first = await modes.open_segment(c, 10.0, None)
    again = await modes.open_segment(c, 11.0, None)  # one was open already: the new key names nothing
    assert again.id == first.id
    assert len(key_files(keyed.folder)) == 1
    with pytest.raises(Exception, match=r"FOREIGN KEY|foreign key"):
        await modes.open_segment(999, 12.0, None)  # no such conversation: the segment never commits
    assert len(key_files(keyed.folder)) == 1


async def test_after_expiry_no_key_opens_the_interval(keyed: Keyed) -> None:
    engine = keyed.engine
    lived = await lived_in(engine, expires_at=50.0)
    sealed_before = await stored_values(engine)
    (found,) = await engine.read(
        Statement("SELECT key_id FROM segments WHERE id = :s", {"s": lived.segment}, Fetch.ONE)
    )

    assert await ModeQueries(engine).delete_expired_segments(50.0) == 1

    assert key_files(keyed.folder) == []
    # Whatever copy of the sealed words survives (a backup, a dump, a replica), no key the companion holds opens it.
    for sealer in (engine.sealer, IntervalKeys(KeyDir(keyed.folder))):
        sealer.bind(lived.segment, found.scalar)
        for value, field in zip(sealed_before, FIELDS, strict=True):
            assert sealer.open(lived.segment, field, value) is None


FIELDS = (
    "messages.text",
    "messages.text",
    "summaries.text",
    "pad_entries.text",
    "deliveries.text",
    "crossings.destination",
)


class Down:
    """An engine whose database is unreachable: every read and write fails, as PostgreSQL down does."""

    def __init__(self, engine: Database) -> None:
        self.sealer = engine.sealer
        self.dialect = engine.dialect
        self.counters = engine.counters

    async def read(self, *statements: Statement) -> list[object]:
        raise StoreError("the database is down")

    async def write(self, *statements: Statement, durable: bool = True) -> list[object]:
        raise StoreError("the database is down")


async def test_expiry_shreds_the_key_while_the_database_is_down(keyed: Keyed) -> None:
    lived = await lived_in(keyed.engine, expires_at=50.0)
    with pytest.raises(StoreError):
        await ModeQueries(Down(keyed.engine)).delete_expired_segments(50.0)  # type: ignore[arg-type]
    assert key_files(keyed.folder) == []  # shredded by its name alone, before the database was asked
    # Back up: the rows are still there but open to nothing; the next sweep deletes them.
    assert await TimelineQueries(keyed.engine).private_summary(lived.segment) is None
    assert await ModeQueries(keyed.engine).delete_expired_segments(50.0) == 1


class DeletesNothing:
    """An engine that reads but whose every write fails: a crash between a shred and the rows' deletion."""

    def __init__(self, engine: Database) -> None:
        self._engine = engine
        self.sealer = engine.sealer
        self.dialect = engine.dialect
        self.counters = engine.counters

    async def read(self, *statements: Statement) -> list[object]:
        return await self._engine.read(*statements)

    async def write(self, *statements: Statement, durable: bool = True) -> list[object]:
        raise StoreError("killed before the rows were deleted")


async def test_forget_private_shreds_the_key_before_deleting_rows(keyed: Keyed) -> None:
    engine = keyed.engine
    lived = await lived_in(engine)
    timeline = TimelineQueries(engine)
    cut_short = LifetimeQueries(DeletesNothing(engine), timeline)  # type: ignore[arg-type]
    with pytest.raises(StoreError):
        await cut_short.delete_segments_of(lived.conversation, 20.0)

    assert key_files(keyed.folder) == []  # the key went first ...
    assert await count(engine, "SELECT count(*) FROM messages WHERE segment_id = :s", s=lived.segment) == 2
    # ... so the rows a crash left behind open to nothing, in every view.
    assert await timeline.view(lived.conversation, visible_segment=lived.segment, after=0, limit=10) == []
    assert await timeline.private_pad(lived.person, lived.conversation) == []
    assert await LifetimeQueries(engine, timeline).delete_segments_of(lived.conversation, 21.0) == 1
    assert await count(engine, "SELECT count(*) FROM messages") == 0


async def test_an_orphan_key_is_shredded_at_start(keyed: Keyed) -> None:
    lived = await lived_in(keyed.engine)
    orphan = await keyed.engine.sealer.create(None)  # a crash came between this key and its segment's commit
    fresh = await keyed.engine.sealer.create(None)  # another process is between these two steps right now
    assert orphan is not None and fresh is not None and len(key_files(keyed.folder)) == 3
    (name,) = [name for name in key_files(keyed.folder) if name.startswith(orphan)]
    long_ago = time.time() - ORPHAN_GRACE - 1
    os.utime(keyed.folder / name, (long_ago, long_ago))
    engine = await keyed.restart()

    await ModeQueries(engine).close_crash_open_segments(now=20.0)  # start-up, as core's Recovery runs it

    left = key_files(keyed.folder)
    assert len(left) == 2 and not any(name.startswith(orphan) for name in left)
    assert any(name.startswith(fresh) for name in left)
    view = await TimelineQueries(engine).view(lived.conversation, visible_segment=lived.segment, after=0, limit=10)
    assert [item.text for item in view] == [f"{CANARY} asked", f"{CANARY} answered"]  # the live key stays
    assert (await reconcile(engine, 21.0)).keyless == 0


async def test_a_lost_key_masks_its_interval_never_exposes_it(keyed: Keyed) -> None:
    lived = await lived_in(keyed.engine)
    for name in key_files(keyed.folder):  # the folder lost (a container without its volume, a restore elsewhere)
        os.unlink(keyed.folder / name)
    engine = await keyed.restart()

    # Start-up, as core's Recovery runs it (the keys' step comes first): the interval the keys' step closed
    # is one this start closed, so what was sent in it before the start is kept from normal mode.
    assert await ModeQueries(engine).close_crash_open_segments(now=20.0) == [lived.conversation]

    (reason,) = await engine.read(
        Statement("SELECT end_reason FROM segments WHERE id = :s", {"s": lived.segment}, Fetch.ONE)
    )
    assert reason.scalar == KEY_LOST
    timeline = TimelineQueries(engine)
    # Normal mode sees the one placeholder, as always; the interval's own view and pad hold nothing.
    normal = await timeline.view(lived.conversation, visible_segment=None, after=0, limit=10)
    assert [(item.text, item.masked_segment_id) for item in normal] == [(None, lived.segment)]
    assert await timeline.view(lived.conversation, visible_segment=lived.segment, after=0, limit=10) == []
    assert await timeline.private_summary(lived.segment) is None
    # A new interval of the conversation reads none of the old pad.
    later = await ModeQueries(engine).open_segment(lived.conversation, 30.0, None)
    reads = await timeline.context_reads(
        lived.conversation, person_id=lived.person, segment_id=later.id, limit=10, count_up_to=10
    )
    assert reads.private_pad == [] and reads.private_summary is None
    # Its pending reply was settled unsent; nothing of it is ever picked to be sent.
    assert await OutboxQueries(engine).pending_of(lived.conversation, lived.reply, 31.0) == []
    (status,) = await engine.read(
        Statement("SELECT status FROM deliveries WHERE id = :d", {"d": lived.reply}, Fetch.ONE)
    )
    assert status.scalar == "failed"


async def test_an_open_interval_whose_key_is_lost_is_closed_at_the_next_settle(keyed: Keyed) -> None:
    engine = keyed.engine
    lived = await lived_in(engine)
    (found,) = await engine.read(
        Statement("SELECT key_id FROM segments WHERE id = :s", {"s": lived.segment}, Fetch.ONE)
    )
    await engine.sealer.shred([found.scalar])

    # Masked from the moment its key is gone: its pending reply is never picked to be sent ...
    assert await OutboxQueries(engine).pending_of(lived.conversation, lived.reply, 20.0) == []
    # ... and the next settle closes it.
    assert await ModeQueries(engine).open_segment_of(lived.conversation) is None  # normal mode from here
    (row,) = await engine.read(
        Statement(
            "SELECT g.end_reason, d.status FROM segments g JOIN deliveries d ON d.segment_id = g.id WHERE g.id = :s",
            {"s": lived.segment},
            Fetch.ONE,
        )
    )
    assert row.one is not None and (row.one["end_reason"], row.one["status"]) == (KEY_LOST, "failed")
    # A reply the turn still writes for it is never written: its interval has ended.
    from core.values.errors import IntervalEnded

    with pytest.raises(IntervalEnded):
        await TimelineQueries(engine).record_reply(
            lived.conversation, "late", 40.0, stored_text="late", segment_id=lived.segment, target=TARGET
        )


# --- what SQL can no longer compare, compared in Python --------------------------------------------------


async def test_the_private_pad_keeps_one_copy_of_a_fact_it_holds_already(keyed: Keyed) -> None:
    engine = keyed.engine
    lived = await lived_in(engine)
    timeline = TimelineQueries(engine)
    await timeline.save_summary(
        lived.conversation,
        Summary("again", 0),
        20.0,
        segment_id=lived.segment,
        pad_person_id=lived.person,
        pad_facts=(f"{CANARY} a fact", "new fact", "new fact"),
    )
    facts = [entry.text for entry in await timeline.private_pad(lived.person, lived.conversation)]
    assert facts == [f"{CANARY} a fact", "new fact"]


async def test_a_private_edit_to_the_same_words_is_no_edit(keyed: Keyed) -> None:
    engine = keyed.engine
    lived = await lived_in(engine)
    quotes = QuoteQueries(engine)
    (found,) = await engine.read(
        Statement("SELECT id FROM messages WHERE segment_id = :s AND role = 'user'", {"s": lived.segment}, Fetch.ONE)
    )
    message = found.scalar
    assert not await quotes.edit_message(message, lived.segment, f"{CANARY} asked", 20.0)
    assert await quotes.edit_message(message, lived.segment, "edited", 21.0, said="edited")
    view = await TimelineQueries(engine).view(lived.conversation, visible_segment=lived.segment, after=0, limit=10)
    assert [item.text for item in view] == ["edited", f"{CANARY} answered"]
    assert all(re.fullmatch(SEALED_PATTERN, value) for value in await stored_values(engine))


async def test_a_line_added_to_a_private_reply_is_sealed_with_it(keyed: Keyed) -> None:
    engine = keyed.engine
    lived = await lived_in(engine)
    outbox = OutboxQueries(engine)
    await outbox.append_text(lived.reply, "\n(delete the secret)")
    (pending,) = await outbox.pending_of(lived.conversation, lived.reply, 20.0)
    assert pending.text == f"{CANARY} answered\n(delete the secret)"
    assert all(re.fullmatch(SEALED_PATTERN, value) for value in await stored_values(engine))


async def test_a_confirmed_crossing_takes_its_destination_out_in_words(keyed: Keyed) -> None:
    engine = keyed.engine
    lived = await lived_in(engine)
    lifetime = LifetimeQueries(engine, TimelineQueries(engine))
    made = await lifetime.confirm_crossing(lived.segment, lived.conversation, "notes.txt", "content", 20.0, None)
    assert made is not None
    (found,) = await engine.read(Statement("SELECT destination FROM artifacts WHERE id = :a", {"a": made}, Fetch.ONE))
    assert found.scalar == f"{CANARY} destination"  # the one way out of an interval, as the person asked
    assert await count(engine, "SELECT count(*) FROM crossings") == 0


async def test_expiry_shreds_a_key_its_name_does_not_date(keyed: Keyed) -> None:
    engine = keyed.engine
    c = await conversation(engine, await person(engine))
    modes = ModeQueries(engine)
    segment = (await modes.open_segment(c, 10.0, None)).id  # its key's name says "never"
    await engine.write(
        Statement("UPDATE segments SET expires_at = 50.0, ended_at = 20.0 WHERE id = :s", {"s": segment})
    )
    assert await modes.delete_expired_segments(50.0) == 1
    assert key_files(keyed.folder) == []  # the segment named its key: shredded before its rows went


async def test_a_cut_off_private_stream_gets_its_line_sealed(keyed: Keyed) -> None:
    engine = keyed.engine
    c = await conversation(engine, await person(engine))
    segment = (await ModeQueries(engine).open_segment(c, 10.0, None)).id
    outbox = OutboxQueries(engine)
    stream = await outbox.open_stream(c, TARGET, 11.0, segment_id=segment)
    await outbox.record_streamed(stream.delivery_id, ("m1",))

    assert await outbox.cut_off_streams(12.0, f"{CANARY} cut off", 12.0) == [(c, stream.delivery_id)]

    (pending,) = await outbox.pending_of(c, stream.delivery_id, 13.0)
    assert pending.text == f"{CANARY} cut off"
    assert all(re.fullmatch(SEALED_PATTERN, value) for value in await stored_values(engine))


async def test_a_private_message_is_quoted_and_exported_in_words_only_in_its_interval(keyed: Keyed) -> None:
    engine = keyed.engine
    lived = await lived_in(engine)
    quotes = QuoteQueries(engine)
    inside = await quotes.quoted_message(lived.conversation, "7", visible_segment=lived.segment)
    assert inside is not None and inside.text == f"{CANARY} asked"
    outside = await quotes.quoted_message(lived.conversation, "7", visible_segment=None)
    assert outside is not None and outside.text is None
    assert await quotes.visible_texts(lived.conversation, "user", visible_segment=lived.segment, limit=5) == [
        f"{CANARY} asked"
    ]
    items = await LifetimeQueries(engine, TimelineQueries(engine)).segment_items(lived.segment)
    assert [item.text for item in items] == [f"{CANARY} asked", f"{CANARY} answered"]
