"""Tools served by other processes (MCP servers): the catalogue a turn's tool set is chosen from, and the call.

The core decides which of them a turn offers (core/memory/tools.py) before the request is built;
this port only says what the servers offer now and runs one call. It does no I/O to answer
`catalogue` or `states`: both read what the servers last said.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

# How one call ended: "ok"; "error" (the tool answered with an error); "timeout" (cut at the
# server's timeout); "unavailable" (its server is down or not started); "failed" (the session broke
# mid-call). Every outcome but "ok" reaches the model as words in `ServedResult.text`.
Outcome = Literal["ok", "error", "timeout", "unavailable", "failed"]


@dataclass(frozen=True, slots=True)
class ServedTool:
    """One tool a server offers now, after its server's include/exclude filter."""

    server: str  # the server's name in the configuration file
    name: str  # the tool's name as its server gives it; offered to the model under this name
    description: str
    parameters: dict[str, Any]  # the JSON Schema (an object) of its arguments
    # The owner named it for private mode: its server is reached over stdio, is marked
    # `"private": "allowed"`, and its `include` names this tool exactly (a glob names none).
    private_allowed: bool


@dataclass(frozen=True, slots=True)
class ServedResult:
    """What one call gave back."""

    text: str  # for the model: the result's text, cut to the stated size (saying so), or what went wrong
    outcome: Outcome
    seconds: float  # the call's time as the server took it (request sent to reply read)


@dataclass(frozen=True, slots=True)
class ServerState:
    """One configured server as it stands (for /tools, /context and the web page)."""

    name: str
    transport: Literal["stdio", "http"]
    up: bool
    detail: str  # why it is not up, in words and without secrets; "" when up
    tools: int  # tools it offers now, after the filter


class ToolServers(Protocol):
    """The configured MCP servers, kept connected by their adapter (adapters/mcp/)."""

    def catalogue(self) -> Sequence[ServedTool]:
        """The tools the servers offer now (a server that is down offers none); no I/O."""
        ...

    def states(self) -> Sequence[ServerState]:
        """Every configured server, in the configuration's order; no I/O."""
        ...

    async def call(self, server: str, name: str, arguments: dict[str, Any]) -> ServedResult:
        """Run one tool on its server, cut at the server's timeout. Never raises (cancellation aside)."""
        ...
