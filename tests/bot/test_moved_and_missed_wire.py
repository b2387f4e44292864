"""`companion run` end to end: a Telegram group upgraded to a supergroup is followed, and Discord DMs
sent while the gateway was down are answered once after the start (issue 15, real processes)."""

from __future__ import annotations

import signal
import sqlite3
import time

import pytest

from tests.bot.test_gateway_discord import FRIEND, discord_env
from tests.bot.test_gateway_discord import stop as stop_discord
from tests.helpers.proc import spawn_companion
from tests.helpers.running import Running
from tests.helpers.telegram_gateway import USER, gateway_env, spawn, stop, wait_until
from tests.helpers.wire_platforms import rows, shipped

pytestmark = pytest.mark.wire

OLD, NEW = -4242, -1004242
BOT = "companion_test_bot"


def user_texts(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def test_a_telegram_group_upgraded_to_a_supergroup_keeps_its_conversation_and_loses_no_reply(
    tmp_path, telegram_servers
) -> None:
    telegram, model = telegram_servers
    gateway = spawn(gateway_env(tmp_path, telegram, model))
    try:
        model.reply_text("Hello, group.")
        telegram.send_text(OLD, USER, f"@{BOT} the plan is a picnic", chat_type="group")
        wait_until(telegram, gateway, lambda: telegram.texts_to(OLD) == ["Hello, group."])

        # Sent just before the upgrade: the reply meets ChatMigrated and goes to the supergroup.
        model.reply_text("Saturday works.")
        telegram.send_text(OLD, USER, f"@{BOT} saturday?", chat_type="group")
        telegram.migrate_chat(OLD, NEW)
        wait_until(telegram, gateway, lambda: telegram.texts_to(NEW) == ["Saturday works."])

        model.reply_text("Bring the blanket.")
        telegram.send_text(NEW, USER, f"@{BOT} what should I bring?", chat_type="supergroup")
        wait_until(telegram, gateway, lambda: len(telegram.texts_to(NEW)) == 2)
        assert telegram.texts_to(NEW) == ["Saturday works.", "Bring the blanket."]
        assert user_texts(model.requests[-1])[-3:] == [
            "User111: the plan is a picnic",  # each group line is headed with its speaker
            "User111: saturday?",
            "User111: what should I bring?",
        ]
    finally:
        code, stderr = stop(gateway)
    assert code == 0, stderr
    assert telegram.texts_to(OLD) == ["Hello, group."]
    with sqlite3.connect(tmp_path / "companion.db") as db:
        assert db.execute("SELECT chat_id FROM conversations WHERE kind = 'group'").fetchall() == [(str(NEW),)]
        assert db.execute("SELECT count(*) FROM deliveries WHERE status <> 'sent'").fetchall() == [(0,)]


def answer(body: dict) -> str:
    return f"answer to {user_texts(body)[-1]}"


@pytest.mark.parametrize("service_messages", [True, False], ids=["service-messages-first", "send-meets-ChatMigrated"])
@pytest.mark.parametrize("during", ["burst", "model"], ids=["while-its-burst-is-held", "while-the-model-answers"])
def test_a_group_upgraded_in_the_middle_of_a_turn_gets_its_reply_in_the_supergroup_and_nothing_freezes(
    tmp_path, telegram_servers, during: str, service_messages: bool
) -> None:
    """The report: "a reply to a group that was just upgraded: the log says 'following it', then
    nothing; every later message of that chat waits until restart". `service_messages` False: the
    reply's send meets ChatMigrated before any service message re-keyed the chat (the path of the
    report); True: the service messages re-key it first, as they usually do."""
    telegram, model = telegram_servers
    model.responder = answer
    # companion_env shortens the burst window for other wire tests; the upgrade lands in it here.
    # The HTTP service stays off, as in every wire test that does not test it (its shipped port
    # would collide between tests run side by side; the moved chat never touches it).
    env = gateway_env(
        tmp_path, telegram, model, COMPANION_BURST_SECONDS=shipped("burst_seconds"), COMPANION_HTTP_PORT="0"
    )
    db = tmp_path / "companion.db"

    def mention(text: str) -> str:
        return f"@{BOT} {text}"

    with Running(env) as gateway:
        gateway.wait_running()
        telegram.send_text(OLD, USER, mention("the plan is a picnic"), chat_type="group")
        gateway.wait_for(lambda: len(telegram.texts_to(OLD)) == 1, "the first reply")

        if during == "model":
            model.reply_delay(2.0)
        telegram.send_text(OLD, USER, mention("saturday?"), chat_type="group")
        if during == "burst":
            gateway.wait_for(lambda: rows(db, "SELECT count(*) FROM messages WHERE turn = 'open'") == [(1,)], "held")
            assert len(model.requests) == 1, "the burst window passed before the upgrade: this case proves nothing"
        else:
            gateway.wait_for(lambda: len(model.requests) == 2, "the model asked")
        telegram.migrate_chat(OLD, NEW, service_messages=service_messages)
        gateway.wait_for(lambda: len(telegram.texts_to(NEW)) == 1, "the reply, in the supergroup")

        for number, text in enumerate(["what should I bring?", "and drinks?"], start=2):
            telegram.send_text(NEW, USER, mention(text), chat_type="supergroup")
            gateway.wait_for(lambda number=number: len(telegram.texts_to(NEW)) == number, f"reply {number}")
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr

    assert telegram.texts_to(OLD) == ["answer to User111: the plan is a picnic"]
    if not service_messages:  # the reply was refused at the old id first, and followed the move
        assert [int(call["chat_id"]) for call in telegram.calls_of("sendMessage")][:3] == [OLD, OLD, NEW]
    assert telegram.texts_to(NEW) == [
        "answer to User111: saturday?",
        "answer to User111: what should I bring?",
        "answer to User111: and drinks?",
    ]
    assert user_texts(model.requests[-1])[-4:] == [  # one conversation across the move
        "User111: the plan is a picnic",
        "User111: saturday?",
        "User111: what should I bring?",
        "User111: and drinks?",
    ]
    assert rows(db, "SELECT chat_id FROM conversations") == [(str(NEW),)]
    assert rows(db, "SELECT status, count(*) FROM deliveries GROUP BY status") == [("sent", 4)]
    assert rows(db, "SELECT count(*) FROM messages WHERE turn = 'open'") == [(0,)]


def test_a_discord_dm_sent_while_the_gateway_was_down_is_answered_once_after_the_start(
    tmp_path, discord_servers, passphrase_hash
) -> None:
    discord_server, model = discord_servers
    call = discord_server.call
    # Bursts off: the caught-up DM and the live one would otherwise be answered together (as they
    # should be, see the burst tests); here each is answered on its own.
    env = discord_env(tmp_path, discord_server, model, passphrase_hash, COMPANION_BURST_SECONDS="0")
    channel = discord_server.dm_channel_id(FRIEND)

    def texts() -> list[str]:
        return [m.content for m in discord_server.sent if m.channel_id == channel]

    def run_and_say_later(later: str, count: int) -> None:
        """Start, say `later` once past the before-restart margin, wait for `count` replies, stop."""
        identified = len(discord_server.identifies)
        proc = spawn_companion(["run"], env)
        try:
            call(
                discord_server.wait_until(
                    lambda: (
                        len(discord_server.identifies) > identified
                        and any(s.ready and not s.ws.closed for s in discord_server.sessions)
                    ),
                    30,
                    "the new session",
                ),
                timeout=40,
            )
            time.sleep(1.0)  # a DM stamped within half a second of the start counts as sent before it
            call(discord_server.send_dm(FRIEND, later))
            call(discord_server.wait_until(lambda: len(texts()) >= count, 20, f"{count} replies"), timeout=30)
        finally:
            _, stderr = stop_discord(proc)
        assert proc.returncode == 0, stderr

    model.reply_text("Hello!")
    run_and_say_later("hello", 1)

    discord_server.post_dm_while_offline(FRIEND, "did you miss me?")
    model.reply_text("I did!")
    model.reply_text("Good to hear.")
    run_and_say_later("I am back", 3)
    assert texts() == ["Hello!", "I did!", "Good to hear."]
    assert user_texts(model.requests[-1])[-3:] == ["hello", "did you miss me?", "I am back"]

    asked = len(model.requests)
    model.reply_text("Still here.")
    run_and_say_later("and again", 4)
    assert texts() == ["Hello!", "I did!", "Good to hear.", "Still here."]
    assert len(model.requests) == asked + 1
