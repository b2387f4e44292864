"""The wall at the edges (issue 22), in the SQL itself: what the store refuses whoever calls it.

Each test plants the state a careless caller could reach and shows the statement (or the schema)
refuses it; the end-to-end tests through the platform libraries are in test_wall_telegram.py and
test_wall_discord.py.
"""

from __future__ import annotations

import sqlite3

import pytest

from adapters.storage.outbox import SqliteOutboxStore
from adapters.storage.sqlite import SqliteStore
from core.values import copy
from core.values.model import ConversationKey, MirrorOf

NOW = 1_800_000_000.0
CANARY = "WALL-STORE-CANARY-41d"


async def conversation(store: SqliteStore) -> int:
    account = await store.ensure_account("telegram", "100", None, NOW)
    return (await store.ensure_conversation(ConversationKey("telegram", "100"), "direct", account.person_id, NOW)).id


async def text_of(store: SqliteStore, message_id: int) -> str:
    return (await store._one("SELECT text FROM messages WHERE id = ?", (message_id,)))[0]


# --- edits: a row changes only in its own mode --------------------------------------------------


async def test_an_edit_never_changes_a_normal_row_while_an_interval_is_open(store: SqliteStore) -> None:
    c = await conversation(store)
    normal = await store.add_inbound(
        c, "lunch on Friday", NOW, segment_id=None, account_id=None, platform_message_id="1"
    )
    assert normal is not None
    await store.open_segment(c, NOW, None)
    assert not await store.edit_message(normal, None, f"lunch with {CANARY}", NOW + 1)
    assert await text_of(store, normal) == "lunch on Friday"
    assert await store._all("SELECT rowid FROM recall_fts WHERE text LIKE ?", (f"%{CANARY}%",)) == []
    await store.close_open_segments(c, NOW + 2, "user")
    assert await store.edit_message(normal, None, "lunch on Saturday", NOW + 3)  # normal mode again
    assert await text_of(store, normal) == "lunch on Saturday"


async def test_an_edit_never_changes_a_private_row_once_its_interval_is_closed(store: SqliteStore) -> None:
    c = await conversation(store)
    segment = await store.open_segment(c, NOW, None)
    private = await store.add_inbound(
        c, "private words", NOW, segment_id=segment.id, account_id=None, platform_message_id="1"
    )
    assert private is not None
    assert await store.edit_message(private, segment.id, "private words, edited", NOW + 1)  # its interval is open
    await store.close_open_segments(c, NOW + 2, "user")
    assert not await store.edit_message(private, segment.id, "typed in normal mode", NOW + 3)
    assert await text_of(store, private) == "private words, edited"


# --- deliveries: everything written while private belongs to the interval ------------------------


async def plant_delivery(store: SqliteStore, c: int, kind: str, segment: int | None) -> None:
    await store._planted(
        "INSERT INTO deliveries (conversation_id, segment_id, kind, platform, chat_id, nonce, text,"
        " next_attempt_at, created_at) VALUES (?, ?, ?, 'telegram', '100', 'n', ?, 0, 0)",
        (c, segment, kind, f"I don't know /diary_{CANARY}"),
    )


@pytest.mark.parametrize("kind", ["reply", "mirror", "reminder", "nudge"])
async def test_the_schema_refuses_a_delivery_written_while_an_interval_is_open_that_does_not_name_it(
    store: SqliteStore, kind: str
) -> None:
    c = await conversation(store)
    earlier = await store.open_segment(c, NOW, None)
    await store.close_open_segments(c, NOW + 1, "user")
    await store.open_segment(c, NOW + 2, None)
    for segment in (None, earlier.id):  # none, or an interval that is not the open one
        with pytest.raises(sqlite3.IntegrityError):
            await plant_delivery(store, c, kind, segment)
    assert await store._all("SELECT id FROM deliveries") == []


async def test_a_delivery_naming_the_open_interval_goes_with_it(store: SqliteStore) -> None:
    c = await conversation(store)
    segment = await store.open_segment(c, NOW, None)
    await plant_delivery(store, c, "reply", segment.id)
    await store.close_open_segments(c, NOW + 1, "user")
    await plant_delivery(store, c, "reply", None)  # normal mode again: a normal delivery
    await store.delete_segments_of(c, NOW + 2)
    assert [tuple(r) for r in await store._all("SELECT segment_id FROM deliveries")] == [(None,)]


# --- the outbox: nothing is sent for an interval that has ended -------------------------------------


async def test_the_outbox_never_picks_a_delivery_whose_interval_expired_even_before_the_sweep(
    store: SqliteStore,
) -> None:
    c = await conversation(store)
    segment = await store.open_segment(c, NOW, NOW + 60)
    await plant_delivery(store, c, "reply", segment.id)
    (delivery,) = [r[0] for r in await store._all("SELECT id FROM deliveries")]
    outbox = SqliteOutboxStore(store.database)
    assert await outbox.due(frozenset({"telegram"}), NOW + 59) == [(c, delivery)]
    assert [d.id for d in await outbox.pending_of(c, delivery, NOW + 59)] == [delivery]
    # Expired, not yet deleted (the sweep runs once a minute): the queries that pick it say no.
    assert await outbox.due(frozenset({"telegram"}), NOW + 60) == []
    assert await outbox.pending_of(c, delivery, NOW + 60) == []


async def test_the_outbox_never_picks_a_delivery_whose_interval_is_gone_even_with_foreign_keys_off(
    store: SqliteStore,
) -> None:
    c = await conversation(store)
    segment = await store.open_segment(c, NOW, None)
    await plant_delivery(store, c, "reply", segment.id)
    (delivery,) = [r[0] for r in await store._all("SELECT id FROM deliveries")]
    # A row its interval's cascade never reached (a copy restored without foreign keys, a bug).
    await store._all("PRAGMA foreign_keys = OFF")
    try:
        await store._planted("DELETE FROM segments WHERE id = ?", (segment.id,))
    finally:
        await store._all("PRAGMA foreign_keys = ON")
    assert [tuple(r) for r in await store._all("SELECT id, status FROM deliveries")] == [(delivery, "pending")]
    outbox = SqliteOutboxStore(store.database)
    assert await outbox.due(frozenset({"telegram"}), NOW) == []
    assert await outbox.pending_of(c, delivery, NOW) == []


# --- mirrors: the words said, never the lines before them ------------------------------------------


async def test_a_mirror_row_copies_the_words_the_person_said_never_the_quote_before_them(store: SqliteStore) -> None:
    c = await conversation(store)
    await store.add_binding(c, "discord", "5550001", NOW)
    quoted = copy.QUOTE_LINE.format(text=copy.PLACEHOLDER)
    user = await store.add_inbound(
        c,
        f"{quoted}\nwhat was that?",
        NOW,
        segment_id=None,
        account_id=None,
        platform_message_id="1",
        said="what was that?",
    )
    recorded = await store.record_reply(
        c, "No idea.", NOW, stored_text="No idea.", answers=user, mirror=MirrorOf(user, "telegram DM")
    )
    assert len(recorded.mirror_ids) == 1
    rows = await store._all("SELECT text FROM deliveries WHERE kind = 'mirror'")
    assert [r[0] for r in rows] == ["[telegram DM] you: what was that?\ncompanion: No idea."]
