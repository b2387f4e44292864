"""Tools served by MCP servers behind the wall (issue 32), against a fake of the port (core/ports/tools.py):
normal mode is offered them, private mode only those the owner named, and a private turn's served call
leaves no row; the wire tests (tests/bot/test_served_tools_wire.py) run real servers through `companion run`."""

from __future__ import annotations

import json
import logging

import pytest

from bot.bootstrap import build_companion
from core.memory.tools import PRIVATE_FORBIDDEN, SERVED, SERVED_PRIVATE, served_tool
from core.ports.tools import ServedResult, ServedTool, ServerState
from core.turn.analytics import render_report
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.values.model import Completion, ToolCall
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows, conversation_of, say
from tests.helpers.fakes import FakeToolServers

CANARY = "SERVED-CANARY-7f3a"
SCHEMA = {"type": "object", "properties": {"day": {"type": "string"}}}
# A server the owner named one tool of for private mode, and a server it did not name at all.
NOTES = ServedTool("notes", "read_note", "Read one of the person's notes.", SCHEMA, private_allowed=True)
NOTES_OTHER = ServedTool("notes", "write_note", "Write a note.", SCHEMA, private_allowed=False)
CALENDAR = ServedTool("calendar", "list_events", "The person's events of a day.", SCHEMA, private_allowed=False)


@pytest.fixture
def servers() -> FakeToolServers:
    return FakeToolServers(
        [NOTES, NOTES_OTHER, CALENDAR],
        [ServerState("notes", "stdio", True, "", 2), ServerState("calendar", "stdio", True, "", 1)],
    )


@pytest.fixture
async def companion(stores, provider, clock, passphrase_hash, servers) -> Companion:
    made = build_companion(
        stores, provider, CompanionConfig(passphrase_hash=passphrase_hash), clock=clock, servers=servers
    )
    await made.start()
    return made


def offered(request) -> set[str]:
    return {t.name for t in request.tools}


def calls(*names: str, arguments: dict | None = None) -> Completion:
    text = json.dumps(arguments or {"day": CANARY})
    return Completion("", tuple(ToolCall(f"c{i}", name, text) for i, name in enumerate(names)))


async def go_private(companion: Companion) -> None:
    assert "Private mode is on" in (await say(companion, f"/private {PASSPHRASE} 1h")).text


def test_a_served_tool_is_tagged_so_that_private_mode_is_offered_it_only_when_the_owner_named_it(servers):
    assert SERVED in PRIVATE_FORBIDDEN and SERVED_PRIVATE not in PRIVATE_FORBIDDEN
    assert served_tool(NOTES, servers).tags == {SERVED_PRIVATE}
    assert served_tool(CALENDAR, servers).tags == {SERVED}


async def test_normal_mode_is_offered_every_served_tool_beside_the_built_in_ones(companion, provider):
    await say(companion, "hello")
    names = offered(provider.last_reply_request())
    assert {"read_note", "write_note", "list_events", "remember", "current_time"} <= names


async def test_a_private_turn_is_offered_no_served_tool_unless_the_owner_named_it(companion, provider):
    await go_private(companion)
    await say(companion, "hello in private")
    names = offered(provider.last_reply_request())
    assert "read_note" in names  # named by the owner for private mode
    assert not {"write_note", "list_events"} & names
    assert "current_time" in names and "remember" not in names  # the built-in wall as before


async def test_a_private_turn_cannot_call_a_served_tool_it_was_not_offered(companion, provider, servers):
    await go_private(companion)
    provider.script = [calls("list_events"), Completion("done")]
    await say(companion, "what is on monday?")
    assert servers.calls == []  # the canary never reached a server the owner did not name
    tool_message = provider.last_reply_request().messages[-1]
    assert tool_message.role == "tool" and "no tool named 'list_events'" in (tool_message.content or "")


async def test_a_served_tool_call_in_a_private_turn_writes_no_analytics_row(
    companion, provider, stores, servers, caplog
):
    caplog.set_level(logging.DEBUG)
    servers.results["read_note"] = ServedResult(f"the note says {CANARY}", "ok", 0.01)
    await go_private(companion)
    provider.script = [calls("read_note"), Completion("Here it is.")]
    await say(companion, "read me my note")
    assert servers.calls == [("notes", "read_note", {"day": CANARY})]
    # The result reached the model in this turn's request, and nowhere else.
    assert CANARY in (provider.last_reply_request().messages[-1].content or "")
    assert await all_rows(stores, "SELECT count(*) FROM tool_operations") == [(0,)]
    assert await all_rows(stores, "SELECT count(*) FROM agent_events") == [(0,)]
    assert CANARY.encode() not in engines.stored_bytes(stores)
    # The log says server, tool, outcome, sizes and time: never the arguments nor the result.
    assert "served tool read_note of server notes: ok" in caplog.text and CANARY not in caplog.text


async def test_a_built_in_tool_call_in_a_private_turn_still_names_its_interval(companion, provider, stores):
    # What came before served tools: the clock's call in a private turn is a row of its interval.
    await go_private(companion)
    provider.script = [calls("current_time", arguments={}), Completion("noon")]
    await say(companion, "what time is it?")
    assert await all_rows(stores, "SELECT count(*) FROM tool_operations WHERE segment_id IS NOT NULL") == [(1,)]


async def test_a_served_call_in_normal_mode_is_reported_by_server_tool_duration_and_outcome_only(
    companion, provider, stores, servers
):
    servers.results["list_events"] = ServedResult(f"lunch with {CANARY}", "ok", 0.25)
    servers.results["write_note"] = ServedResult("the tool write_note did not answer within 30 s", "timeout", 30.0)
    provider.script = [calls("list_events", "write_note"), Completion("You have lunch.")]
    await say(companion, "what is on monday?")
    assert [c[:2] for c in servers.calls] == [("calendar", "list_events"), ("notes", "write_note")]
    events = await all_rows(
        stores,
        "SELECT server, name, status, duration_ms, size_in, size_out FROM agent_events"
        " WHERE kind = 'tool_call' ORDER BY id",
    )
    assert events == [
        ("calendar", "list_events", "ok", 250.0, None, None),
        ("notes", "write_note", "timeout", 30000.0, None, None),
    ]
    report = render_report(await stores.memory.report_rows())
    assert "  calendar list_events: ok 1, 250/250 ms" in report.splitlines()
    assert "  notes write_note: timeout 1, 30000/30000 ms" in report.splitlines()
    assert CANARY not in report


async def test_the_tool_set_is_fixed_before_the_model_call_whatever_the_servers_offer_meanwhile(
    companion, provider, servers
):
    late = ServedTool("calendar", "add_event", "Add an event.", SCHEMA, private_allowed=False)
    servers.on_call = lambda: servers.tools.append(late)
    provider.script = [calls("list_events"), Completion("done")]
    await say(companion, "what is on monday?")
    first, second = provider.replies()[-2:]
    assert offered(first) == offered(second) and "add_event" not in offered(second)
    await say(companion, "and now?")
    assert "add_event" in offered(provider.last_reply_request())  # the next turn's set has it


async def test_a_served_tool_named_like_a_built_in_one_is_left_out(stores, provider, clock, passphrase_hash):
    clash = ServedTool("notes", "remember", "Not ours.", SCHEMA, private_allowed=True)
    servers = FakeToolServers([clash])
    companion = build_companion(
        stores, provider, CompanionConfig(passphrase_hash=passphrase_hash), clock=clock, servers=servers
    )
    await companion.start()
    provider.script = [calls("remember", arguments={"text": "likes tea"}), Completion("Noted.")]
    await say(companion, "remember I like tea")
    assert [t.name for t in provider.replies()[0].tools].count("remember") == 1
    assert servers.calls == []  # the built-in tool ran
    assert await all_rows(stores, "SELECT tool, status FROM tool_operations") == [("remember", "ok")]


async def test_tools_lists_the_tools_offered_in_each_mode_and_the_servers_that_are_down(companion, servers):
    servers.server_states.append(ServerState("home", "http", False, "not reachable (connection refused)", 0))
    normal = (await say(companion, "/tools")).text
    assert "remember" in normal and "From calendar: list_events." in normal
    assert "From notes: read_note, write_note." in normal
    assert "Server home is not reachable now: not reachable (connection refused)." in normal
    await go_private(companion)
    private = (await say(companion, "/tools")).text
    assert "From notes: read_note." in private and "list_events" not in private and "remember" not in private
    assert "named it for private mode" in private


async def test_help_names_the_tools_command(companion):
    assert "/tools - " in (await say(companion, "/help")).text


async def test_what_normal_mode_sees_names_the_served_tools_offered_and_the_servers_down(companion, servers):
    servers.server_states.append(ServerState("home", "http", False, "starting", 0))
    await go_private(companion)  # the preview is normal mode's, whatever the mode now
    preview = await companion.parts.preview.of(await conversation_of(companion))
    assert {"list_events", "write_note", "read_note"} <= {t.name for t in preview.request.tools}
    assert ("list_events", "calendar") in preview.served_by and preview.servers_down == ("home",)


async def test_a_served_tool_whose_adapter_raises_costs_the_call_not_the_answer(companion, provider, servers):
    async def broken(server: str, name: str, arguments: dict) -> ServedResult:
        raise RuntimeError(CANARY)

    servers.call = broken
    provider.script = [calls("list_events"), Completion("Sorry, the calendar failed.")]
    assert (await say(companion, "what is on monday?")).text == "Sorry, the calendar failed."
    assert provider.last_reply_request().messages[-1].content == "error: the tool failed"
