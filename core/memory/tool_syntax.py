"""Whether a model's final text is only a tool call its server did not parse.

Servers turn a model's tool call into `tool_calls` by parsing the syntax their prompt format
taught it; when that parsing fails (a tiny model, a template the server does not know, a server
started without tool parsing), the call arrives as the reply's text. Shown to the person it
would read as an answer: `functions.remember: {"text": ...}`. `only_tool_call` recognises the
shapes the known prompt formats produce, and only when the whole text is made of them, so a
reply that merely mentions a tool is never taken for one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

# Delimited shapes: a marker that no reply in words starts with, up to its end marker (or the end
# of the text, for a call cut off at max_tokens).
_DELIMITED = (
    # Hermes 2 Pro, Qwen 2.5 / 3 (and llama.cpp's generic format): <tool_call>{...}</tool_call>
    re.compile(r"<tool_call>.*?(?:</tool_call>|\Z)", re.DOTALL),
    # Llama 3.1 custom tools: <function=name>{...}</function>
    re.compile(r"<function=[\w.-]+>.*?(?:</function>|\Z)", re.DOTALL),
    # Llama 3.1 / 3.2 built-in tools: <|python_tag|> up to the end of the message
    re.compile(r"<\|python_tag\|>.*\Z", re.DOTALL),
    # Mistral: [TOOL_CALLS] [{...}] or [TOOL_CALLS]name[ARGS]{...}
    re.compile(r"\[TOOL_CALLS\].*\Z", re.DOTALL),
    # DeepSeek V3 / R1
    re.compile(r"<\uff5ctool\u2581calls\u2581begin\uff5c>.*?(?:<\uff5ctool\u2581calls\u2581end\uff5c>|\Z)", re.DOTALL),
    # gpt-oss (harmony): <|start|>assistant<|channel|>commentary to=functions.name ... <|call|>
    re.compile(
        r"(?:<\|start\|>assistant)?<\|channel\|>commentary to=functions\.[\w.-]+.*?(?:<\|call\|>|\Z)", re.DOTALL
    ),
    # Fenced calls (Gemma's tool_code, and models imitating it)
    re.compile(r"```(?:tool_code|tool_call|tool_calls|function_call)\s*\n.*?(?:```|\Z)", re.DOTALL),
)
# llama-cpp-python's chatml-function-calling (and functionary): `functions.name:` then JSON arguments.
_FUNCTIONS_PREFIX = re.compile(r"functions\.([A-Za-z_][\w.-]*)\s*:")
# Template tokens a server may leave in the text around a call.
_TEMPLATE_TOKENS = re.compile(
    r"<\|im_end\|>|<\|eot_id\|>|<\|eom_id\|>|<end_of_turn>|<\|end\|>|</s>|<\|endoftext\|>|<\|return\|>"
)
_JSON_FENCE = re.compile(r"\A```(?:json)?\s*\n?(.*?)\n?```\Z", re.DOTALL)
_CALL_KEYS = frozenset({"name", "arguments", "parameters", "id", "type"})
_IDENTIFIER = re.compile(r"\A[A-Za-z_][\w.-]*\Z")


def only_tool_call(text: str, tool_names: Iterable[str] = ()) -> bool:
    """Whether `text` is nothing but one or more tool calls in a known prompt format's syntax.

    `tool_names`: the tools the companion has; a bare Python-style call (`remember(text="...")`)
    counts only with one of these names, since such a line could be a reply about code.
    """
    rest = _TEMPLATE_TOKENS.sub("", text).strip()
    if not rest:
        return False
    names = frozenset(tool_names)
    found = False
    while rest:
        after = _strip_one(rest, names)
        if after is None:
            return False
        found, rest = True, after.strip()
    return found


def _strip_one(text: str, names: frozenset[str]) -> str | None:
    """`text` after the one tool call it starts with, or None when it starts with none."""
    for pattern in _DELIMITED:
        match = pattern.match(text)
        if match:
            return text[match.end() :]
    match = _FUNCTIONS_PREFIX.match(text)
    if match:
        return _after_arguments(text, match.end())
    if _is_json_call(text) or _is_pythonic_call(text, names):
        return ""
    return None


def _after_arguments(text: str, start: int) -> str:
    """The text after a `functions.name:` call's JSON arguments (there may be none)."""
    position = start
    while position < len(text) and text[position].isspace():
        position += 1
    if position >= len(text) or text[position] != "{":
        return text[start:]
    try:
        _, end = json.JSONDecoder().raw_decode(text, position)
    except ValueError:
        # Arguments cut off (max_tokens) or malformed: the call runs to the next one or to the end.
        following = _FUNCTIONS_PREFIX.search(text, position)
        return text[following.start() :] if following else ""
    return text[end:]


def _is_json_call(text: str) -> bool:
    """A JSON tool call printed as text: {"name": ..., "arguments": {...}}, OpenAI's own
    {"type": "function", "function": {...}} or {"tool_calls": [...]}, or a list of them."""
    fenced = _JSON_FENCE.match(text)
    try:
        value = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        return False
    calls = value if isinstance(value, list) else [value]
    return bool(calls) and all(_is_call_object(call) for call in calls)


def _is_call_object(value: object) -> bool:
    if not isinstance(value, dict):
        return False
    if set(value) == {"tool_calls"} and isinstance(value["tool_calls"], list):
        return bool(value["tool_calls"]) and all(_is_call_object(call) for call in value["tool_calls"])
    if isinstance(value.get("function"), dict) and set(value) <= {"function", "type", "id"}:
        return _is_call_object(value["function"])
    name = value.get("name")
    return (
        isinstance(name, str)
        and bool(_IDENTIFIER.match(name))
        and ("arguments" in value or "parameters" in value)
        and set(value) <= _CALL_KEYS
    )


def _is_pythonic_call(text: str, names: frozenset[str]) -> bool:
    """Llama 3.2 / 4's Python-style calls, `[remember(text="...")]`, with a name of our tools."""
    inner = text[1:-1].strip() if text.startswith("[") and text.endswith("]") else text
    match = re.fullmatch(r"([A-Za-z_]\w*)\((.*)\)", inner, re.DOTALL)
    return bool(match) and match is not None and match.group(1) in names


# How the delimited shapes above begin: a text so far that is one of these, or the start of one,
# may still become a tool call.
_OPENINGS = (
    "<tool_call>",
    "<function=",
    "<|python_tag|>",
    "[TOOL_CALLS]",
    "<\uff5ctool\u2581calls\u2581begin\uff5c>",
    "<|start|>assistant",
    "<|channel|>commentary",
    "functions.",
)
_FENCE_OPENING = re.compile(r"```([^\n]*)(\n?)(\s*)(\S?)")
_CALL_FENCES = frozenset({"tool_code", "tool_call", "tool_calls", "function_call"})


def may_be_tool_call(text: str, tool_names: Iterable[str] = ()) -> bool:
    """Whether `text`, the beginning of an answer still being written, may yet turn out to be only
    a tool call (`only_tool_call` of the whole): while it may, none of it is shown. An answer in
    words is told apart within its first few characters."""
    rest = _TEMPLATE_TOKENS.sub("", text).lstrip()
    if not rest:
        return True
    for opening in _OPENINGS:
        if rest.startswith(opening) or opening.startswith(rest):
            return True
    first = rest[0]
    if first == "{":
        return True  # a JSON call object, to its end
    if first == "[":
        inner = rest[1:].lstrip()
        return not inner or inner[0] == "{" or _may_name_a_call(inner, tool_names)
    if first == "`":
        fence = _FENCE_OPENING.match(rest)
        if fence is None:
            return "```".startswith(rest)
        language, newline, _space, content = fence.groups()
        if not newline:
            return True  # the fence's language is not complete yet
        language = language.strip()
        if language in _CALL_FENCES:
            return True
        return language in ("", "json") and (not content or content in "{[")
    return _may_name_a_call(rest, tool_names)


def _may_name_a_call(text: str, tool_names: Iterable[str]) -> bool:
    """Whether `text` is, or may become, `name(` of one of the tools (a Python-style call)."""
    head = re.match(r"[A-Za-z_][\w]*\(?", text)
    if head is None or (head.end() < len(text) and not head.group().endswith("(")):
        return False
    word = head.group()
    for name in tool_names:
        call = f"{name}("
        if call.startswith(word) or word.startswith(call):
            return True
    return False
