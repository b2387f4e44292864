"""Tools the model may call, tagged by capability; the set for a turn is chosen before the request.

A private turn never receives a tool whose tags intersect PRIVATE_FORBIDDEN: its
definition is absent from the request, not refused after the model asked for it. Tools served
by other processes (MCP servers, core/ports/tools.py) join the set the same way, tagged "served"
(forbidden in private mode) unless the owner named them for private mode ("served-private").
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from core.ports.store.links import OriginStore
from core.ports.store.memory import MemoryStore
from core.ports.store.timeline import PadReader
from core.ports.tools import ServedResult, ServedTool, ToolServers
from core.values import copy
from core.values.errors import PrivateWriteRefused
from core.values.model import Conversation, ToolCall, ToolSpec
from core.values.modes import ModeState

log = logging.getLogger(__name__)

# A tool served by another process: its arguments leave the companion for a program the owner
# configured, so private mode offers it only when the owner named it for private mode.
SERVED = "served"
SERVED_PRIVATE = "served-private"

# Capabilities whose effects outlive a private turn or leave its thread.
PRIVATE_FORBIDDEN = frozenset(
    {"memory-write", "memory-read", "goal", "follow-up", "export", "publish", "delivery", "analytics", SERVED}
)

# What OpenAI-style function names allow: a served tool named otherwise is left out.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


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
ServedCall = Callable[[Arguments], Awaitable[ServedResult]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    tags: frozenset[str]
    handler: ToolHandler = field(compare=False)
    # A served tool's call on its server (None: a built-in tool, run by `handler`).
    serve: ServedCall | None = field(default=None, compare=False)
    server: str | None = None  # a served tool's server, by its name in the configuration

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)


def served_tool(served: ServedTool, servers: ToolServers) -> Tool:
    """A served tool as the core offers it: tagged "served" (never in private mode), or
    "served-private" when the owner named it for private mode (its `private_allowed`)."""

    async def serve(arguments: Arguments) -> ServedResult:
        return await servers.call(served.server, served.name, arguments)

    async def handler(context: ToolContext, arguments: Arguments) -> str:
        return (await serve(arguments)).text

    return Tool(
        name=served.name,
        description=served.description,
        parameters=served.parameters,
        tags=frozenset({SERVED_PRIVATE if served.private_allowed else SERVED}),
        handler=handler,
        serve=serve,
        server=served.server,
    )


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """One call the model made, as it ended: the text for the model and how it ended.

    `status`: "ok" or "error" for a built-in tool; a served tool's outcome (core/ports/tools.py
    `Outcome`). `server` and `seconds`: a served call's server and its time as the server took it."""

    text: str
    status: str
    server: str | None = None
    seconds: float | None = None


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
    """The built-in tools, and the served ones of `servers` as their catalogue stands when a turn's
    tool set is chosen (a server down offers none)."""

    def __init__(self, tools: list[Tool] | None = None, servers: ToolServers | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self.servers = servers
        self._warned: set[tuple[str, str]] = set()
        for tool in tools or []:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name} registered twice")
        self._tools[tool.name] = tool

    @property
    def names(self) -> frozenset[str]:
        """Every tool's name, built-in or served now, offered in this turn or not."""
        return frozenset(self._tools) | {t.name for t in self.served()}

    def served(self) -> list[Tool]:
        """The served tools as the servers' catalogue stands now (no I/O). A name the model could not
        call, or one a built-in tool or an earlier served tool has, is left out (the adapter leaves
        them out already; this keeps the built-in tool whatever an adapter does)."""
        if self.servers is None:
            return []
        tools: dict[str, Tool] = {}
        for served in self.servers.catalogue():
            if served.name in self._tools or served.name in tools or not _TOOL_NAME.fullmatch(served.name):
                self._warn_left_out(served)
                continue
            tools[served.name] = served_tool(served, self.servers)
        return list(tools.values())

    def tools_for(self, conversation: Conversation, state: ModeState) -> list[Tool]:
        """The tool set of one turn, decided from the mode before any request is built."""
        tools = [*self._tools.values(), *self.served()]
        if state.is_private:
            return [t for t in tools if not (t.tags & PRIVATE_FORBIDDEN)]
        return tools

    def _warn_left_out(self, served: ServedTool) -> None:
        key = (served.server, served.name[:64])
        if key not in self._warned:  # once per tool, not once per turn
            self._warned.add(key)
            log.warning("server %s: its tool %r is left out (its name clashes or is not allowed)", *key)


async def run_tool_call(offered: Sequence[Tool], call: ToolCall, context: ToolContext) -> str:
    """Run one call the model made, among the tools it was offered only. Never raises:
    the result (or the error, in words) goes back to the model."""
    return (await run_call(offered, call, context)).text


async def run_call(offered: Sequence[Tool], call: ToolCall, context: ToolContext) -> CallOutcome:
    """`run_tool_call`, with how the call ended (a served call: its server, outcome and time)."""
    tool = next((t for t in offered if t.name == call.name), None)
    if tool is None:
        return CallOutcome(f"error: no tool named {call.name!r} is available in this conversation", "error")
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return CallOutcome("error: the arguments were not valid JSON", "error", tool.server)
    if not isinstance(arguments, dict):
        return CallOutcome("error: the arguments must be a JSON object", "error", tool.server)
    if tool.serve is not None:
        try:
            result = await tool.serve(arguments)
        except Exception as exc:  # noqa: BLE001 - the port never raises; an adapter bug must not end the turn
            log.error("served tool %s of server %s failed (%s)", tool.name, tool.server, type(exc).__name__)
            return CallOutcome("error: the tool failed", "failed", tool.server)
        return CallOutcome(result.text, result.outcome, tool.server, result.seconds)
    try:
        text = await tool.handler(context, arguments)
    except ValueError as exc:
        return CallOutcome(f"error: {exc}", "error")
    except PrivateWriteRefused:
        return CallOutcome(f"error: {copy.TOOL_PRIVATE_REFUSED}", "error")
    except Exception as exc:  # noqa: BLE001 - a tool bug must not end the turn
        # The type only: a traceback or message could quote the arguments, and logs carry no text.
        log.error("tool %s failed (%s)", tool.name, type(exc).__name__)
        return CallOutcome("error: the tool failed", "error")
    return CallOutcome(text, "error" if text.startswith("error") else "ok")


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
