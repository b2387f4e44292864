"""A memory tool whose lasting write the store refuses (the conversation turned private under
it) tells the model so, in the copy's words, never "there is no goal #N"."""

from __future__ import annotations

import pytest

from core.memory.operations import default_tools
from core.memory.tools import ToolContext, ToolStores, run_tool_call
from core.values import copy
from core.values.model import ConversationKey, ToolCall
from core.values.modes import NORMAL

pytestmark = [pytest.mark.engines, pytest.mark.privacy]

NOW = 1_000.0
REFUSED = f"error: {copy.TOOL_PRIVATE_REFUSED}"


@pytest.fixture
async def stale_normal_context(stores):
    """A normal turn's tool context whose conversation has meanwhile opened a private segment."""
    account = await stores.timeline.ensure_account("terminal", "owner", None, NOW)
    conversation = await stores.timeline.ensure_conversation(
        ConversationKey("terminal", "t"), "direct", account.person_id, NOW
    )
    await stores.memory.add_goal(account.person_id, conversation.id, "run 5k", None, NOW)
    await stores.memory.add_followup(account.person_id, conversation.id, "reminder", "call mum", NOW + 60, NOW)
    await stores.memory.remember(account.person_id, conversation.id, "sister is Ana", NOW)
    await stores.modes.open_segment(conversation.id, NOW, None)
    return ToolContext(conversation, NORMAL, NOW, "UTC", ToolStores(stores.memory, stores.timeline, stores.links))


async def call(context: ToolContext, name: str, arguments: str) -> str:
    return await run_tool_call(
        default_tools().tools_for(context.conversation, NORMAL), ToolCall("c", name, arguments), context
    )


async def test_update_goal_tool_while_private_is_refused_not_reported_missing(stale_normal_context):
    result = await call(stale_normal_context, "update_goal", '{"goal_id": 1, "status": "done"}')
    assert result == REFUSED
    assert "There is no goal" not in result


async def test_pause_followup_tool_while_private_is_refused_not_reported_missing(stale_normal_context):
    assert await call(stale_normal_context, "pause_followup", '{"followup_id": 1}') == REFUSED


@pytest.mark.parametrize("arguments", ['{"entry_id": 1}', '{"text": "Ana"}'])
async def test_forget_tool_while_private_is_refused(stale_normal_context, arguments):
    assert await call(stale_normal_context, "forget", arguments) == REFUSED
