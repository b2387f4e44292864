"""BindingQueries' contract (adapters/storage/bindings.py) on SQLite and PostgreSQL: a private conversation gets no
binding and no mirror row; a binding removed takes its pending copies with it."""

from __future__ import annotations

import pytest

from adapters.storage.bindings import BindingQueries, mirror_rows
from adapters.storage.engine import Database, Fetch, Statement
from core.values.errors import PrivateWriteRefused
from core.values.model import MirrorOf
from tests.adapters.store.seed import conversation, count, end_segment, message, open_segment, person

pytestmark = pytest.mark.engines


async def test_a_private_conversation_never_gets_a_binding(engine: Database) -> None:
    bindings = BindingQueries(engine)
    chat = await conversation(engine, await person(engine))
    made = await bindings.add_binding(chat, "discord", "9", 1.0)
    await engine.write(
        Statement(
            "UPDATE bindings SET state = 'disabled', disabled_reason = 'forbidden', disabled_at = 2.0 WHERE id = :b",
            {"b": made.id},
        )
    )
    segment = await open_segment(engine, chat)

    with pytest.raises(PrivateWriteRefused):
        await bindings.add_binding(chat, "discord", "10", 11.0)
    with pytest.raises(PrivateWriteRefused):
        await bindings.add_binding(chat, "discord", "9", 11.0)  # nor one made active again

    assert [(b.chat_id, b.state) for b in await bindings.bindings_of(chat)] == [("9", "disabled")]
    await end_segment(engine, segment)
    again = await bindings.add_binding(chat, "discord", "9", 21.0)
    assert (again.id, again.state, again.reason) == (made.id, "active", None)
    with pytest.raises(PrivateWriteRefused):
        await bindings.add_binding(chat + 100, "discord", "9", 21.0)  # no such conversation


async def test_no_mirror_row_for_a_private_reply_or_while_an_interval_is_open(engine: Database) -> None:
    bindings = BindingQueries(engine)
    chat = await conversation(engine, await person(engine))
    await bindings.add_binding(chat, "discord", "9", 1.0)
    await bindings.add_binding(chat, "slack", "3", 1.0)
    asked = await message(engine, chat, "what is new?")
    answer = await message(engine, chat, "all is well", role="assistant")
    mirror = MirrorOf(asked, "telegram DM")

    (normal,) = await engine.write(mirror_rows(chat, answer, mirror, 2.0))
    assert len(normal.rows) == 2
    segment = await open_segment(engine, chat)
    secret = await message(engine, chat, "a secret answer", segment_id=segment, role="assistant")
    (private,) = await engine.write(mirror_rows(chat, secret, MirrorOf(None, "telegram DM"), 12.0))
    (while_open,) = await engine.write(mirror_rows(chat, answer, mirror, 12.0))

    assert not private.rows and not while_open.rows
    assert await count(engine, "SELECT count(*) FROM deliveries WHERE text LIKE '%secret%'") == 0
    (found,) = await engine.read(Statement("SELECT DISTINCT text FROM deliveries", fetch=Fetch.ALL))
    assert [row["text"] for row in found.rows] == ["[telegram DM] you: what is new?\ncompanion: all is well"]


async def test_a_removed_binding_takes_its_pending_copies_with_it(engine: Database) -> None:
    bindings = BindingQueries(engine)
    chat = await conversation(engine, await person(engine))
    kept = await bindings.add_binding(chat, "discord", "9", 1.0)
    gone = await bindings.add_binding(chat, "slack", "3", 1.0)
    answer = await message(engine, chat, "hello", role="assistant")
    await engine.write(mirror_rows(chat, answer, MirrorOf(None, "telegram DM"), 2.0))

    removed = await bindings.remove_binding(chat, gone.id)

    assert removed is not None and removed.id == gone.id
    assert await bindings.remove_binding(chat, gone.id) is None
    assert await bindings.remove_binding(chat + 1, kept.id) is None  # another conversation's
    assert [b.id for b in await bindings.bindings_of(chat)] == [kept.id]
    assert await count(engine, "SELECT count(*) FROM deliveries WHERE kind = 'mirror'") == 1
