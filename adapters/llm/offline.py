"""The embedded default: an offline responder with no network and no weights.

It is honest: it says it is not a language model and how to connect one, and it
answers with a digest of exactly what it was given, so a person can see what the
model side sees (visible messages, private-interval placeholders, tools, memory).
Deterministic: the same request gives the same answer.
"""

from __future__ import annotations

import re

from core.ports.model import PartialSink
from core.values import copy
from core.values.model import Completion, CompletionRequest

_TRANSITIONS = (
    "Welcome back. Maybe a glass of water now? I'm right here for whatever's next.",
    "Good to have you back in the everyday. How about some water before we go on?",
    "Back to ordinary things, then. Take a sip of water if you can; I'm glad you're here.",
    "Hey, welcome back. A glass of water might be nice; then let's carry on.",
)
_FACT = re.compile(
    r"^Person: ((?:I am|I'm|I live|I work|I like|I love|I prefer|my name is|my [a-z]+ is|my [a-z]+ are)\b[^.!?\n]{1,160})",
    re.IGNORECASE | re.MULTILINE,
)


class OfflineProvider:
    name = "offline"

    def __init__(self) -> None:
        self._transitions = 0

    async def complete(self, request: CompletionRequest, *, partial: PartialSink | None = None) -> Completion:
        """core.ports.BaseProvider: answered at once, whole (`partial` is never called)."""
        if request.purpose == "transition":
            # Variable wording without a model: the phrasings rotate; the intent never changes.
            line = _TRANSITIONS[self._transitions % len(_TRANSITIONS)]
            self._transitions += 1
            return Completion(line)
        if request.purpose == "summary":
            return Completion(_fold(request))
        if request.purpose == "nudge":
            return Completion(copy.OFFLINE_NUDGE)  # fixed and honest: no model wrote it
        if request.purpose == "capture":
            return Completion(_capture(request))
        return Completion(_digest(request))

    async def request_body(self, request: CompletionRequest, *, streamed: bool = False) -> None:
        """core.ports.BaseProvider: nothing is sent anywhere; the request is read in memory here."""
        return

    async def aclose(self) -> None:
        return None


def _digest(request: CompletionRequest) -> str:
    system = "\n\n".join(
        m.content or "" for m in request.messages if m.role == "system" and m.content != copy.PLACEHOLDER
    )
    visible = sum(1 for m in request.messages if m.role in ("user", "assistant"))
    placeholders = sum(1 for m in request.messages if m.role == "system" and m.content == copy.PLACEHOLDER)
    memory = _count_entries(system, copy.MEMORY_HEADER) + _count_entries(system, copy.PRIVATE_MEMORY_HEADER)
    private = copy.PRIVATE_SYSTEM_LINE in system
    tools = ", ".join(t.name for t in request.tools) or "none"
    tool_results = sum(1 for m in request.messages if m.role == "tool")
    parts = [
        "I'm the built-in offline responder, not a language model: set COMPANION_LLM_BASE_URL "
        "(and COMPANION_LLM_MODEL, COMPANION_LLM_API_KEY) to an OpenAI-compatible server to talk with one.",
        f"This turn I was given {visible} visible message{'s' if visible != 1 else ''}, "
        f"{placeholders} private-interval placeholder{'s' if placeholders != 1 else ''}, "
        f"{memory} memory entr{'ies' if memory != 1 else 'y'}, "
        f"{'a' if copy.SUMMARY_HEADER in system else 'no'} summary, "
        f"tools: {tools}; mode: {'private' if private else 'normal'}.",
    ]
    if tool_results:
        parts.append(f"Tool results received: {tool_results}.")
    return " ".join(parts)


def _count_entries(system: str, header: str) -> int:
    if header not in system:
        return 0
    section = system.split(header, 1)[1].split("\n\n", 1)[0]
    return sum(1 for line in section.splitlines() if line.startswith("- "))


def _facts(conversation: str) -> str:
    facts = [match.group(1).strip() for match in _FACT.finditer(conversation)]
    return "\n".join(f"- {fact}" for fact in facts) or "- none"


def _capture(request: CompletionRequest) -> str:
    lines = [line for line in (request.messages[-1].content or "").splitlines() if line.startswith("Person: ")]
    said = "; ".join(line.removeprefix("Person: ")[:80] for line in lines[:8])
    note = f"{len(lines)} message{'s' if len(lines) != 1 else ''} from the person" + (f": {said}" if said else ".")
    return f"NOTE:\n{note}\nFACTS:\n{_facts(request.messages[-1].content or '')}"


def _fold(request: CompletionRequest) -> str:
    body = request.messages[-1].content or ""
    previous, _, conversation = body.partition("\n\nConversation to fold in:\n")
    previous = previous.removeprefix("Running summary:\n")
    if previous == "(none yet)":
        previous = ""
    lines = [line if len(line) <= 160 else line[:157] + "..." for line in conversation.splitlines() if line]
    summary = "\n".join(filter(None, [previous, *lines]))
    if len(summary) > 3000:  # keep the newest part: the summary is rolling
        summary = "..." + summary[-3000:]
    return f"SUMMARY:\n{summary}\nFACTS:\n{_facts(conversation)}"
