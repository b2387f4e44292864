"""The context a turn reads beside the storing of its message is the context a read after that commit gives."""

from __future__ import annotations

import pytest

from core.memory.context import ContextBudget, ReadAhead
from core.values.model import ContextReads
from core.values.modes import NORMAL, ModeState, PrivateState
from tests.conftest import PASSPHRASE
from tests.helpers.chat import conversation_of, say, segments_of

pytestmark = pytest.mark.engines

# A window of 6 items and a fold due from 2 older messages: the history below is longer than the window, and
# the count that decides a fold is reached, so a window or a count off by one shows.
BUDGET = ContextBudget(max_items=6, fold_min=2, fold_batch=64)


@pytest.mark.parametrize("private", [False, True], ids=["normal", "private"])
@pytest.mark.parametrize("read", ["before the commit", "after the commit"])
async def test_a_context_read_beside_the_messages_commit_is_the_context_read_after_it(
    make_companion, stores, clock, read, private
) -> None:
    companion = await make_companion(budget=BUDGET)
    await say(companion, "hello")
    await companion.drain()
    conversation = await conversation_of(companion)
    state: ModeState = NORMAL
    if private:
        await say(companion, f"/private {PASSPHRASE} 7d")
        state = PrivateState((await segments_of(stores, conversation.id))[-1])

    async def store(text: str) -> int:
        stored = await stores.timeline.add_inbound(
            conversation.id, text, clock.now(), segment_id=state.segment_id, account_id=None, platform_message_id=text
        )
        assert stored is not None
        return stored

    # Stored without turns (no fold moves the watermark): with the newest, 8 messages after it, 6 in the window,
    # so a fold is due by exactly fold_min.
    for n in range(5):
        await store(f"earlier {n}")
    if read == "before the commit":  # the read's snapshot has not the message: it stands as the upcoming one
        reads = await companion.context.read_ahead(conversation, state)
        message_id = await store("the newest")
    else:  # the commit came first: the read holds the message already
        message_id = await store("the newest")
        reads = await companion.context.read_ahead(conversation, state)

    async def taken() -> ContextReads:
        return reads

    ahead = await companion.context.assemble(conversation, state, ahead=ReadAhead(taken(), message_id, "the newest"))
    after = await companion.context.assemble(conversation, state)
    assert [(m.role, m.content) for m in ahead.messages] == [(m.role, m.content) for m in after.messages]
    assert [m.content for m in ahead.messages].count("the newest") == 1
    assert ahead.needs_fold is after.needs_fold is True
    assert ahead.summary == after.summary
