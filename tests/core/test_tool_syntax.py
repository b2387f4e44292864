"""Recognising a tool call that reached us as text (core/memory/tool_syntax.py)."""

from __future__ import annotations

import pytest

from core.memory.tool_syntax import only_tool_call
from tests.adapters.test_model_answers import UNPARSED_CALLS

NAMES = frozenset({"remember", "recall", "list_goals", "current_time"})


@pytest.mark.parametrize("shape", sorted(UNPARSED_CALLS))
def test_every_known_servers_unparsed_call_is_recognised(shape) -> None:
    assert only_tool_call(UNPARSED_CALLS[shape], NAMES)


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "remember", "arguments": {}}</tool_call><|im_end|>',
        '{"type": "function", "function": {"name": "remember", "arguments": "{}"}}',
        '{"tool_calls": [{"function": {"name": "remember", "arguments": {}}}]}',
        '[{"name": "remember", "parameters": {"text": "a"}}, {"name": "recall", "parameters": {}}]',
        "<|channel|>commentary to=functions.remember <|constrain|>json<|message|>{}<|call|>",
        '```tool_code\nremember(text="tea")\n```',
        "  functions.current_time:  \n",
    ],
)
def test_more_shapes_are_recognised(text) -> None:
    assert only_tool_call(text, NAMES)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "Hello! How are you today?",
        "functions.remember: is what I would call, but here is my answer.",
        'functions.remember: {"text": "tea"} I will keep that in mind!',
        'Here it is: <tool_call>{"name": "remember", "arguments": {}}</tool_call>',
        '{"name": "Ada", "age": 36}',
        '{"name": "Ada", "arguments": "none", "hobby": "chess"}',
        "print(remember)",
        'open_door(now="yes")',  # Python-style only with one of our tools' names
        "[1, 2, 3]",
    ],
)
def test_a_reply_in_words_or_with_more_than_a_call_is_not_taken_for_one(text) -> None:
    assert not only_tool_call(text, NAMES)


def test_a_python_style_call_counts_only_with_one_of_our_tools() -> None:
    assert only_tool_call('remember(text="tea")', NAMES)
    assert not only_tool_call('remember(text="tea")', frozenset())
