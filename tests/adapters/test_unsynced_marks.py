"""A mark committed without an fsync (a delivery marked sent) that meets another process's write
lock waits for it, and every commit after it is fsynced again."""

from __future__ import annotations

import asyncio
import sqlite3

from core.values.model import ConversationKey, DeliveryTarget
from tests.helpers import engines


async def test_an_unsynced_mark_that_meets_another_writer_waits_and_every_later_commit_is_full_again(stores, tmp_path):
    conversation = await stores.timeline.ensure_conversation(ConversationKey("telegram", "1"), "group", None, 0.0)
    delivery_id = (
        await stores.timeline.record_reply(conversation.id, "hi", 0.0, target=DeliveryTarget("telegram", "1"))
    ).delivery_id
    other = sqlite3.connect(tmp_path / "companion.db", isolation_level=None)  # another process: a backup, a chat
    try:
        other.execute("BEGIN IMMEDIATE")
        mark = asyncio.ensure_future(stores.outbox.mark_sent(delivery_id, 1, 1.0))
        for _ in range(20):  # let it meet the lock (it retries until the other writer is done)
            await asyncio.sleep(0.01)
        assert (await engines.first(stores, "PRAGMA synchronous"))[0] == 2  # FULL between its tries
        other.execute("COMMIT")
        await asyncio.wait_for(mark, 10)
    finally:
        other.close()
    assert (await engines.first(stores, "PRAGMA synchronous"))[0] == 2  # FULL
    assert [tuple(r) for r in await engines.rows(stores, "SELECT status FROM deliveries")] == [("sent",)]
