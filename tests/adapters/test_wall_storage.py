"""The wall at the edges (issue 22), in the SQL itself: what the store refuses whoever calls it.

Each test plants the state a careless caller could reach and shows the statement (or the schema)
refuses it; the end-to-end tests through the platform libraries are in test_platform_wall.py.
"""

from __future__ import annotations

import pytest

from adapters.storage.stores import Stores
from core.values import copy
from core.values.errors import IntervalEnded
from core.values.model import ConversationKey, DeliveryTarget, MirrorOf
from tests.helpers import engines
from tests.helpers.wall import traces

pytestmark = [pytest.mark.engines, pytest.mark.privacy]

NOW = 1_800_000_000.0
CANARY = "WALL-STORE-CANARY-41d"
TARGET = DeliveryTarget("telegram", "100")


async def conversation(stores: Stores) -> int:
    account = await stores.timeline.ensure_account("telegram", "100", None, NOW)
    return (
        await stores.timeline.ensure_conversation(ConversationKey("telegram", "100"), "direct", account.person_id, NOW)
    ).id


async def text_of(stores: Stores, message_id: int) -> str | None:
    segment_id, text = await engines.first(stores, "SELECT segment_id, text FROM messages WHERE id = ?", (message_id,))
    return engines.opened(stores, segment_id, "messages.text", text)


# --- edits: a row changes only in its own mode --------------------------------------------------


async def test_an_edit_never_changes_a_normal_row_while_an_interval_is_open(stores: Stores) -> None:
    c = await conversation(stores)
    normal = await stores.timeline.add_inbound(
        c, "lunch on Friday", NOW, segment_id=None, account_id=None, platform_message_id="1"
    )
    assert normal is not None
    await stores.modes.open_segment(c, NOW, None)
    assert not await stores.quotes.edit_message(normal, None, f"lunch with {CANARY}", NOW + 1)
    assert await text_of(stores, normal) == "lunch on Friday"
    assert await engines.recall_entries(stores, f"%{CANARY}%") == []
    await stores.modes.close_open_segments(c, NOW + 2, "user")
    assert await stores.quotes.edit_message(normal, None, "lunch on Saturday", NOW + 3)  # normal mode again
    assert await text_of(stores, normal) == "lunch on Saturday"


async def test_a_private_row_edited_in_its_own_interval_never_enters_the_recall_index(stores: Stores) -> None:
    # The person's account has a person (recall is personal): the trigger's privacy predicate is what
    # keeps the edited words out, not the absence of a person to index them for.
    c = await conversation(stores)
    segment = await stores.modes.open_segment(c, NOW, None)
    private = await stores.timeline.add_inbound(
        c, "private words", NOW, segment_id=segment.id, account_id=None, platform_message_id="1"
    )
    assert private is not None
    assert await stores.quotes.edit_message(private, segment.id, f"private words with {CANARY}", NOW + 1)
    assert await text_of(stores, private) == f"private words with {CANARY}"  # the edit was applied
    assert await engines.recall_entries(stores, f"%{CANARY}%") == []
    assert ("message", private) not in await engines.recall_entries(stores, "%")


async def test_an_edit_never_changes_a_private_row_once_its_interval_is_closed(stores: Stores) -> None:
    c = await conversation(stores)
    segment = await stores.modes.open_segment(c, NOW, None)
    private = await stores.timeline.add_inbound(
        c, "private words", NOW, segment_id=segment.id, account_id=None, platform_message_id="1"
    )
    assert private is not None
    assert await stores.quotes.edit_message(
        private, segment.id, "private words, edited", NOW + 1
    )  # its interval is open
    await stores.modes.close_open_segments(c, NOW + 2, "user")
    assert not await stores.quotes.edit_message(private, segment.id, "typed in normal mode", NOW + 3)
    assert await text_of(stores, private) == "private words, edited"


# --- deliveries: everything written while private belongs to the interval ------------------------


async def plant_delivery(stores: Stores, c: int, kind: str, segment: int | None) -> None:
    await engines.plant(
        stores,
        "INSERT INTO deliveries (conversation_id, segment_id, kind, platform, chat_id, nonce, text,"
        " next_attempt_at, created_at) VALUES (?, ?, ?, 'telegram', '100', 'n', ?, 0, 0)",
        (c, segment, kind, engines.sealed(stores, segment, "deliveries.text", f"I don't know /diary_{CANARY}")),
    )


@pytest.mark.parametrize("kind", ["reply", "mirror", "reminder", "nudge"])
async def test_the_schema_refuses_a_delivery_written_while_an_interval_is_open_that_does_not_name_it(
    stores: Stores, kind: str
) -> None:
    c = await conversation(stores)
    earlier = await stores.modes.open_segment(c, NOW, None)
    await stores.modes.close_open_segments(c, NOW + 1, "user")
    await stores.modes.open_segment(c, NOW + 2, None)
    for segment in (None, earlier.id):  # none, or an interval that is not the open one
        with engines.refused_by_the_database(stores):
            await plant_delivery(stores, c, kind, segment)
    assert await engines.rows(stores, "SELECT id FROM deliveries") == []


async def test_a_delivery_naming_the_open_interval_goes_with_it(stores: Stores) -> None:
    c = await conversation(stores)
    segment = await stores.modes.open_segment(c, NOW, None)
    await plant_delivery(stores, c, "reply", segment.id)
    await stores.modes.close_open_segments(c, NOW + 1, "user")
    await plant_delivery(stores, c, "reply", None)  # normal mode again: a normal delivery
    await stores.lifetime.delete_segments_of(c, NOW + 2)
    assert [tuple(r) for r in await engines.rows(stores, "SELECT segment_id FROM deliveries")] == [(None,)]


# --- the outbox: nothing is sent for an interval that has ended -------------------------------------


async def test_the_outbox_never_picks_a_delivery_whose_interval_expired_even_before_the_sweep(
    stores: Stores,
) -> None:
    c = await conversation(stores)
    segment = await stores.modes.open_segment(c, NOW, NOW + 60)
    await plant_delivery(stores, c, "reply", segment.id)
    (delivery,) = [r[0] for r in await engines.rows(stores, "SELECT id FROM deliveries")]
    outbox = stores.outbox
    assert await outbox.due(frozenset({"telegram"}), NOW + 59) == [(c, delivery)]
    assert [d.id for d in await outbox.pending_of(c, delivery, NOW + 59)] == [delivery]
    # Expired, not yet deleted (the sweep runs once a minute): the queries that pick it say no.
    assert await outbox.due(frozenset({"telegram"}), NOW + 60) == []
    assert await outbox.pending_of(c, delivery, NOW + 60) == []


async def test_the_outbox_never_picks_a_delivery_whose_interval_is_gone_even_with_foreign_keys_off(
    stores: Stores,
) -> None:
    c = await conversation(stores)
    segment = await stores.modes.open_segment(c, NOW, None)
    await plant_delivery(stores, c, "reply", segment.id)
    (delivery,) = [r[0] for r in await engines.rows(stores, "SELECT id FROM deliveries")]
    # A row its interval's cascade never reached (a copy restored without foreign keys, a bug).
    await engines.plant_past_foreign_keys(stores, "DELETE FROM segments WHERE id = ?", (segment.id,))
    assert [tuple(r) for r in await engines.rows(stores, "SELECT id, status FROM deliveries")] == [
        (delivery, "pending")
    ]
    outbox = stores.outbox
    assert await outbox.due(frozenset({"telegram"}), NOW) == []
    assert await outbox.pending_of(c, delivery, NOW) == []


# --- mirrors: the words said, never the lines before them ------------------------------------------


async def test_a_mirror_row_copies_the_words_the_person_said_never_the_quote_before_them(stores: Stores) -> None:
    c = await conversation(stores)
    await stores.bindings.add_binding(c, "discord", "5550001", NOW)
    quoted = copy.QUOTE_LINE.format(text=copy.PLACEHOLDER)
    user = await stores.timeline.add_inbound(
        c,
        f"{quoted}\nwhat was that?",
        NOW,
        segment_id=None,
        account_id=None,
        platform_message_id="1",
        said="what was that?",
    )
    recorded = await stores.timeline.record_reply(
        c, "No idea.", NOW, stored_text="No idea.", answers=user, mirror=MirrorOf(user, "telegram DM")
    )
    assert len(recorded.mirror_ids) == 1
    rows = await engines.rows(stores, "SELECT text FROM deliveries WHERE kind = 'mirror'")
    assert [r[0] for r in rows] == ["[telegram DM] you: what was that?\ncompanion: No idea."]


# --- the end of an interval ends what it shows (issue 29) -------------------------------------------


async def plant_reply(stores: Stores, c: int, segment: int | None, *, shown: str | None, status: str) -> int:
    """A private answer's row as a turn leaves it: 'streaming' (no text yet) or 'pending' (its final
    text), with the messages it showed while written (`shown`), if any."""
    text = None if status == "streaming" else f"the whole answer: {CANARY}"
    await engines.plant(
        stores,
        "INSERT INTO deliveries (conversation_id, segment_id, kind, platform, chat_id, nonce, text, status,"
        " streamed_ids, next_attempt_at, created_at) VALUES (?, ?, 'reply', 'telegram', '100', 'n', ?, ?, ?, 0, 0)",
        (c, segment, engines.sealed(stores, segment, "deliveries.text", text), status, shown),
    )
    return (await engines.first(stores, "SELECT max(id) FROM deliveries"))[0]


async def end_by(stores: Stores, ending: str, c: int, segment: int) -> None:
    if ending == "close_segment":  # the valve: expired, idle, malformed, a group
        await stores.modes.close_segment(segment, NOW + 1, "idle")
    elif ending == "close_open_segments":  # /normal
        await stores.modes.close_open_segments(c, NOW + 1, "user")
    elif ending == "close_crash_open_segments":  # the next start
        await stores.modes.close_crash_open_segments(None, now=NOW + 1)
    elif ending == "delete_expired_segments":  # the sweep, a read, the start
        await stores.modes.delete_expired_segments(NOW + 61)
    else:  # /forget private
        await stores.lifetime.delete_segments_of(c, NOW + 1)


ENDINGS = [
    "close_segment",
    "close_open_segments",
    "close_crash_open_segments",
    "delete_expired_segments",
    "delete_segments_of",
]


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("status", ["streaming", "pending"])
async def test_every_end_of_an_interval_turns_what_its_unsent_answer_showed_into_one_constant_line(
    stores: Stores, ending: str, status: str
) -> None:
    c = await conversation(stores)
    segment = await stores.modes.open_segment(c, NOW, NOW + 60)
    shown = await plant_reply(stores, c, segment.id, shown="7001 7002", status=status)
    unshown = await plant_reply(stores, c, segment.id, shown=None, status="pending")
    await end_by(stores, ending, c, segment.id)
    # In the same transaction as the end: it left the interval as the constant line for the messages
    # shown, due now, holding none of the answer's words; the answer that showed nothing is never sent.
    rows = await engines.rows(
        stores,
        "SELECT id, segment_id, message_id, status, text, retracts, streamed_ids, parts_sent FROM deliveries ORDER BY id",
    )
    retraction = (shown, None, None, "pending", copy.INTERVAL_ENDED_SHOWN, 1, "7001 7002", 0)
    settled = [tuple(r) for r in rows if r["id"] == unshown]
    assert [tuple(r) for r in rows if r["id"] == shown] == [retraction]
    assert settled in ([], [(unshown, segment.id, None, "failed", None, 0, None, 0)])  # or gone with its interval
    outbox = stores.outbox
    assert await outbox.due(frozenset({"telegram"}), NOW + 61) == [(c, shown)]
    assert not (await traces(stores, CANARY)).deliveries


async def test_a_retraction_is_deleted_once_sent_or_given_up(stores: Stores) -> None:
    c = await conversation(stores)
    segment = await stores.modes.open_segment(c, NOW, None)
    first = await plant_reply(stores, c, segment.id, shown="7001", status="pending")
    second = await plant_reply(stores, c, segment.id, shown="7002", status="pending")
    await stores.modes.close_open_segments(c, NOW + 1, "user")
    outbox = stores.outbox
    await outbox.mark_sent(first, 1, NOW + 2)
    await outbox.mark_failed(second, 0, "Forbidden", NOW + 2)
    assert await engines.rows(stores, "SELECT id FROM deliveries") == []  # no trace kept for the week of settled rows


async def test_the_outbox_never_picks_a_delivery_whose_interval_was_closed(stores: Stores) -> None:
    c = await conversation(stores)
    segment = await stores.modes.open_segment(c, NOW, None)
    await stores.modes.close_open_segments(c, NOW + 1, "user")
    # A row of the interval written past its end's transaction (a careless writer): never sent.
    await plant_delivery(stores, c, "reply", segment.id)
    (delivery,) = [r[0] for r in await engines.rows(stores, "SELECT id FROM deliveries")]
    outbox = stores.outbox
    assert await outbox.due(frozenset({"telegram"}), NOW + 2) == []
    assert await outbox.pending_of(c, delivery, NOW + 2) == []


async def test_a_reply_of_an_ended_interval_holds_back_no_later_stream_and_none_of_it_streams(
    stores: Stores,
) -> None:
    c = await conversation(stores)
    segment = await stores.modes.open_segment(c, NOW, NOW + 60)
    outbox = stores.outbox
    private = await outbox.open_stream(c, TARGET, NOW + 1, segment_id=segment.id)
    assert private.ends_at == NOW + 60  # the expiry, read with the row
    assert await outbox.may_stream(private.delivery_id, NOW + 59)
    assert not await outbox.may_stream(private.delivery_id, NOW + 60)  # expired: nothing more is shown
    await stores.modes.close_open_segments(c, NOW + 61, "user")
    await plant_delivery(stores, c, "reply", segment.id)  # left pending in an ended interval (never sent) ...
    normal = await outbox.open_stream(c, TARGET, NOW + 62, segment_id=None)
    assert await outbox.may_stream(normal.delivery_id, NOW + 62)  # ... holds back no later reply


async def test_no_reply_is_written_or_shown_for_an_interval_that_ended_while_its_turn_ran(stores: Stores) -> None:
    c = await conversation(stores)
    expired = await stores.modes.open_segment(c, NOW, NOW + 60)
    with pytest.raises(IntervalEnded):
        await stores.timeline.record_reply(
            c, CANARY, NOW + 60, stored_text=CANARY, segment_id=expired.id, target=TARGET
        )
    with pytest.raises(IntervalEnded):
        await stores.outbox.open_stream(c, TARGET, NOW + 60, segment_id=expired.id)
    await stores.modes.close_open_segments(c, NOW + 61, "user")
    closed = await stores.modes.open_segment(c, NOW + 62, None)
    await stores.modes.close_open_segments(c, NOW + 63, "user")
    with pytest.raises(IntervalEnded):
        await stores.timeline.record_reply(c, CANARY, NOW + 64, stored_text=CANARY, segment_id=closed.id, target=TARGET)
    assert await engines.rows(stores, "SELECT id FROM deliveries") == []
    assert await engines.ids_saying(stores, "messages", CANARY) == []


async def test_a_reply_of_an_open_interval_is_never_withdrawn(stores: Stores) -> None:
    c = await conversation(stores)
    segment = await stores.modes.open_segment(c, NOW, NOW + 60)
    row = await plant_reply(stores, c, segment.id, shown="7001", status="pending")
    outbox = stores.outbox
    assert await outbox.retract(row, c, TARGET, ("7001",), NOW + 59) is None
    assert [tuple(r) for r in await engines.rows(stores, "SELECT status, retracts FROM deliveries")] == [("pending", 0)]
    retraction = await outbox.retract(row, c, TARGET, ("7001", "7002"), NOW + 60)  # expired now
    assert retraction is not None and retraction.retracts and retraction.segment_id is None
    assert (retraction.text, retraction.streamed) == (copy.INTERVAL_ENDED_SHOWN, ("7001", "7002"))
