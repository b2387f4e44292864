"""Streamed replies on Discord through `companion run` (issue 24): a real subprocess with the defaults as
shipped (bursts 1.5 s, one edit a second), the fake Discord and a fake model writing a few words a
second. A kill mid-stream leaves the partial message, which the answer after the restart edits (one
message, nothing doubled); a SIGTERM mid-stream lets the answer finish within the stop grace, sent
once; a private answer streamed in a DM reaches no mirror, no later normal request, and no byte of
the database once `/forget private` ran."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from core.values.copy import MIRROR_HELLO
from tests.bot.test_gateway_discord import FRIEND, discord_env, last_user_text
from tests.conftest import PASSPHRASE
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.running import Running
from tests.helpers.wire_platforms import rows, shipped

pytestmark = pytest.mark.wire

STORY = " ".join(f"word{n}" for n in range(100)) + "."
CANARY = "canary-7e21"


def stream_env(tmp_path: Path, discord_server: FakeDiscordServer, model: FakeOpenAIServer, passphrase_hash: str):
    # As shipped: companion_env shortens the burst window for other wire tests; streaming (one edit
    # a second) is on by default and left so.
    return discord_env(
        tmp_path, discord_server, model, passphrase_hash, COMPANION_BURST_SECONDS=shipped("burst_seconds")
    )


def db_bytes(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("companion.db"))


def test_a_discord_answer_killed_mid_stream_is_finished_after_the_restart_in_the_message_shown(
    tmp_path, discord_servers, passphrase_hash
):
    discord_server, model = discord_servers
    call = discord_server.call
    env = stream_env(tmp_path, discord_server, model, passphrase_hash)
    dm = discord_server.dm_channel_id(FRIEND)
    model.token_seconds = 0.2  # 20 s of answer: killed well inside it
    model.reply_text(STORY)
    with Running(env) as gateway:
        gateway.wait_running()
        call(discord_server.send_dm(FRIEND, "tell me everything"))
        gateway.wait_for(lambda: bool(discord_server.sent and discord_server.edits), "the answer shown and edited")
        gateway.end(signal.SIGKILL)
    [partial] = discord_server.shown(dm)
    assert partial != STORY and STORY.startswith(partial)
    [message] = discord_server.sent
    db = tmp_path / "companion.db"
    assert rows(db, "SELECT status, streamed_ids, text FROM deliveries") == [("streaming", str(message.id), None)]

    model.forget_script()
    model.token_seconds = 0.0
    model.reply_text("The whole answer, after all.")
    asked = len(model.requests)
    with Running(env) as gateway:
        gateway.wait_running()
        gateway.wait_for(lambda: discord_server.shown(dm) == ["The whole answer, after all."], "the final answer")
        time.sleep(1.0)  # anything doubled would show by now
        code, stderr = gateway.end()
    assert code == 0, stderr
    # The same message now holds the answer: edited, not a second message; asked once more.
    assert discord_server.shown(dm) == ["The whole answer, after all."]
    assert [m.id for m in discord_server.sent] == [message.id]
    assert discord_server.edits_of(message.id)[-1].content == "The whole answer, after all."
    assert len(model.requests) == asked + 1 and last_user_text(model.requests[-1]) == "tell me everything"
    assert rows(db, "SELECT kind, status, streamed_ids FROM deliveries") == [("reply", "sent", str(message.id))]
    assert "word1" not in stderr


def test_a_sigterm_mid_stream_lets_the_discord_answer_finish_and_sends_it_once(
    tmp_path, discord_servers, passphrase_hash
):
    discord_server, model = discord_servers
    call = discord_server.call
    env = stream_env(tmp_path, discord_server, model, passphrase_hash)
    dm = discord_server.dm_channel_id(FRIEND)
    model.token_seconds = 0.08  # 8 s of answer, well within the stop grace as shipped (25 s)
    model.reply_text(STORY)
    with Running(env) as gateway:
        gateway.wait_running()
        call(discord_server.send_dm(FRIEND, "tell me everything"))
        gateway.wait_for(lambda: bool(discord_server.sent and discord_server.edits), "the answer shown and edited")
        stopped_at = len(discord_server.edits)
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr
    assert discord_server.shown(dm) == [STORY]  # finished during the stop ...
    [message] = discord_server.sent  # ... in the message shown
    assert len(discord_server.edits) > stopped_at
    db = tmp_path / "companion.db"
    assert rows(db, "SELECT kind, status FROM deliveries") == [("reply", "sent")]
    assert rows(db, "SELECT turn FROM messages WHERE text = 'tell me everything'") == [("done",)]

    edits = len(discord_server.edits)
    with Running(env) as gateway:  # nothing is left to send or answer
        gateway.wait_running()
        time.sleep(1.5)
        code, stderr = gateway.end()
    assert code == 0, stderr
    assert [m.id for m in discord_server.sent] == [message.id] and len(discord_server.edits) == edits
    assert discord_server.shown(dm) == [STORY]


def test_a_private_answer_streamed_in_a_discord_dm_reaches_no_mirror_no_normal_request_and_no_byte_after_forget(
    tmp_path, discord_servers, passphrase_hash
):
    discord_server, model = discord_servers
    call = discord_server.call
    env = stream_env(tmp_path, discord_server, model, passphrase_hash)
    dm, channel = discord_server.dm_channel_id(FRIEND), discord_server.guild_channel_id
    normal = "Glad to hear it. " + " ".join(f"plain{n}" for n in range(30)) + "."
    secret = f"{CANARY} is safe with me. " + " ".join(f"quiet{n}" for n in range(40)) + "."
    model.token_seconds = 0.08  # each answer streams for a few seconds

    def said(count: int) -> None:
        gateway.wait_for(lambda: len(discord_server.shown(dm)) >= count, f"{count} messages in the DM")

    with Running(env) as gateway:
        gateway.wait_running()
        call(discord_server.send_dm(FRIEND, f"/mirror discord:{channel}"))
        said(1)
        assert discord_server.shown(dm)[0].startswith("Mirror 1 is on"), discord_server.shown(dm)
        model.reply_text(normal)
        call(discord_server.send_dm(FRIEND, "I had a good day"))
        gateway.wait_for(lambda: len(discord_server.shown(channel)) >= 2, "the normal exchange's copy")
        [streamed_normal] = [m for m in discord_server.sent if m.channel_id == dm][1:]
        assert discord_server.edits_of(streamed_normal.id)  # the normal answer streamed ...
        # ... and its copy is the final answer, posted once and never edited.
        hello, copy = discord_server.shown(channel)
        assert hello == MIRROR_HELLO.format(source="discord DM") and copy.endswith(f"companion: {normal}")

        call(discord_server.send_dm(FRIEND, f"/private {PASSPHRASE}"))
        said(3)
        assert "private mode" in discord_server.shown(dm)[2].lower()
        model.reply_text(secret)
        call(discord_server.send_dm(FRIEND, "can you keep a secret?"))
        gateway.wait_for(lambda: discord_server.shown(dm)[-1:] == [secret], "the private answer, whole")
        private_message = [m for m in discord_server.sent if m.channel_id == dm][-1]
        assert discord_server.edits_of(private_message.id), "the private answer was not streamed"

        call(discord_server.send_dm(FRIEND, "/forget private"))
        gateway.wait_for(lambda: "deleted now" in discord_server.shown(dm)[-1], "the interval forgotten")
        model.reply_text("Noted.")
        before = len(model.raw_requests)
        call(discord_server.send_dm(FRIEND, "what did we talk about?"))
        gateway.wait_for(lambda: discord_server.shown(dm)[-1] == "Noted.", "the next normal answer")
        gateway.wait_for(lambda: len(discord_server.shown(channel)) >= 3, "its copy")
        code, stderr = gateway.end()
    assert code == 0, stderr
    # The wall: the stream showed the canary in its own DM only.
    assert any(CANARY in e.content for e in discord_server.edits if e.channel_id == dm)
    mirrored = [m.content for m in discord_server.sent if m.channel_id == channel]
    mirrored += [e.content for e in discord_server.edits if e.channel_id == channel]
    assert len(mirrored) == 3 and all(CANARY not in text and "quiet" not in text for text in mirrored)
    assert [e for e in discord_server.edits if e.channel_id == channel] == []  # copies are never streamed
    assert all(CANARY.encode() not in raw for raw in model.raw_requests[before:])
    assert CANARY.encode() not in db_bytes(tmp_path)
    assert CANARY not in stderr
