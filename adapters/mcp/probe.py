"""`companion doctor`'s look at the MCP servers: each one started, listed once and closed again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from adapters.mcp.catalogue import LeftOut, arrange
from adapters.mcp.config import McpConfig, ServerConfig, builtin_tool_names
from adapters.mcp.session import connected, describe, list_tools, usable

# How long a probed stdio server has to end after its look (then its process group is killed).
PROBE_GRACE = 2.0


@dataclass(frozen=True, slots=True)
class ServerReport:
    """One server as the doctor found it; no secret (env and headers are named by their keys at most)."""

    name: str
    transport: Literal["stdio", "http"]
    enabled: bool
    reachable: bool
    detail: str  # why it is not reachable, in our words; "" when it is
    tools: tuple[str, ...]  # offered after the filter and the names' rule
    private: tuple[str, ...]  # of those, the ones private mode is offered
    left_out: tuple[LeftOut, ...]
    list_seconds: float | None  # the time of one tools/list


@dataclass(frozen=True, slots=True)
class _Look:
    reachable: bool
    detail: str
    names: tuple[str, ...]
    seconds: float | None


async def probe(config: McpConfig, *, builtin: Collection[str] | None = None) -> list[ServerReport]:
    """Every configured server, in the configuration's order, looked at concurrently (each within
    its connect_timeout, plus the time its tools/list takes up to its timeout)."""
    looks = await asyncio.gather(*(_look(s) for s in config.servers))
    offered, left_out = arrange(
        [(s, look.names) for s, look in zip(config.servers, looks, strict=True)],
        builtin_tool_names() if builtin is None else builtin,
    )
    return [
        ServerReport(
            name=s.name,
            transport=s.transport,
            enabled=s.enabled,
            reachable=look.reachable,
            detail=look.detail,
            tools=tuple(names),
            private=tuple(n for n in names if s.private_allowed(n)),
            left_out=tuple(x for x in left_out if x.server == s.name),
            list_seconds=look.seconds,
        )
        for s, look, names in zip(config.servers, looks, offered, strict=True)
    ]


async def _look(server: ServerConfig) -> _Look:
    if not server.enabled:
        return _Look(False, "disabled in the configuration (enabled: false)", (), None)

    async def ignore(message: object) -> None:
        return None

    try:
        async with connected(server, grace=lambda: PROBE_GRACE, on_end=lambda: None, on_message=ignore) as connection:
            began = time.monotonic()
            async with asyncio.timeout(server.timeout):
                tools = usable(server, await list_tools(connection.session))
            seconds = time.monotonic() - began
    except Exception as exc:  # noqa: BLE001 - whatever went wrong is this server's finding
        return _Look(False, describe(exc, server), (), None)
    return _Look(True, "", tuple(t.name for t in tools), seconds)
