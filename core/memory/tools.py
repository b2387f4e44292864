"""Tools the model may call, tagged by capability; the set for a turn is chosen before the request.

A private turn never receives a tool whose tags intersect PRIVATE_FORBIDDEN: its
definition is absent from the request, not refused after the model asked for it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from core.ports.store.links import OriginStore
from core.ports.store.memory import MemoryStore
from core.ports.store.timeline import PadReader
from core.values import copy
from core.values.errors import PrivateWriteRefused
from core.values.model import Conversation, ToolCall, ToolSpec
from core.values.modes import ModeState

log = logging.getLogger(__name__)

# Capabilities whose effects outlive a private turn or leave its thread.
PRIVATE_FORBIDDEN = frozenset(
    {"memory-write", "memory-read", "goal", "follow-up", "export", "publish", "delivery", "analytics"}
)


@dataclass(frozen=True, slots=True)
class ToolStores:
    """The store's slices the memory tools and commands use (core/memory/operations.py)."""

    memory: MemoryStore
    pads: PadReader  # the normal pad, for /memory
    origins: OriginStore  # which linked account each memory came from, for /memory


@dataclass(frozen=True, slots=True)
class ToolContext:
    conversation: Conversation
    state: ModeState
    now: float
    timezone: str
    stores: ToolStores


# A tool call's arguments, as the model sent them (JSON object).
Arguments = dict[str, Any]
ToolHandler = Callable[[ToolContext, Arguments], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    tags: frozenset[str]
    handler: ToolHandler = field(compare=False)

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)


class ToolSupport:
    """Whether the model server takes tools at all, for this process: off from the start with
    COMPANION_LLM_TOOLS=false (what `companion doctor` advises for a model that cannot call them),
    or from the server's first refusal of a request offering tools. Off, every turn runs without
    tools and memory works through the commands (/help says so).

    A refusal met by a private turn's request turns tools off for private turns only: private
    turns teach normal mode nothing (a normal turn still offers them until one is refused)."""

    def __init__(self, enabled: bool = True) -> None:
        self._enabled = enabled
        self._private_refused = False

    @property
    def enabled(self) -> bool:
        """Whether normal turns offer tools (/help says when they do not)."""
        return self._enabled

    def enabled_for(self, *, private: bool) -> bool:
        """Whether a turn of that mode offers tools: a private one also reads what private turns met."""
        return self._enabled and not (private and self._private_refused)

    def refused(self, *, private: bool) -> None:
        """The server refused tools to a request of that mode: none are offered to its mode's turns
        from now on; one warning, the first time."""
        if not self.enabled_for(private=private):
            return
        if private:
            self._private_refused = True
            log.warning(
                "the model server refused a private turn's request that offers tools; private turns answer "
                "without tools from now on (`companion doctor` says more)"
            )
            return
        self._enabled = False
        log.warning(
            "the model server refuses requests that offer tools; answering without tools from now on "
            "(memory works through /remember, /recall and /forget; `companion doctor` says more)"
        )


class ToolRegistry:
    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools or []:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name} registered twice")
        self._tools[tool.name] = tool

    @property
    def names(self) -> frozenset[str]:
        """Every registered tool's name, offered in this turn or not."""
        return frozenset(self._tools)

    def tools_for(self, conversation: Conversation, state: ModeState) -> list[Tool]:
        """The tool set of one turn, decided from the mode before any request is built."""
        if state.is_private:
            return [t for t in self._tools.values() if not (t.tags & PRIVATE_FORBIDDEN)]
        return list(self._tools.values())


async def run_tool_call(offered: Sequence[Tool], call: ToolCall, context: ToolContext) -> str:
    """Run one call the model made, among the tools it was offered only. Never raises:
    the result (or the error, in words) goes back to the model."""
    tool = next((t for t in offered if t.name == call.name), None)
    if tool is None:
        return f"error: no tool named {call.name!r} is available in this conversation"
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return "error: the arguments were not valid JSON"
    if not isinstance(arguments, dict):
        return "error: the arguments must be a JSON object"
    try:
        return await tool.handler(context, arguments)
    except ValueError as exc:
        return f"error: {exc}"
    except PrivateWriteRefused:
        return f"error: {copy.TOOL_PRIVATE_REFUSED}"
    except Exception as exc:  # noqa: BLE001 - a tool bug must not end the turn
        # The type only: a traceback or message could quote the arguments, and logs carry no text.
        log.error("tool %s failed (%s)", tool.name, type(exc).__name__)
        return "error: the tool failed"


async def _current_time(context: ToolContext, arguments: Arguments) -> str:
    from zoneinfo import ZoneInfo

    now = datetime.fromtimestamp(context.now, tz=UTC).astimezone(ZoneInfo(context.timezone))
    return now.strftime("%A %Y-%m-%d %H:%M %Z")


CURRENT_TIME = Tool(
    name="current_time",
    description="The current date and time in the person's timezone.",
    parameters={"type": "object", "properties": {}},
    tags=frozenset({"clock"}),
    handler=_current_time,
)
