"""The claim where a turn begins (a shared database, issue 33): a conversation held elsewhere is not handled here,
and one taken over from a process that died is recovered before its first turn: its private interval closed into
normal mode, never resumed, the person told. Claims are the store's (tests/adapters/test_postgres_claims.py);
here a fake of the port, on the real core and store."""

from __future__ import annotations

import dataclasses

from bot.bootstrap import build_companion
from core.ports.store.claims import Claim
from core.turn.config import CompanionConfig
from core.values import copy
from core.values.edge import Silence, Silent
from core.values.model import InboundMessage
from tests.conftest import PASSPHRASE
from tests.helpers.chat import conversation_of, say, segments_of
from tests.helpers.fakes import FakeProvider


class FakeClaims:
    """Claims as a test sets them: held here, held elsewhere (None), or taken over once."""

    def __init__(self) -> None:
        self.elsewhere = False
        self.take_over_next = False
        self.asked: list[frozenset[str] | None] = []  # the platforms of each take-over
        self.settling: list[str] = []
        self.elsewhere_counts: list[int] = []  # what held_elsewhere answers, in turn (then 0)

    async def claim(self, conversation_id: int) -> Claim | None:
        if self.elsewhere:
            return None
        taken, self.take_over_next = self.take_over_next, False
        return Claim(conversation_id, 2 if taken else 1, taken_over=taken)

    async def take_over_dead(self, platforms: frozenset[str] | None = None) -> list[Claim]:
        self.asked.append(platforms)
        return []

    async def held_elsewhere(self, platform: str) -> int:
        self.settling.append(platform)
        return self.elsewhere_counts.pop(0) if self.elsewhere_counts else 0

    def holds(self, conversation_id: int) -> bool:
        return not self.elsewhere


async def test_a_conversation_taken_over_lands_in_normal_mode_before_its_first_turn_here(
    stores, provider: FakeProvider, clock, passphrase_hash
) -> None:
    claims = FakeClaims()
    companion = build_companion(
        dataclasses.replace(stores, claims=claims),
        provider,
        CompanionConfig(passphrase_hash=passphrase_hash),
        clock=clock,
    )
    await companion.start()
    await say(companion, f"/private {PASSPHRASE}")
    conversation = await conversation_of(companion)
    (segment,) = await segments_of(stores, conversation.id)
    assert segment.ended_at is None
    # Its process died; this one takes the conversation over with the next message.
    claims.take_over_next = True
    reply = await say(companion, "hello again")
    (closed,) = await segments_of(stores, conversation.id)
    assert closed.end_reason == "restart" and closed.ended_at is not None
    assert reply is not None and copy.RESTART_ENDED_PRIVATE in reply.text


async def test_a_conversation_held_by_another_process_is_not_handled_here(stores, provider, clock) -> None:
    claims = FakeClaims()
    claims.elsewhere = True
    companion = build_companion(dataclasses.replace(stores, claims=claims), provider, CompanionConfig(), clock=clock)
    await companion.start()
    future = companion.submit(InboundMessage("terminal", "terminal", "owner", "hello", is_direct=True))
    assert await future == Silent(Silence.HELD_ELSEWHERE)
    assert provider.requests == []


async def test_the_dispatcher_sends_only_the_deliveries_of_conversations_this_process_holds(
    stores, provider, clock, passphrase_hash
) -> None:
    from tests.core.test_outbox import tell
    from tests.helpers.boot import boot_companion
    from tests.helpers.fakes import FakeSender

    sender = FakeSender("telegram", limit=50)
    held: set[int] = set()
    companion = await boot_companion(
        stores, provider, clock, passphrase_hash, [sender], outbox_options={"holds": held.__contains__}
    )
    sender.down = True
    reply = await tell(companion, "hello")  # its delivery left pending
    assert reply is not None
    sender.down = False
    clock.advance(600)
    await companion.outbox.dispatch_due()
    assert sender.texts() == []  # another process holds it: that one sends it
    held.add(reply.conversation_id)
    await companion.outbox.dispatch_due()
    assert sender.texts() == [reply.text]


async def test_a_process_standing_by_for_the_discord_gateway_takes_over_no_discord_conversation_until_it_holds_it(
    stores, provider, clock
) -> None:
    # Discord's events reach only the gateway's holder: a process taking over a Discord conversation before it
    # holds the gateway would keep it from the one that answers it.
    claims = FakeClaims()
    config = CompanionConfig(platforms=frozenset({"discord", "telegram"}), standby=frozenset({"discord"}))
    companion = build_companion(dataclasses.replace(stores, claims=claims), provider, config, clock=clock)
    await companion.start()
    await companion.take_over_dead()
    assert claims.asked == [frozenset({"telegram"}), frozenset({"telegram"})]
    # The gateway taken: its conversations are taken over, again while the last holder still holds some.
    claims.elsewhere_counts = [2, 1]
    await companion.serve("discord", settle=30)
    assert claims.asked[2:] == [frozenset({"discord", "telegram"})] * 3
    assert claims.settling == ["discord"] * 3
