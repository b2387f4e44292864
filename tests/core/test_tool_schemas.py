"""The tools' schemas say what their handlers take, so a server that constrains a call to its schema
(llama.cpp's grammars) lets even a tiny model write a call the handler accepts (issue 25)."""

from __future__ import annotations

import re

import pytest

from core.memory.operations import default_tools
from core.memory.tools import ToolContext, ToolStores, run_tool_call
from core.values.durations import parse_when
from core.values.model import ToolCall

NOW = 1_750_000_000.0  # 2025-06, before the dates below
WHEN = next(t for t in default_tools()._tools.values() if t.name == "schedule_followup").parameters["properties"][
    "when"
]


@pytest.mark.parametrize("text", ["30m", "2h", "3d", "45s", "7:00", "18:30", "2026-12-24", "2026-12-24 18:00"])
def test_every_shape_the_when_pattern_allows_is_a_time_the_tools_read(text) -> None:
    assert re.fullmatch(WHEN["pattern"], text)
    assert parse_when(text, NOW, "UTC") is not None


@pytest.mark.parametrize("text", ["next_period(60d)", "in a while", "tomorrow morning", "30 minutes"])
def test_the_when_pattern_refuses_what_the_tools_cannot_read(text) -> None:
    assert not re.fullmatch(WHEN["pattern"], text)


async def test_each_strings_max_length_is_the_length_its_handler_takes(companion, stores) -> None:
    from tests.helpers.chat import conversation_of, say

    await say(companion, "hello")
    conversation = await conversation_of(companion)
    state = await companion.parts.valve.settle(conversation)
    tools = default_tools()
    offered = tools.tools_for(conversation, state)
    context = ToolContext(conversation, state, NOW, "UTC", ToolStores(stores.memory, stores.timeline, stores.links))
    checked = 0
    for tool in offered:
        for name, spec in tool.parameters["properties"].items():
            if "maxLength" not in spec or name == "when" or name == "due":
                continue
            arguments = {
                key: 1
                if tool.parameters["properties"][key]["type"] == "integer"
                else "3d"
                if key in ("when", "due")
                else "x"
                for key in tool.parameters["required"]
            }
            longest, over = (
                dict(arguments, **{name: "y" * spec["maxLength"]}),
                dict(arguments, **{name: "y" * (spec["maxLength"] + 1)}),
            )
            assert "longer than" not in await run_tool_call(offered, ToolCall("c", tool.name, _json(longest)), context)
            assert "longer than" in await run_tool_call(offered, ToolCall("c", tool.name, _json(over)), context)
            checked += 1
    assert checked >= 6


def _json(value: dict) -> str:
    import json

    return json.dumps(value)
