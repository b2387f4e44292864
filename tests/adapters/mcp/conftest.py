"""Fixtures of the MCP hub tests: a hub over a configuration file of real test servers, closed at the end."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from adapters.mcp.config import load_mcp_config
from adapters.mcp.hub import McpHub
from tests.helpers.mcp_servers import write_config

STOP_GRACE = 5.0


@pytest.fixture
async def hub_of(tmp_path: Path) -> AsyncIterator[Callable[[dict[str, dict[str, Any]]], Any]]:
    """`await hub_of({"name": stdio_server(...)})`: a started hub over those servers."""
    hubs: list[McpHub] = []

    async def make(servers: dict[str, dict[str, Any]]) -> McpHub:
        config = load_mcp_config(write_config(tmp_path / f"mcp{len(hubs)}.json", servers), {})
        hub = McpHub(config)
        hubs.append(hub)
        await hub.start()
        return hub

    yield make
    for hub in hubs:
        await hub.aclose(STOP_GRACE)
