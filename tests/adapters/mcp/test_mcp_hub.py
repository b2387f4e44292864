"""The hub against real MCP servers (tests/helpers/mcp_servers.py) over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
import sys

from adapters.mcp.hub import McpHub
from adapters.mcp.session import MAX_RESULT_BYTES
from tests.adapters.mcp.conftest import STOP_GRACE
from tests.helpers.logs import logging_policy
from tests.helpers.mcp_servers import alive, free_port, http_server, records, stdio_server
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
    async with asyncio.timeout(20):  # the test's own bound, far above the server's: without the cut it fails here
        result = await hub.call("notes", "hang", {})
    assert result.outcome == "timeout"
    assert result.text == "the tool hang did not answer within 0.5 s"
    assert (await hub.call("notes", "echo", {"text": "still here"})).outcome == "ok"


async def test_a_call_cut_at_its_timeout_is_cancelled_at_the_server(hub_of, tmp_path) -> None:
    cancelled = tmp_path / "cancelled"  # the server's hang creates it when its call is cancelled
    hub = await hub_of({"notes": stdio_server("--cancelled", str(cancelled), timeout=0.5)})
    await wait_for(lambda: up(hub, "notes"), 20, "the server up")
    assert (await hub.call("notes", "hang", {})).outcome == "timeout"
    # While the session lives (its end cancels every call anyway): told, the server stopped the call.
    await wait_for(cancelled.exists, 20, "the call cancelled at the server")
    assert [s.up for s in hub.states()] == [True]
    assert (await hub.call("notes", "echo", {"text": "still here"})).outcome == "ok"


async def test_a_tool_that_answers_with_an_error_is_an_error_for_the_model(hub_of) -> None:
    hub = await hub_of({"notes": stdio_server()})
    await wait_for(lambda: up(hub, "notes"), 20, "the server up")
    result = await hub.call("notes", "fail", {})
    assert result.outcome == "error"
    assert result.text.startswith("error: ") and "failed on purpose" in result.text


async def test_a_huge_result_is_cut_at_the_stated_size_saying_so(hub_of) -> None:
    hub = await hub_of({"notes": stdio_server()})
    await wait_for(lambda: up(hub, "notes"), 20, "the server up")
    result = await hub.call("notes", "big", {"size": 100_000})
    assert result.outcome == "ok"
    assert result.text == "x" * MAX_RESULT_BYTES + "… [cut: the result was 100000 bytes]"
    small = await hub.call("notes", "big", {"size": MAX_RESULT_BYTES})
    assert small.text == "x" * MAX_RESULT_BYTES


async def test_a_servers_stray_stdout_never_breaks_the_session_nor_reaches_the_log(hub_of, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    hub = await hub_of({"noisy": stdio_server("--stray")})
    await wait_for(lambda: up(hub, "noisy"), 20, "the server up")
    for n in range(3):
        assert (await hub.call("noisy", "echo", {"text": f"n{n}"})).text == f"echo: n{n}"
    assert [s.up for s in hub.states()] == [True]
    await hub.aclose(STOP_GRACE)  # the server's last stray line comes at its exit
    assert "stray" not in caplog.text
    assert "not a message" not in caplog.text


async def test_a_changed_tool_list_is_seen_without_a_restart(hub_of) -> None:
    hub = await hub_of({"notes": stdio_server()})
    await wait_for(lambda: up(hub, "notes"), 20, "the server up")
    assert "grown" not in {t.name for t in hub.catalogue()}
    assert (await hub.call("notes", "grow", {})).text == "grew"
    await wait_for(lambda: "grown" in {t.name for t in hub.catalogue()}, 20, "the new tool listed")
    assert (await hub.call("notes", "grown", {})).text == "grown here"


async def test_the_filter_and_the_names_decide_the_catalogue(hub_of, caplog) -> None:
    hub = await hub_of(
        {
            "first": stdio_server(
                "--alias",
                "remember,bad.name,shared",
                include=["echo", "shared", "r*", "bad.name", "b*"],
                exclude=["big"],
            ),
            "second": stdio_server("--only", "echo,fail", "--alias", "shared"),
        }
    )
    await wait_for(lambda: all(s.up for s in hub.states()), 20, "both servers up")
    offered = sorted((t.server, t.name) for t in hub.catalogue())
    # first: include keeps echo, shared (and remember, bad.name: left out), exclude drops big;
    # second: its echo and shared are the first's already.
    assert offered == [("first", "echo"), ("first", "shared"), ("second", "fail")]
    assert [s.tools for s in hub.states()] == [2, 1]
    assert "the tool remember is left out" in caplog.text
    assert "the tool <8 characters> is left out" in caplog.text
    assert "MCP server second: the tool echo is left out" in caplog.text


async def test_a_server_that_cannot_start_says_why_and_offers_nothing(hub_of, tmp_path) -> None:
    hub = await hub_of(
        {
            "missing": {"command": str(tmp_path / "no-such-server")},
            "nowhere": stdio_server(cwd=str(tmp_path / "no-such-dir")),
            "silent": {
                "command": sys.executable,
                "args": ["-c", "import time; time.sleep(60)"],
                "connect_timeout": 0.5,
            },
            "quitter": stdio_server("--exit-at-start"),
            "working": stdio_server("--only", "echo"),
        }
    )
    await wait_for(lambda: up(hub, "working"), 20, "the working server up")
    await wait_for(lambda: "exited" in hub.states()[3].detail, 20, "the quitter's reason")
    await wait_for(lambda: hub.states()[2].detail != "not started yet", 20, "the silent one's reason")
    missing, nowhere, silent, quitter, _ = hub.states()
    assert (missing.up, missing.detail, missing.tools) == (False, "its command was not found", 0)
    assert (nowhere.up, nowhere.detail) == (False, "its cwd does not exist")
    assert (silent.up, silent.detail) == (False, "it did not answer within 0.5 s (connect_timeout)")
    assert (quitter.up, quitter.detail) == (False, "it exited (status 4)")
    assert [t.server for t in hub.catalogue()] == ["working"]
    result = await hub.call("missing", "echo", {"text": "x"})
    assert (result.outcome, result.text) == ("unavailable", "the tool echo is unavailable: its server missing is down")


async def test_an_unreachable_http_server_says_why(hub_of) -> None:
    hub = await hub_of({"web": {"url": f"http://127.0.0.1:{free_port()}/mcp", "connect_timeout": 5}})
    await wait_for(lambda: hub.states()[0].detail != "not started yet", 20, "a first try")
    assert hub.states()[0].detail == "it cannot be reached (connection refused or no such host)"


async def test_a_stop_ends_every_stdio_servers_process_tree(hub_of) -> None:
    # Two servers of the same tools: the second's are left out of the catalogue, so each is called alone.
    hubs = [await hub_of({"a": stdio_server()}), await hub_of({"b": stdio_server()})]
    for hub in hubs:
        await wait_for(lambda hub=hub: all(s.up for s in hub.states()), 20, "the server up")
    pids = [json.loads((await hub.call(name, "spawn", {})).text) for hub, name in zip(hubs, "ab", strict=True)]
    assert all(alive(p["server"]) and alive(p["child"]) for p in pids)
    for hub in hubs:
        await hub.aclose(STOP_GRACE)
    # The servers leave when their input closes; their children would stay without the group's SIGTERM.
    assert not [p for pair in pids for p in pair.values() if alive(p)]


async def test_a_stop_kills_a_process_tree_that_ignores_sigterm_after_the_grace(hub_of) -> None:
    hub = await hub_of({"stubborn": stdio_server("--ignore-term")})
    await wait_for(lambda: up(hub, "stubborn"), 20, "the server up")
    pids = json.loads((await hub.call("stubborn", "spawn", {})).text)
    await hub.aclose(1.0)
    # Its child ignores SIGTERM: only the SIGKILL after the grace ends it.
    assert not [p for p in pids.values() if alive(p)]


async def test_the_catalogue_marks_for_private_mode_only_the_tools_the_owner_named(hub_of) -> None:
    hub = await hub_of(
        {
            "named": stdio_server("--only", "echo,big,fail", include=["echo", "b*"], private="allowed"),
            "unmarked": stdio_server("--only", "hang", include=["hang"]),
        }
    )
    await wait_for(lambda: all(s.up for s in hub.states()), 20, "both servers up")
    marked = {t.name: t.private_allowed for t in hub.catalogue()}
    assert marked == {"echo": True, "big": False, "hang": False}


async def test_a_tool_calls_arguments_and_result_and_the_files_secrets_never_reach_the_log(hub_of, caplog) -> None:
    canary, secret = "canary-7f3a9e", "s3cret-header-value"
    caplog.set_level(logging.DEBUG)
    with http_server("--alias", "shout") as url, logging_policy("DEBUG"):
        hub = await hub_of(
            {
                "local": stdio_server("--only", "echo", env={"TOKEN": secret}),
                "web": {"url": url, "include": ["shout"], "headers": {"Authorization": f"Bearer {secret}"}},
            }
        )
        await wait_for(lambda: all(s.up for s in hub.states()), 20, "both servers up")
        assert (await hub.call("local", "echo", {"text": canary})).text == f"echo: {canary}"
        # The SDK's streamable HTTP client logs each message it sends at DEBUG: its floor keeps them out.
        assert (await hub.call("web", "shout", {"text": canary})).text == f"echo: {canary}"
        await hub.aclose(STOP_GRACE)
    assert canary not in caplog.text
    assert secret not in caplog.text


async def test_an_http_server_that_goes_away_and_comes_back_is_used_again(hub_of) -> None:
    port = free_port()
    with http_server(port=port) as url:
        hub = await hub_of({"web": {"url": url, "include": ["echo"]}})
        await wait_for(lambda: up(hub, "web"), 20, "the server up")
        assert (await hub.call("web", "echo", {"text": "one"})).outcome == "ok"
    # Gone: the call fails in words (or finds the server down already), and the tool leaves the catalogue.
    gone = await hub.call("web", "echo", {"text": "two"})
    assert gone.outcome in ("failed", "unavailable")
    await wait_for(lambda: not up(hub, "web"), 20, "the server seen down")
    assert hub.catalogue() == ()
    with http_server(port=port):
        await wait_for(lambda: up(hub, "web"), 30, "the server up again")
        assert (await hub.call("web", "echo", {"text": "three"})).text == "echo: three"


async def test_a_tool_left_out_by_the_filter_is_never_called(hub_of, tmp_path) -> None:
    record = tmp_path / "calls.jsonl"
    hub = await hub_of({"notes": stdio_server(record=record, include=["echo", "big"], exclude=["big"])})
    await wait_for(lambda: up(hub, "notes"), 20, "the server up")
    for name in ("big", "fail"):
        result = await hub.call("notes", name, {"size": 1})
        assert (result.outcome, result.text) == (
            "unavailable",
            f"the tool {name} is not offered by the server notes now",
        )
    assert records(record) == []


async def test_a_stdio_server_is_given_its_own_variables_and_never_the_companions(hub_of, monkeypatch) -> None:
    monkeypatch.setenv("COMPANION_TELEGRAM_TOKEN", "123:never-for-a-server")
    monkeypatch.setenv("NOTES_DIR", "/srv/notes")
    hub = await hub_of({"notes": stdio_server(env={"NOTES_TOKEN": "t"})})
    await wait_for(lambda: up(hub, "notes"), 20, "the server up")
    names = (await hub.call("notes", "environment", {})).text.split()
    assert "NOTES_TOKEN" in names and "PATH" in names
    assert "COMPANION_TELEGRAM_TOKEN" not in names and "NOTES_DIR" not in names


async def test_start_and_aclose_are_safe_to_call_twice(hub_of) -> None:
    hub = await hub_of({"notes": stdio_server("--only", "echo")})
    await hub.start()
    await wait_for(lambda: up(hub, "notes"), 20, "the server up")
    assert len(hub.catalogue()) == 1
    await hub.aclose(STOP_GRACE)
    await hub.aclose(STOP_GRACE)
    assert [(s.up, s.detail, s.tools) for s in hub.states()] == [(False, "stopped", 0)]
    assert (await hub.call("notes", "echo", {"text": "x"})).outcome == "unavailable"
