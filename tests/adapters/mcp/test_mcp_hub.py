"""The hub against real MCP servers (tests/helpers/mcp_servers.py) over stdio and streamable HTTP."""

from __future__ import annotations

from adapters.mcp.hub import McpHub
from tests.helpers.mcp_servers import http_server, records, stdio_server
from tests.helpers.waiting import wait_for


def up(hub: McpHub, name: str) -> bool:
    return any(s.name == name and s.up for s in hub.states())


async def test_a_tool_goes_round_trip_over_stdio(hub_of, tmp_path) -> None:
    record = tmp_path / "calls.jsonl"
    hub = await hub_of({"notes": stdio_server(record=record)})
    await wait_for(lambda: up(hub, "notes"), 20, "the server up")
    names = {t.name for t in hub.catalogue()}
    assert {"echo", "big", "hang", "grow"} <= names
    result = await hub.call("notes", "echo", {"text": "hello"})
    assert (result.outcome, result.text) == ("ok", "echo: hello")
    assert records(record) == [{"tool": "echo", "arguments": {"text": "hello"}}]


async def test_a_tool_goes_round_trip_over_streamable_http(hub_of, tmp_path) -> None:
    with http_server() as url:
        hub = await hub_of({"web": {"url": url}})
        await wait_for(lambda: up(hub, "web"), 20, "the server up")
        result = await hub.call("web", "echo", {"text": "over http"})
        assert (result.outcome, result.text) == ("ok", "echo: over http")
        [state] = hub.states()
        assert state.transport == "http" and state.tools == len(hub.catalogue())


async def test_a_server_that_crashes_mid_call_fails_that_call_and_comes_back(hub_of) -> None:
    hub = await hub_of({"notes": stdio_server()})
    await wait_for(lambda: up(hub, "notes"), 20, "the server up")
    result = await hub.call("notes", "crash", {})
    assert result.outcome == "failed"
    assert "notes" in result.text
    await wait_for(lambda: not up(hub, "notes"), 20, "the server down")
    assert all(t.server != "notes" for t in hub.catalogue())
    await wait_for(lambda: up(hub, "notes"), 20, "the server restarted")
    assert (await hub.call("notes", "echo", {"text": "again"})).text == "echo: again"


async def test_a_hanging_tool_is_cut_at_its_timeout_and_the_model_is_told(hub_of) -> None:
    hub = await hub_of({"notes": stdio_server(timeout=0.5)})
    await wait_for(lambda: up(hub, "notes"), 20, "the server up")
    result = await hub.call("notes", "hang", {})
    assert result.outcome == "timeout"
    assert result.text == "the tool hang did not answer within 0.5 s"
    assert (await hub.call("notes", "echo", {"text": "still here"})).outcome == "ok"
