"""Discord slash commands and confirmation buttons: the real discord.py and core against the fake Discord."""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
from pathlib import Path

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from bot.bootstrap import build_companion
from core.commands.export import CONFIRM_WINDOW
from core.commands.registry import COMMANDS
from core.delivery.outbox import Outbox
from core.ports.clock import SystemClock
from core.turn.config import CompanionConfig
from core.values.copy import DELETE_SECRET_NOTE, NOT_ALLOWED
from core.values.errors import DeliveryFailed
from core.values.model import DeliveryTarget, OutboundDelivery
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.adapters import discord_adapter
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_discord_interactions import EPHEMERAL
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.logs import logging_policy

FRIEND = 111  # allowed: discord:111
STRANGER = 222
CONFIRM = "companion:/export confirm"


@pytest.fixture
async def discord_server():
    async with FakeDiscordServer() as server:
        yield server


@pytest.fixture
async def model():
    async with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
async def core(stores, model, passphrase_hash, clock):
    provider = OpenAICompatibleProvider(model.base_url, max_retries=0)
    companion = build_companion(
        stores,
        provider,
        CompanionConfig(
            allowed_accounts=frozenset({f"discord:{FRIEND}"}),
            passphrase_hash=passphrase_hash,
            allow_private_export=True,
            private_idle_seconds=None,
        ),
        outbox=Outbox(stores.outbox, SystemClock()),
        clock=clock,  # moved past the five minutes a confirmation lasts
    )
    await companion.start()
    yield companion
    await companion.drain()
    await provider.aclose()


@pytest.fixture
async def adapter(discord_server, core):
    adapter = discord_adapter(discord_server, core)
    await adapter.start()
    yield adapter
    await adapter.aclose()


def db_rows(stores, sql: str) -> list[tuple]:
    with sqlite3.connect(engines.sqlite_file(stores)) as db:
        return db.execute(sql).fetchall()


def db_bytes(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("companion.db"))


# --- the commands ------------------------------------------------------------------


async def test_the_chat_commands_are_synced_as_slash_commands_at_start(discord_server, adapter):
    (put,) = discord_server.interactions.command_puts  # one bulk overwrite, before READY
    synced = {c["name"]: c for c in discord_server.interactions.commands}
    assert set(synced) == {c.name for c in COMMANDS}
    private = synced["private"]["options"]
    assert [(o["name"], o["type"], o.get("required", False)) for o in private] == [
        ("passphrase", 3, True),
        ("expiry", 3, False),
    ]
    assert [o["name"] for o in synced["link"]["options"]] == ["code"]
    assert [o["name"] for o in synced["remember"]["options"]] == ["args"]
    assert "options" not in synced["help"] or synced["help"]["options"] == []
    assert len(put) == len(COMMANDS)


async def test_a_slash_command_is_answered_through_its_interaction(discord_server, adapter):
    interaction = await discord_server.interactions.slash_command(FRIEND, "help")
    callback, *followups = await discord_server.interactions.wait_for_responses(interaction, 2)
    assert (callback.kind, callback.type, callback.ephemeral) == ("callback", 5, False)  # deferred at once
    assert followups and all(f.kind == "followup" and not f.ephemeral for f in followups)
    assert "/private PASSPHRASE" in "".join(f.content for f in followups)
    assert discord_server.sent == []  # the answer is the interaction's, not a second channel message


async def test_slash_private_enters_private_mode_and_the_passphrase_appears_in_no_message_row_or_body(
    discord_server, adapter, stores, tmp_path
):
    interactions = discord_server.interactions
    interaction = await interactions.slash_command(FRIEND, "private", {"passphrase": PASSPHRASE})
    callback, answer = await interactions.wait_for_responses(interaction, 2)
    assert (callback.type, callback.flags & EPHEMERAL) == (5, EPHEMERAL)  # deferred, ephemeral
    assert answer.kind == "followup" and answer.ephemeral and answer.flags & EPHEMERAL
    assert "private" in answer.content.lower()
    # The mode is private afterwards: a typed /mode says so.
    await discord_server.send_dm(FRIEND, "/mode")
    (mode,) = await discord_server.wait_for_sent(1)
    assert "You are in private mode" in mode.content
    # Stored exactly as a typed /private is: redacted.
    assert ("/private [redacted]",) in db_rows(stores, "SELECT text FROM messages WHERE kind = 'command'")
    secret = PASSPHRASE.encode()
    assert any(PASSPHRASE in str(p) for p in interactions.payloads)  # only where the fake itself put it
    assert all(PASSPHRASE not in m["content"] for m in discord_server.messages.values())
    assert all(PASSPHRASE not in r.content for r in interactions.responses)
    assert all(secret not in body for body in discord_server.bodies)
    assert all(PASSPHRASE not in frame for frame in discord_server.frames)
    assert secret not in db_bytes(tmp_path)


async def test_a_passphrase_with_a_space_changes_nothing_and_is_answered_ephemerally(discord_server, adapter, stores):
    interactions = discord_server.interactions
    interaction = await interactions.slash_command(FRIEND, "private", {"passphrase": f"{PASSPHRASE} 1h"})
    _, answer = await interactions.wait_for_responses(interaction, 2)
    assert answer.ephemeral and "Nothing changed" in answer.content
    assert db_rows(stores, "SELECT count(*) FROM segments") == [(0,)]


async def test_slash_private_in_a_guild_is_refused_ephemerally_and_never_shown(discord_server, adapter):
    interactions = discord_server.interactions
    interaction = await interactions.slash_command(FRIEND, "private", {"passphrase": PASSPHRASE}, in_guild=True)
    callback, answer = await interactions.wait_for_responses(interaction, 2)
    assert callback.ephemeral and answer.ephemeral
    assert "one-to-one" in answer.content
    assert discord_server.sent == []


# --- confirmation buttons ----------------------------------------------------------


async def _crossing_asked(discord_server) -> int:
    """In a DM, private mode, `/export` typed: returns the id of the bot's message with the button."""
    await discord_server.send_dm(FRIEND, f"/private {PASSPHRASE}")
    await discord_server.send_dm(FRIEND, "a private line")
    await discord_server.wait_for_sent(2)
    await discord_server.send_dm(FRIEND, "/export")
    sent = await discord_server.wait_for_sent(3)
    asked = discord_server.messages[sent[-1].id]
    assert "NEW, NON-PRIVATE artifact" in asked["content"]
    return sent[-1].id


async def test_the_export_crossing_is_confirmed_by_its_button(discord_server, adapter, stores):
    asked = await _crossing_asked(discord_server)
    interactions = discord_server.interactions
    interaction = await interactions.press_button(FRIEND, asked, CONFIRM)
    callback, *answers = await interactions.wait_for_responses(interaction, 3)
    assert (callback.type, callback.ephemeral) == (6, False)  # acknowledged without a loading state
    assert any(a.content.startswith("Created non-private artifact #1") for a in answers)
    assert any(name.startswith("companion-crossing-") for a in answers for name, _ in a.files)
    assert db_rows(stores, "SELECT count(*) FROM artifacts") == [(1,)]


async def test_a_button_pressed_again_after_its_confirmation_was_used_says_so(discord_server, adapter, stores):
    asked = await _crossing_asked(discord_server)
    interactions = discord_server.interactions
    first = await interactions.press_button(FRIEND, asked, CONFIRM)
    await interactions.wait_for_responses(first, 3)
    again = await interactions.press_button(FRIEND, asked, CONFIRM)
    _, answer = await interactions.wait_for_responses(again, 2)
    assert "no crossing waiting for confirmation" in answer.content
    assert db_rows(stores, "SELECT count(*) FROM artifacts") == [(1,)]


async def test_a_button_pressed_after_the_confirmation_expired_says_so(discord_server, adapter, stores, clock):
    asked = await _crossing_asked(discord_server)
    clock.advance(CONFIRM_WINDOW + 1)
    interaction = await discord_server.interactions.press_button(FRIEND, asked, CONFIRM)
    _, answer = await discord_server.interactions.wait_for_responses(interaction, 2)
    assert "no crossing waiting for confirmation (it lasts 5 minutes)" in answer.content
    assert db_rows(stores, "SELECT count(*) FROM artifacts") == [(0,)]


async def test_the_typed_confirmation_still_works_on_discord(discord_server, adapter, stores):
    await _crossing_asked(discord_server)
    await discord_server.send_dm(FRIEND, "/export confirm")
    sent = await discord_server.wait_for_sent(4)
    assert any(m.content.startswith("Created non-private artifact #1") for m in sent)
    assert db_rows(stores, "SELECT count(*) FROM artifacts") == [(1,)]


# --- interactions under pressure ---------------------------------------------------------


async def test_a_slash_command_is_acknowledged_in_time_while_a_turn_of_its_chat_is_running(
    discord_server, adapter, model
):
    interactions = discord_server.interactions
    interactions.response_deadline = 1.0  # Discord's is 3 s; the turn below takes longer than this
    model.reply_text("a slow answer", delay=3.0)
    await discord_server.send_dm(FRIEND, "tell me something")
    await discord_server.wait_until(lambda: len(model.requests) == 1, what="the model asked")
    interaction = await interactions.slash_command(FRIEND, "mode")
    callback, answer = await interactions.wait_for_responses(interaction, 2)
    assert callback.type == 5  # acknowledged at once; answered after the running turn, in order
    assert "You are in normal mode" in answer.content
    assert [m.content for m in discord_server.sent] == ["a slow answer"]


async def test_an_ephemeral_answer_that_cannot_be_sent_never_becomes_a_channel_message(
    discord_server, adapter, stores, core
):
    discord_server.fail_next("POST", "/webhooks/{application_id}/{token}", 400)
    interaction = await discord_server.interactions.slash_command(
        FRIEND, "private", {"passphrase": PASSPHRASE}, in_guild=True
    )
    await discord_server.interactions.wait_for_responses(interaction, 1)
    await discord_server.wait_until(
        lambda: db_rows(stores, "SELECT status FROM deliveries") == [("failed",)], what="the delivery settled"
    )
    await core.outbox.dispatch_due(at_start=True)
    assert discord_server.sent == []


async def test_an_ephemeral_answer_whose_interaction_is_not_known_any_more_is_never_sent_to_the_channel(
    discord_server, adapter
):
    channel = DeliveryTarget("discord", str(discord_server.guild_channel_id))
    ephemeral = OutboundDelivery(
        id=1,
        conversation_id=1,
        kind="reply",
        target=dataclasses.replace(channel, route="4242:ephemeral"),  # its interaction: forgotten, or another run's
        nonce="0123456789abcdef",
        text="Only you may read this.",
        parts_sent=0,
        attempts=0,
    )
    with pytest.raises(DeliveryFailed) as failed:
        await adapter.send_delivery(ephemeral)
    assert failed.value.permanent and discord_server.sent == []
    # An answer everyone in the channel may read goes to the channel instead, as a retry of it does.
    public = dataclasses.replace(
        ephemeral,
        id=2,
        nonce="fedcba9876543210",
        text="Anyone may read this.",
        target=dataclasses.replace(channel, route="4243"),
    )
    assert await adapter.send_delivery(public) == 1
    assert [m.content for m in discord_server.sent] == ["Anyone may read this."]


async def test_a_secret_slash_command_asks_to_delete_nothing_and_deletes_nothing(discord_server, adapter):
    interactions = discord_server.interactions
    in_dm = await interactions.slash_command(FRIEND, "private", {"passphrase": PASSPHRASE})
    _, answer = await interactions.wait_for_responses(in_dm, 2)
    # The passphrase was a command option, never a message in the chat: there is nothing to delete.
    assert "private" in answer.content.lower() and DELETE_SECRET_NOTE not in answer.content
    in_guild = await interactions.slash_command(FRIEND, "private", {"passphrase": PASSPHRASE}, in_guild=True)
    _, refused = await interactions.wait_for_responses(in_guild, 2)
    assert "one-to-one" in refused.content and DELETE_SECRET_NOTE not in refused.content
    assert not any(method == "DELETE" and "/channels/" in path for method, path, _ in discord_server.requests)


async def test_a_slash_command_the_core_answers_with_silence_leaves_no_thinking_message(discord_server, adapter):
    interactions = discord_server.interactions
    first = await interactions.slash_command(STRANGER, "help")
    _, refusal = await interactions.wait_for_responses(first, 2)
    assert refusal.content == NOT_ALLOWED
    again = await interactions.slash_command(STRANGER, "help")  # refused once already: not answered again
    callback, gone = await interactions.wait_for_responses(again, 2)
    assert (callback.type, gone.kind) == (5, "delete")


# --- the fake is as strict as Discord ------------------------------------------------------


async def test_the_fake_refuses_commands_discord_refuses(discord_server):
    import aiohttp

    url = f"{discord_server.api_base}/applications/{discord_server.app_id}/commands"
    headers = {"Authorization": f"Bot {discord_server.token}"}
    good = {"name": "help", "description": "What I can do"}
    bad_bodies = [
        [{"name": "Help", "description": "upper case"}],
        [{"name": "help", "description": ""}],
        [{"name": "help", "description": "x" * 101}],
        [good, good],
        [{"name": f"c{i}", "description": "d"} for i in range(101)],
        [
            {
                "name": "private",
                "description": "d",
                "options": [
                    {"name": "expiry", "description": "d", "type": 3},
                    {"name": "passphrase", "description": "d", "type": 3, "required": True},
                ],
            }
        ],
    ]
    async with aiohttp.ClientSession() as session:
        for body in bad_bodies:
            async with session.put(url, json=body, headers=headers) as response:
                assert response.status == 400 and (await response.json())["code"] == 50035
        async with session.put(url, json=[good], headers=headers) as response:
            assert response.status == 200
        async with session.put(url, json=[good]) as response:
            assert response.status == 401  # a bulk overwrite needs the bot token


async def test_an_interaction_answered_too_late_runs_nothing_and_the_fake_takes_one_answer_only(
    discord_server, core, stores
):
    import aiohttp

    adapter = discord_adapter(discord_server, core)
    await adapter.start()
    try:
        interactions = discord_server.interactions
        answered = await interactions.slash_command(FRIEND, "help")
        await interactions.wait_for_responses(answered, 2)
        interactions.response_deadline = -1.0  # every answer comes too late
        late = await interactions.slash_command(FRIEND, "help")
        callback = "/api/v10/interactions/{interaction_id}/{token}/callback"
        await discord_server.wait_until(lambda: ("POST", callback, 404) in discord_server.requests)
        token = {p["id"]: p["token"] for p in interactions.payloads}
        base = discord_server.api_base
        async with aiohttp.ClientSession() as session:
            again = f"{base}/interactions/{answered}/{token[str(answered)]}/callback"
            async with session.post(again, json={"type": 4, "data": {"content": "x"}}) as response:
                assert response.status == 400 and (await response.json())["code"] == 40060
            wrong = f"{base}/interactions/{answered}/not-the-token/callback"
            async with session.post(wrong, json={"type": 4, "data": {"content": "x"}}) as response:
                assert response.status == 404 and (await response.json())["code"] == 10062
            followup = f"{base}/webhooks/{discord_server.app_id}/{token[str(late)]}"
            async with session.post(followup, json={"content": "x"}) as response:
                assert response.status == 404 and (await response.json())["code"] == 10015
    finally:
        await adapter.aclose()
    # The late one: its acknowledgement was refused, so the command did not run and nothing followed.
    assert interactions.responses_to(late) == []
    assert db_rows(stores, f"SELECT count(*) FROM messages WHERE platform_message_id = '{late}'") == [(0,)]
    assert db_rows(stores, f"SELECT count(*) FROM messages WHERE platform_message_id = '{answered}'") == [(1,)]


async def test_neither_the_passphrase_nor_the_interaction_token_reaches_the_logs_even_at_debug(
    discord_server, core, caplog
):
    caplog.set_level(logging.DEBUG)
    adapter = discord_adapter(discord_server, core)
    with logging_policy("DEBUG"):  # COMPANION_LOG_LEVEL=DEBUG
        await adapter.start()
        try:
            interactions = discord_server.interactions
            interaction = await interactions.slash_command(FRIEND, "private", {"passphrase": PASSPHRASE})
            await interactions.wait_for_responses(interaction, 2)
        finally:
            await adapter.aclose()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    (payload,) = discord_server.interactions.payloads
    assert PASSPHRASE not in logged and payload["token"] not in logged
    assert any(r.name.startswith("adapters.discord") for r in caplog.records)


async def test_when_the_commands_cannot_be_synced_start_up_goes_on_and_typed_commands_work(discord_server, core):
    discord_server.fail_next("PUT", "/applications/{application_id}/commands", 403)
    adapter = discord_adapter(discord_server, core)
    await adapter.start()
    try:
        assert discord_server.interactions.commands == []
        await discord_server.send_dm(FRIEND, "/mode")
        (answer,) = await discord_server.wait_for_sent(1)
        assert "You are in normal mode" in answer.content
    finally:
        await adapter.aclose()


async def test_slash_export_asks_with_a_button_on_its_followup_and_the_button_confirms(discord_server, adapter, stores):
    interactions = discord_server.interactions
    entered = await interactions.slash_command(FRIEND, "private", {"passphrase": PASSPHRASE})
    await interactions.wait_for_responses(entered, 2)
    asked = await interactions.slash_command(FRIEND, "export")
    _, question = await interactions.wait_for_responses(asked, 2)
    assert "NEW, NON-PRIVATE artifact" in question.content
    (row,) = question.components
    assert [(c["type"], c["custom_id"]) for c in row["components"]] == [(2, CONFIRM)]
    assert question.message_id is not None
    pressed = await interactions.press_button(FRIEND, question.message_id, CONFIRM)
    _, *answers = await interactions.wait_for_responses(pressed, 3)
    assert any(a.content.startswith("Created non-private artifact #1") for a in answers)
    assert db_rows(stores, "SELECT count(*) FROM artifacts") == [(1,)]


def test_the_fake_refuses_buttons_discord_refuses():
    from tests.helpers.fake_discord_interactions import component_errors

    def row(*buttons):
        return {"type": 1, "components": list(buttons)}

    def button(custom_id, **extra):
        return {"type": 2, "style": 4, "label": "Yes", "custom_id": custom_id, **extra}

    assert component_errors([row(button("x" * 100))]) is None
    for bad in (
        [row(button("x" * 101))],  # custom_id: at most 100 characters
        [row(button(""))],
        [row(button("same"), button("same"))],  # unique within a message
        [row(*[button(str(i)) for i in range(6)])],  # at most 5 in a row
        [row(button(str(i))) for i in range(6)],  # at most 5 rows
        [button("bare")],  # buttons live in action rows
        [row(button("x", label="l" * 81))],
    ):
        assert component_errors(bad) is not None
