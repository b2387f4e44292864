"""Nothing lingers, and the mode read never starves: checkpoints that wait for no reader and
hold no store lock, owed in a durable flag until one empties the WAL (issue 10)."""

from __future__ import annotations

import asyncio

import pytest

from adapters.storage.privacy import CHECKPOINT_OWED
from bot.bootstrap import build_companion
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows, conversation_of, say, segments_of
from tests.helpers.reader import SnapshotReader, WriteHolder, files_holding
from tests.helpers.waiting import wait_for

CANARY = b"CHECKPOINT-CANARY-7"


def holding_canary(stores) -> list[str]:
    """Which of the database file and its -wal (and -shm) file hold the canary in their raw bytes."""
    files = [
        p for p in engines.sqlite_file(stores).parent.iterdir() if p.name.startswith(engines.sqlite_file(stores).name)
    ]
    return sorted(p.name for p in files_holding(files, CANARY))


async def two_private_conversations(companion, stores):
    """Conversation A holds the canary in an interval expiring in 1h; B stays private."""
    await say(companion, "normal line")
    await say(companion, f"/private {PASSPHRASE} 1h")
    await say(companion, f"secret {CANARY.decode()}")
    await say(companion, "/normal")
    await say(companion, f"/private {PASSPHRASE} never", chat="other")
    other = await conversation_of(companion, chat="other")
    (segment,) = await segments_of(stores, other.id)
    return other, segment


async def delete_while_reading_the_mode(companion, stores, clock, other, segment, how: str) -> None:
    """Run the deletion, and read the other conversation's mode over and over meanwhile: every
    read must return its open segment within the valve's 2 s, whatever the checkpoint waits for."""
    if how == "expiry":
        clock.advance(3601)
        deletion = asyncio.create_task(companion.sweep())
    else:
        deletion = asyncio.create_task(say(companion, "/forget private"))
    try:
        while True:
            read = await asyncio.wait_for(stores.modes.open_segment_of(other.id), 2)
            assert read is not None and read.id == segment.id
            if deletion.done():
                break
    finally:
        await asyncio.gather(deletion, return_exceptions=True)
    await deletion


@pytest.mark.parametrize("how", ["expiry", "forget"])
async def test_deleted_private_text_leaves_db_and_wal_once_a_reader_lets_go(companion, stores, clock, how):
    other, segment = await two_private_conversations(companion, stores)
    with SnapshotReader(engines.sqlite_file(stores)) as reader:
        await delete_while_reading_the_mode(companion, stores, clock, other, segment, how)
        assert await all_rows(stores, "SELECT count(*) FROM segments") == [(1,)]
        # The reader's snapshot still needs the old pages: the text is there, and the debt is recorded.
        assert holding_canary(stores), "the reader did not hold the deleted text back; the test proves nothing"
        assert await stores.modes.get_adapter_state(CHECKPOINT_OWED) is not None
        reader.release()
    await companion.sweep()
    assert holding_canary(stores) == []
    assert await stores.modes.get_adapter_state(CHECKPOINT_OWED) is None


async def test_an_owed_checkpoint_survives_a_restart_and_the_start_finishes_it(companion, stores, provider, clock):
    other, segment = await two_private_conversations(companion, stores)
    with SnapshotReader(engines.sqlite_file(stores)) as reader:
        await delete_while_reading_the_mode(companion, stores, clock, other, segment, "expiry")
        await stores.database.aclose()
        await stores.database.start()  # reopened before the reader leaves, so its close is not the last one
        reader.release()
    assert await stores.modes.get_adapter_state(CHECKPOINT_OWED) is not None
    assert holding_canary(stores)
    restarted = build_companion(stores, provider, companion.config, clock=clock)
    await restarted.start()
    assert holding_canary(stores) == []
    assert await stores.modes.get_adapter_state(CHECKPOINT_OWED) is None


async def test_expired_artifacts_are_gone_after_a_restart_without_any_sweep(make_companion, stores, provider, clock):
    companion = await make_companion(allow_private_export=True, artifact_retention_seconds=86400.0)
    await say(companion, f"/private {PASSPHRASE} never")
    await say(companion, f"crossing {CANARY.decode()}")
    await say(companion, "/export")
    assert "Created non-private artifact" in (await say(companion, "/export confirm")).text
    await say(companion, "/normal")
    await say(companion, "/forget private")  # the interval goes; the artifact has its own retention
    assert await all_rows(stores, "SELECT count(*) FROM artifacts") == [(1,)]
    assert holding_canary(stores), "the artifact's text must be on disk before its expiry"
    clock.advance(86401)
    restarted = build_companion(stores, provider, companion.config, clock=clock)
    await restarted.start()
    assert await all_rows(stores, "SELECT count(*) FROM artifacts") == [(0,)]
    assert holding_canary(stores) == []


async def test_the_mode_read_never_queues_behind_a_write_waiting_for_another_process(
    companion, stores, clock, monkeypatch
):
    """A second process holds the write lock for longer than the valve's read timeout; a write
    of ours waits for it, and the mode read meanwhile still answers with the open segment."""
    other, segment = await two_private_conversations(companion, stores)
    takers: list[asyncio.Task | None] = []
    acquire = stores.database.lock.acquire

    async def counted_acquire() -> bool:
        takers.append(asyncio.current_task())
        return await acquire()

    monkeypatch.setattr(stores.database.lock, "acquire", counted_acquire)
    with WriteHolder(engines.sqlite_file(stores)) as holder:
        waiting = asyncio.create_task(stores.modes.set_adapter_state("ours", "1", clock.now()))
        try:
            # The write takes the store's lock once per try of BEGIN IMMEDIATE: a second take
            # means the first try was refused, so the write is now waiting for the other process.
            await wait_for(lambda: takers.count(waiting) >= 2 or waiting.done(), what="a second try of the write")
            assert not waiting.done()
            for _ in range(3):
                read = await asyncio.wait_for(stores.modes.open_segment_of(other.id), 2)
                assert read is not None and read.id == segment.id
            await asyncio.sleep(1.0)  # together: longer than the valve's 2 s read timeout
            read = await asyncio.wait_for(stores.modes.open_segment_of(other.id), 2)
            assert read is not None and read.id == segment.id
            holder.release()
            await waiting  # and the write goes through once the other process lets go
        finally:
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
    assert await stores.modes.get_adapter_state("ours") == "1"


async def test_the_mode_read_does_not_queue_behind_the_stores_own_writes(companion, stores):
    """Under load the writer is busy with commits (each fsynced); the mode read must not wait for
    them, or the valve's timeout would turn messages away."""
    other, segment = await two_private_conversations(companion, stores)
    async with stores.database.lock:  # the writer is in the middle of someone else's transaction
        read = await asyncio.wait_for(stores.modes.open_segment_of(other.id), 1)
    assert read is not None and read.id == segment.id


async def test_a_write_gives_up_with_a_clear_error_when_another_process_keeps_the_lock(stores, clock, monkeypatch):
    from core.values.errors import StoreError

    monkeypatch.setattr(stores.database, "busy_seconds", 0.3)
    with WriteHolder(engines.sqlite_file(stores)), pytest.raises(StoreError, match="locked by another process"):
        await stores.modes.set_adapter_state("ours", "1", clock.now())
    assert await stores.modes.get_adapter_state("ours") is None
