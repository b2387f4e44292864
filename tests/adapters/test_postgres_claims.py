"""Chat claims on a shared PostgreSQL database (issue 33): a conversation is held by one live process; a dead
holder's claim is taken over under a new fence; the schema's fence refuses the writes of a process that lost it;
and start-up recovery leaves alone what a live process holds (its private interval stays open), while a take-over
closes a dead process's interval into normal mode, never resumed."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from adapters.storage.keys import KeyDirError
from adapters.storage.postgres.engine import PostgresDatabase
from adapters.storage.postgres.processes import SharedInstanceLock
from adapters.storage.stores import Stores
from core.ports.store.claims import Claim
from core.values.errors import ClaimLost
from core.values.model import ConversationKey
from tests.adapters.test_postgres_processes import alive
from tests.helpers.postgres import PostgresCluster

PROCESS = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'companion run pid {pid}'"


class Process:
    """A registered process of the shared database and its stores (its own key folder), as `companion run`
    has them; `kill` ends its registration's connection as a SIGKILL would (its key released at once)."""

    def __init__(self, url: str, lock: SharedInstanceLock, stores: Stores) -> None:
        self.url, self.lock, self.stores = url, lock, stores

    @property
    def id(self) -> int:
        assert self.lock.process_id is not None
        return self.lock.process_id

    async def kill(self) -> None:
        held = self.lock._held  # the test ends the registration's connection from outside
        assert held is not None
        await held.conn.close()
        # Its server process exits (its key released) a moment after the connection closes.
        async with asyncio.timeout(30):
            while True:
                if self.id not in await alive(self.url):
                    break
                await asyncio.sleep(0.01)


@asynccontextmanager
async def process(url: str, keys: Path) -> AsyncIterator[Process]:
    lock = SharedInstanceLock(url, beat=3600)  # the beat is not what these tests are about
    await lock.acquire()
    database = PostgresDatabase(url, key_dir=keys, process_id=lock.process_id)
    stores = Stores.over(database, process_id=lock.process_id)
    await database.start()
    try:
        yield Process(url, lock, stores)
    finally:
        await database.aclose()
        await lock.aclose()


async def conversation(stores: Stores, chat_id: str = "1") -> int:
    found = await stores.timeline.ensure_conversation(ConversationKey("telegram", chat_id), "direct", None, time.time())
    return found.id


async def test_one_live_process_holds_a_conversation_and_a_dead_ones_claim_is_taken_over_under_a_new_fence(
    postgres_url: str, tmp_path: Path
) -> None:
    async with process(postgres_url, tmp_path / "a") as a, process(postgres_url, tmp_path / "b") as b:
        assert a.stores.claims is not None and b.stores.claims is not None
        chat = await conversation(a.stores)
        assert await a.stores.claims.claim(chat) == Claim(chat, 1, taken_over=False)
        assert await b.stores.claims.claim(chat) is None  # a live holder keeps it
        assert await b.stores.claims.take_over_dead() == []
        await a.kill()
        # A process serving other platforms leaves it to one that receives its events.
        assert await b.stores.claims.take_over_dead(frozenset({"discord"})) == []
        assert await b.stores.claims.claim(chat) == Claim(chat, 2, taken_over=True)
        assert await b.stores.claims.claim(chat) == Claim(chat, 2, taken_over=False)  # held since


async def test_the_fence_refuses_the_writes_of_a_process_that_lost_the_conversation(
    postgres_url: str, tmp_path: Path
) -> None:
    async with process(postgres_url, tmp_path / "a") as a, process(postgres_url, tmp_path / "b") as b:
        assert a.stores.claims is not None and b.stores.claims is not None
        chat = await conversation(a.stores)
        await a.stores.claims.claim(chat)
        await a.stores.timeline.add_inbound(
            chat, "mine", time.time(), segment_id=None, account_id=None, platform_message_id="1"
        )
        # B takes it over (A counted dead), while A's pools still run: what A writes of it now is refused whole.
        await a.lock.aclose()
        assert await b.stores.claims.claim(chat) is not None
        with pytest.raises(ClaimLost):
            await a.stores.timeline.add_inbound(
                chat, "too late", time.time(), segment_id=None, account_id=None, platform_message_id="2"
            )
        await b.stores.timeline.add_inbound(
            chat, "b's", time.time(), segment_id=None, account_id=None, platform_message_id="3"
        )


async def test_a_live_processes_private_interval_is_left_open_and_a_dead_ones_is_closed_into_normal_mode(
    postgres_cluster: PostgresCluster, postgres_url: str, tmp_path: Path
) -> None:
    async with process(postgres_url, tmp_path / "a") as a:
        assert a.stores.claims is not None
        chat = await conversation(a.stores)
        await a.stores.claims.claim(chat)
        segment = await a.stores.modes.open_segment(chat, time.time(), None)
        async with process(postgres_url, tmp_path / "b") as b:
            assert b.stores.claims is not None
            # B's start: A is alive, so its interval is neither closed as crash-open nor as keyless (B has no key).
            assert await b.stores.modes.close_crash_open_segments(now=time.time()) == []
            assert (await a.stores.modes.open_segment_of(chat)) == segment
            await a.kill()
            taken = await b.stores.claims.take_over_dead()
            assert [claim.conversation_id for claim in taken] == [chat]
            assert await b.stores.modes.close_taken_over([chat], time.time()) == [chat]
            name = postgres_url.split("/")[3].split("?")[0]
            assert postgres_cluster.execute(f"SELECT end_reason FROM segments WHERE id = {segment.id}", name) == [
                ("restart",)
            ]
            assert await b.stores.modes.open_segment_of(chat) is None  # normal mode; nothing resumed it


async def test_two_processes_claiming_one_conversation_at_once_get_one_claim(postgres_url: str, tmp_path: Path) -> None:
    async with process(postgres_url, tmp_path / "a") as a, process(postgres_url, tmp_path / "b") as b:
        assert a.stores.claims is not None and b.stores.claims is not None
        chats = [await conversation(a.stores, str(n)) for n in range(20)]
        for chat in chats:
            got = await asyncio.gather(a.stores.claims.claim(chat), b.stores.claims.claim(chat))
            assert sum(claim is not None for claim in got) == 1


async def test_each_slot_of_a_scheduled_job_runs_in_one_process_only(postgres_url: str, tmp_path: Path) -> None:
    from bot.scheduler import Job, once_across

    async with process(postgres_url, tmp_path / "a") as a, process(postgres_url, tmp_path / "b") as b:
        assert a.stores.job_slots is not None and b.stores.job_slots is not None
        ran: list[str] = []

        def job(who: str) -> Job:
            async def tick() -> None:
                ran.append(who)

            # An hour a slot: every tick of this test falls in one slot.
            return once_across(Job("proactive", 3600.0, tick), slots[who].take)

        slots = {"a": a.stores.job_slots, "b": b.stores.job_slots}
        for _ in range(3):
            await asyncio.gather(job("a").callback(), job("b").callback())
        assert len(ran) == 1
        swept: list[str] = []

        async def sweep() -> None:
            swept.append("b")

        # Another job has slots of its own: its first tick runs.
        await once_across(Job("expiry-sweep", 3600.0, sweep), slots["b"].take).callback()
        assert swept == ["b"]


async def test_a_process_takes_no_inbox_row_of_a_chat_another_process_holds(postgres_url: str, tmp_path: Path) -> None:
    keys = tmp_path / "keys"  # one key folder for both: either may open the other's rows
    async with process(postgres_url, keys) as a, process(postgres_url, keys) as b:
        assert a.stores.claims is not None
        held_by_a = await conversation(a.stores, "10")
        assert await a.stores.claims.claim(held_by_a) is not None
        for update_id, chat in ((1, "10"), (2, "20"), (3, "10"), (4, None)):
            assert await b.stores.inbox.put("telegram", update_id, json.dumps({"update_id": update_id}), chat)
        # B: not A's chat's rows (not even opened), the rest in order; A: all of them (its own and the free ones).
        assert [(r.update_id, r.chat_id) for r in await b.stores.inbox.take("telegram", 10)] == [(2, "20"), (4, None)]
        assert [r.update_id for r in await a.stores.inbox.take("telegram", 10)] == [1, 2, 3, 4]
        await a.kill()
        # Its holder dead: left for the take-over job, which takes the conversation with its recovery.
        assert [r.update_id for r in await b.stores.inbox.take("telegram", 10)] == [2, 4]
        assert b.stores.claims is not None and await b.stores.claims.take_over_dead()
        assert [r.update_id for r in await b.stores.inbox.take("telegram", 10)] == [1, 2, 3, 4]


async def test_the_first_live_process_sets_the_webhook_and_the_last_removes_it(
    postgres_url: str, tmp_path: Path
) -> None:
    async with process(postgres_url, tmp_path / "a") as a:
        assert a.stores.claims is not None
        assert await a.stores.claims.first_alive() and await a.stores.claims.last_alive()
        async with process(postgres_url, tmp_path / "b") as b:
            assert b.stores.claims is not None
            assert await a.stores.claims.first_alive() and not await b.stores.claims.first_alive()
            assert not await a.stores.claims.last_alive() and not await b.stores.claims.last_alive()
        assert await a.stores.claims.last_alive()


async def test_every_process_must_use_the_transit_folder_of_the_others(postgres_url: str, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    async with process(postgres_url, shared) as a, process(postgres_url, shared) as b:
        await a.stores.inbox.bind_transit_folder(others_alive=True)
        await b.stores.inbox.bind_transit_folder(others_alive=True)  # the same folder: its mark is the database's
        async with process(postgres_url, tmp_path / "own") as c:
            with pytest.raises(KeyDirError, match="another transit key folder"):
                await c.stores.inbox.bind_transit_folder(others_alive=True)
            # Alone (the others gone), a folder of its own becomes the database's: the old rows drop fail-closed.
            await c.stores.inbox.bind_transit_folder(others_alive=False)
        with pytest.raises(KeyDirError):
            await a.stores.inbox.bind_transit_folder(others_alive=True)
