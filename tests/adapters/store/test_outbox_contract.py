"""OutboxQueries' contract (adapters/storage/outbox.py) on SQLite and PostgreSQL: nothing of an ended interval is
ever due or streamed, retractions replace what an ended interval showed, marks settle rows without their text."""

from __future__ import annotations

import pytest

from adapters.storage.engine import Database, Fetch, Statement
from adapters.storage.outbox import OutboxQueries, delivery_row
from adapters.storage.sealing import sealed
from core.values.copy import INTERVAL_ENDED_SHOWN
from core.values.model import DeliveryTarget
from tests.adapters.store.seed import conversation, count, end_segment, insert, open_segment, person

pytestmark = pytest.mark.engines

NOW = 100.0
TELEGRAM = frozenset({"telegram"})


async def _delivery(engine: Database, chat: int, text: str, *, segment: int | None = None, at: float = 1.0) -> int:
    (made,) = await engine.write(
        delivery_row(
            chat,
            DeliveryTarget("telegram", str(chat)),
            sealed(engine.sealer, segment, "deliveries.text", text),
            at,
            segment_id=segment,
        )
    )
    return int(made.scalar)


async def _streaming(engine: Database, chat: int, *, segment: int | None = None, at: float = 1.0) -> int:
    return await insert(
        engine,
        "INSERT INTO deliveries (conversation_id, segment_id, kind, platform, chat_id, nonce, status,"
        " next_attempt_at, created_at) VALUES (:c, :s, 'reply', 'telegram', :chat, 'n', 'streaming', :at, :at)",
        c=chat,
        s=segment,
        chat=str(chat),
        at=at,
    )


async def _row(engine: Database, delivery: int) -> dict[str, object] | None:
    (found,) = await engine.read(
        Statement(
            "SELECT status, text, segment_id, retracts, attempts, error FROM deliveries WHERE id = :id",
            {"id": delivery},
            Fetch.ONE,
        )
    )
    return dict(found.one) if found.one is not None else None


async def test_a_pending_delivery_of_an_ended_interval_is_never_due(engine: Database) -> None:
    outbox = OutboxQueries(engine)
    owner = await person(engine)
    ended_chat = await conversation(engine, owner, chat="10")
    expired_chat = await conversation(engine, owner, chat="11")
    open_chat = await conversation(engine, owner, chat="12")
    normal_chat = await conversation(engine, owner, chat="13")
    ended = await open_segment(engine, ended_chat)
    expired = await open_segment(engine, expired_chat)
    live = await open_segment(engine, open_chat)
    of_ended = await _delivery(engine, ended_chat, "private answer", segment=ended)
    await _delivery(engine, expired_chat, "private answer", segment=expired)
    of_open = await _delivery(engine, open_chat, "private answer", segment=live)
    normal = await _delivery(engine, normal_chat, "normal answer")
    streaming = await _streaming(engine, ended_chat, segment=ended)
    await end_segment(engine, ended)  # ended without its rows settled yet (a crash between, or a race)
    await engine.write(Statement("UPDATE segments SET expires_at = :at WHERE id = :s", {"at": NOW, "s": expired}))

    due = await outbox.due(TELEGRAM, NOW)

    assert sorted(due) == sorted([(open_chat, of_open), (normal_chat, normal)])
    assert await outbox.pending_of(ended_chat, of_ended, NOW) == []
    assert [d.id for d in await outbox.pending_of(open_chat, of_open, NOW)] == [of_open]
    assert not await outbox.may_stream(streaming, NOW)
    assert await outbox.due(frozenset(), NOW) == []
    assert await outbox.due(frozenset({"discord"}), NOW) == []


async def test_an_earlier_pending_delivery_holds_a_stream_back_unless_its_interval_ended(engine: Database) -> None:
    outbox = OutboxQueries(engine)
    chat = await conversation(engine, await person(engine))
    segment = await open_segment(engine, chat)
    earlier = await _delivery(engine, chat, "first", segment=segment)
    stream = await _streaming(engine, chat, segment=segment)

    assert not await outbox.may_stream(stream, 5.0)
    await outbox.mark_failed(earlier, 0, "refused", 5.0)
    assert await outbox.may_stream(stream, 5.0)
    assert (await outbox.lane_of(stream)) == ("telegram", str(chat))
    assert await outbox.lane_of(999) is None


async def test_an_ended_intervals_shown_answer_becomes_its_retraction_and_nothing_else(engine: Database) -> None:
    outbox = OutboxQueries(engine)
    chat = await conversation(engine, await person(engine))
    target = DeliveryTarget("telegram", str(chat))
    segment = await open_segment(engine, chat)
    stream = await _streaming(engine, chat, segment=segment)

    assert await outbox.retract(stream, chat, target, ("m1", "m2"), 5.0) is None  # still open: nothing changes
    await end_segment(engine, segment)
    retraction = await outbox.retract(stream, chat, target, ("m1", "m2"), 25.0)

    assert retraction is not None and retraction.id == stream and retraction.retracts
    assert retraction.text == INTERVAL_ENDED_SHOWN and retraction.streamed == ("m1", "m2")
    assert retraction.segment_id is None and not retraction.in_segment
    assert await outbox.retractions() == [(chat, stream)] == await outbox.retractions(chat)
    assert await outbox.retractions(chat + 1) == []
    await outbox.mark_failed(stream, 0, "gone", 26.0)
    assert await _row(engine, stream) is None  # a settled retraction is forgotten at once


async def test_a_retraction_of_a_row_its_interval_took_is_written_only_outside_an_interval(engine: Database) -> None:
    outbox = OutboxQueries(engine)
    chat = await conversation(engine, await person(engine))
    target = DeliveryTarget("telegram", str(chat))
    segment = await open_segment(engine, chat)

    assert await outbox.retract(999, chat, target, ("m1",), 5.0) is None  # an interval is open: not written
    assert await outbox.retract(999, chat, target, (), 5.0) is None
    await end_segment(engine, segment)
    written = await outbox.retract(999, chat, target, ("m1",), 25.0)

    assert written is not None and written.retracts and written.streamed == ("m1",)
    assert written.text == INTERVAL_ENDED_SHOWN
    assert await count(engine, "SELECT count(*) FROM deliveries") == 1


async def test_marks_settle_a_delivery_and_drop_its_text(engine: Database) -> None:
    outbox = OutboxQueries(engine)
    chat = await conversation(engine, await person(engine))
    retried = await _delivery(engine, chat, "answer")
    failed = await _delivery(engine, chat, "other")

    await outbox.append_text(retried, "\nnote")
    await outbox.mark_retry(retried, 1, "x" * 100, 50.0)
    await outbox.append_text(retried, "\nlate")  # a part went out: not changed
    await outbox.mark_failed(failed, 0, "refused", 5.0)

    assert await _row(engine, retried) == {
        "status": "pending",
        "text": "answer\nnote",
        "segment_id": None,
        "retracts": 0,
        "attempts": 1,
        "error": "x" * 64,
    }
    assert (await _row(engine, failed) or {})["text"] is None
    assert await outbox.due(TELEGRAM, 49.0) == [] and await outbox.due(TELEGRAM, 50.0) == [(chat, retried)]
    assert await outbox.prune_settled(5.0) == 0 and await outbox.prune_settled(6.0) == 1
    report = await outbox.report(NOW)
    assert report["deliveries"] == [("reply", "pending", 1)] and report["oldest_pending_age"] == NOW - 1.0
    assert report["streamed"] == 0 and report["bindings"] == []


async def _mirrored(engine: Database, *texts: str) -> tuple[int, list[int]]:
    """A conversation bound to discord:77, with a pending mirror copy of each of `texts`."""
    chat = await conversation(engine, await person(engine))
    binding = await insert(
        engine,
        "INSERT INTO bindings (conversation_id, platform, chat_id, created_at) VALUES (:c, 'discord', '77', 1.0)",
        c=chat,
    )
    copies = [
        await insert(
            engine,
            "INSERT INTO deliveries (conversation_id, kind, platform, chat_id, nonce, text, binding_id,"
            " next_attempt_at, created_at) VALUES (:c, 'mirror', 'discord', '77', 'n', :t, :b, 1.0, 1.0)",
            c=chat,
            t=text,
            b=binding,
        )
        for text in texts
    ]
    return chat, copies


async def test_a_mirror_given_up_disables_its_binding_once_and_tells_the_source(engine: Database) -> None:
    outbox = OutboxQueries(engine)
    chat, copies = await _mirrored(engine, "one", "two")

    notice = await outbox.give_up_mirror(copies[0], 0, "forbidden", 5.0, "cannot post to {target}: {reason}")

    assert notice is not None
    assert [(await _row(engine, c) or {})["status"] for c in copies] == ["failed", "failed"]
    assert [d.text for d in await outbox.pending_of(chat, notice, 5.0)] == ["cannot post to discord:77: forbidden"]
    assert await outbox.give_up_mirror(copies[1], 0, "forbidden", 6.0, "again {target}") is None
    assert (await outbox.report(NOW))["bindings"] == [("disabled", 1)]


async def test_a_give_up_notice_written_while_private_belongs_to_the_open_interval(engine: Database) -> None:
    outbox = OutboxQueries(engine)
    chat, (copy,) = await _mirrored(engine, "one")
    segment = await open_segment(engine, chat)

    notice = await outbox.give_up_mirror(copy, 0, "forbidden", 15.0, "cannot post to {target}")

    assert notice is not None and (await _row(engine, notice) or {})["segment_id"] == segment


async def test_streams_cut_off_by_a_stop_are_finished_or_forgotten(engine: Database) -> None:
    outbox = OutboxQueries(engine)
    chat = await conversation(engine, await person(engine))
    showed = await _streaming(engine, chat, at=1.0)
    await engine.write(Statement("UPDATE deliveries SET streamed_ids = 'm1' WHERE id = :id", {"id": showed}))
    await _streaming(engine, chat, at=2.0)  # showed nothing: forgotten
    recent = await _streaming(engine, chat, at=9.0)

    assert await outbox.left_stream(chat, 5.0) == showed + 1
    assert await outbox.cut_off_streams(5.0, "cut off", 10.0) == [(chat, showed)]
    assert (await _row(engine, showed) or {})["text"] == "cut off"
    assert await outbox.left_stream(chat, 5.0) is None
    assert await outbox.left_stream(chat, 10.0) == recent
    assert await count(engine, "SELECT count(*) FROM deliveries") == 2
