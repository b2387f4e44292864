"""Where the turn pipeline meets sending, moving and stopping (issue 21), in the core with a real
store and fake senders: a reply always has its delivery, a moved chat never waits on itself, and a
stop sends what the last turns wrote exactly once."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from core.turn.companion import Companion
from core.values.model import InboundMessage, Reply
from tests.helpers.boot import boot_companion
from tests.helpers.chat import all_rows
from tests.helpers.fakes import FakeSender
from tests.helpers.waiting import wait_for

USER = "100"
GROUP = "-500"
_ids = itertools.count(1)


class HoldingSender(FakeSender):
    """A platform that takes each message at once but holds its answer until released: a send cut
    off meanwhile was delivered all the same (the window between send and mark)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.release = asyncio.Event()
        self.started = 0

    async def send_delivery(self, delivery) -> int:
        self.started += 1
        parts = await super().send_delivery(delivery)  # taken by the platform ...
        await self.release.wait()  # ... which has not answered yet
        return parts


@pytest.fixture
def telegram() -> FakeSender:
    return FakeSender("telegram")


@pytest.fixture
def boot(stores, provider, clock, passphrase_hash, telegram):
    async def start(*senders: FakeSender, burst_seconds: float = 0.0) -> Companion:
        return await boot_companion(
            stores,
            provider,
            clock,
            passphrase_hash,
            senders or (telegram,),
            platforms=("telegram", "discord"),
            burst_seconds=burst_seconds,
        )

    return start


async def tell(companion: Companion, text: str, chat: str = USER) -> Reply | None:
    message = InboundMessage(
        "telegram", chat, USER, text, is_direct=chat == USER, message_id=f"m{next(_ids)}", user_name="Ann"
    )
    reply = await companion.handle(message)
    if reply is not None and reply.delivery_id is not None and reply.conversation_id is not None:
        companion.outbox.hand_over(reply.conversation_id, reply.delivery_id)  # what an adapter does
    return reply


async def test_a_reply_written_while_its_sender_is_unregistered_still_gets_its_delivery(boot, stores, telegram):
    companion = await boot()
    companion.outbox.unregister(telegram)  # the adapter is stopping, or not started yet
    reply = await tell(companion, "hello")
    assert reply is not None and reply.delivery_id is not None
    assert await all_rows(stores, "SELECT status FROM deliveries") == [("pending",)]
    companion.outbox.register(telegram)  # the next start, or the adapter back
    await companion.outbox.dispatch_due(at_start=True)
    assert telegram.texts() == [reply.text]
    assert await all_rows(stores, "SELECT status FROM deliveries") == [("sent",)]


async def test_a_chat_move_never_waits_on_the_conversation_it_moves(boot, provider, stores):
    companion = await boot()
    await tell(companion, "first, before the model is slow", chat=GROUP)
    provider.gate = asyncio.Event()  # the next turn of the group is at the model
    turn = asyncio.create_task(tell(companion, "a question", chat=GROUP))
    await wait_for(lambda: len(provider.replies()) == 2, what="the turn at the model")
    moved = await asyncio.wait_for(companion.chat_moved("telegram", GROUP, "-100500"), 5)
    assert moved.conversation_id is not None and not moved.refused
    provider.gate.set()
    await turn
    # A later message in the new chat is answered, in the same conversation.
    reply = await asyncio.wait_for(tell(companion, "after the move", chat="-100500"), 5)
    assert reply is not None
    assert await all_rows(stores, "SELECT count(*) FROM conversations") == [(1,)]


async def test_a_send_that_meets_a_moved_chat_does_not_freeze_the_conversation(boot, provider, stores, telegram):
    companion = await boot()

    class MovingSender(FakeSender):
        """Telegram answering ChatMigrated: the send path follows the chat (as the adapter does)."""

        async def send_delivery(self, delivery) -> int:
            if delivery.target.chat_id == GROUP:
                await companion.chat_moved("telegram", GROUP, "-100500")
            return await super().send_delivery(delivery)

    mover = MovingSender("telegram")
    companion.outbox.unregister(telegram)
    companion.outbox.register(mover)
    await tell(companion, "hello group", chat=GROUP)
    await asyncio.wait_for(companion.drain(), 10)
    reply = await asyncio.wait_for(tell(companion, "still there?", chat="-100500"), 5)
    assert reply is not None
    await asyncio.wait_for(companion.drain(), 10)
    assert len(mover.sent) == 2


async def test_a_stop_sends_a_mirror_copy_in_flight_once_and_the_next_start_not_again(boot, stores, clock, telegram):
    discord = HoldingSender("discord")
    companion = await boot(telegram, discord)
    await tell(companion, "hi")
    (conversation_id,) = (await all_rows(stores, "SELECT id FROM conversations"))[0]
    await stores.bindings.add_binding(conversation_id, "discord", "42", clock.now())  # what /mirror stores
    await tell(companion, "copy me")
    await wait_for(lambda: discord.started == 1, what="the mirror copy being sent")
    stopping = asyncio.create_task(companion.stop(5))
    await asyncio.sleep(0.05)
    discord.release.set()  # the target answers while the stop flushes
    await stopping
    assert len(discord.sent) == 1
    assert await all_rows(stores, "SELECT status FROM deliveries WHERE kind = 'mirror'") == [("sent",)]
    restarted = await boot(telegram, discord)
    await restarted.outbox.dispatch_due(at_start=True)
    assert len(discord.sent) == 1


async def test_a_stop_answers_a_held_burst_and_sends_it_before_connections_close(boot, provider, stores, telegram):
    companion = await boot(burst_seconds=60)  # a window that never ends by itself in this test
    for text in ["one", "two"]:
        assert await tell(companion, text) is None  # held for the rest of its burst
    await companion.stop(5)
    assert len(provider.replies()) == 1 and len(telegram.sent) == 1
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE turn = 'open'") == [(0,)]
