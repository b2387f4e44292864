"""One stop for every platform (issue 21): `companion run` with Telegram and Discord in one process,
stopped by SIGTERM while turns and copies are on their way out, then started again. What the stop
could finish is sent before the exit, once; nothing is sent again after the restart."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.platforms import USER
from tests.helpers.platforms.discord import DiscordWire
from tests.helpers.platforms.telegram import TelegramWire
from tests.helpers.proc import companion_env
from tests.helpers.running import Running
from tests.helpers.wire_platforms import rows, shipped

pytestmark = pytest.mark.wire

MODEL_SECONDS = 4.0


@pytest.fixture
def servers() -> Iterator[tuple[TelegramWire, DiscordWire, FakeOpenAIServer]]:
    with (
        FakeTelegramServer.run_in_thread() as telegram,
        FakeDiscordServer.run_in_thread() as discord_server,
        FakeOpenAIServer.run_in_thread() as model,
    ):
        model.responder = answer
        yield TelegramWire(telegram), DiscordWire(discord_server), model


def answer(body: dict) -> str:
    said = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    return f"answer to {said}"


def both_env(tmp_path: Path, telegram: TelegramWire, discord: DiscordWire, model: FakeOpenAIServer, **extra: str):
    settings = {
        **telegram.settings(),
        **discord.settings(),
        "COMPANION_LLM_BASE_URL": model.base_url,
        "COMPANION_ALLOWED_USERS": f"telegram:{USER},discord:{USER}",
        "COMPANION_LOG_LEVEL": "INFO",
        # companion_env shortens the burst window for other wire tests; stops are tested as shipped.
        "COMPANION_BURST_SECONDS": shipped("burst_seconds"),
        "COMPANION_HTTP_PORT": "0",  # any free port: the fixed default would collide with another gateway here
    }
    return companion_env(tmp_path, **{**settings, **extra})


@pytest.mark.parametrize(
    "burst_seconds",
    [
        pytest.param(shipped("burst_seconds"), id="bursts-as-shipped"),
        # Bursts off is a path of its own: the adapter waits for the turn and hands its reply over,
        # where with bursts on the conversation's lane does (the report had Discord lose it there).
        pytest.param("0", id="bursts-off"),
    ],
)
def test_a_sigterm_while_the_model_answers_a_telegram_and_a_discord_dm_sends_both_replies_once_before_the_exit(
    tmp_path: Path, servers: tuple[TelegramWire, DiscordWire, FakeOpenAIServer], burst_seconds: str
) -> None:
    telegram, discord, model = servers
    env = both_env(tmp_path, telegram, discord, model, COMPANION_BURST_SECONDS=burst_seconds)
    db = tmp_path / "companion.db"
    with Running(env) as gateway:
        gateway.wait_running()
        model.reply_delay(MODEL_SECONDS)
        model.reply_delay(MODEL_SECONDS)
        telegram.say("dm", "hello on telegram")
        discord.say("dm", "hello on discord")
        gateway.wait_for(lambda: len(model.requests) == 2, "both turns at the model")
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr
    # Both turns finished within the stop grace, after intake stopped; both replies were sent.
    assert telegram.replies("dm") == ["answer to hello on telegram"]
    assert discord.replies("dm") == ["answer to hello on discord"]
    assert rows(db, "SELECT platform, kind, status FROM deliveries ORDER BY platform") == [
        ("discord", "reply", "sent"),
        ("telegram", "reply", "sent"),
    ]
    assert rows(db, "SELECT count(*) FROM messages WHERE turn = 'open'") == [(0,)]

    asked = len(model.requests)
    with Running(env) as gateway:
        gateway.wait_running()
        code, stderr = gateway.end(signal.SIGTERM)  # its start-up pass and its stop's flush: nothing left
    assert code == 0, stderr
    assert telegram.replies("dm") == ["answer to hello on telegram"]
    assert discord.replies("dm") == ["answer to hello on discord"]
    assert len(model.requests) == asked


def test_a_mirror_copy_being_sent_at_a_stop_is_sent_exactly_once(
    tmp_path: Path, servers: tuple[TelegramWire, DiscordWire, FakeOpenAIServer]
) -> None:
    telegram, discord, model = servers
    discord_server = discord.server
    channel = discord_server.guild_channel_id
    env = both_env(tmp_path, telegram, discord, model)
    db = tmp_path / "companion.db"

    def copies() -> list[str]:
        return [m.content for m in discord_server.sent if m.channel_id == channel]

    def posts() -> int:
        return sum(posted == channel for posted, _ in discord_server.message_posts)

    with Running(env) as gateway:
        gateway.wait_running()
        telegram.say("dm", f"/mirror discord:{channel}")
        gateway.wait_for(lambda: len(copies()) == 1, "the binding's test post")
        # Discord takes the copy and holds its answer: a send between the platform and our mark.
        discord_server.hold_answers = True
        telegram.say("dm", "hello")
        gateway.wait_for(lambda: discord_server.holding == 1, "the copy taken, its answer held")
        gateway.proc.send_signal(signal.SIGTERM)
        gateway.wait_logged("stopping")
        discord_server.hold_answers = False  # the answer arrives while the stop flushes
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr
    assert copies()[1:] == ["[telegram DM] you: hello\ncompanion: answer to hello"]
    assert rows(db, "SELECT kind, status FROM deliveries WHERE kind = 'mirror'") == [("mirror", "sent")]
    assert posts() == 2

    with Running(env) as gateway:
        gateway.wait_running()
        code, stderr = gateway.end(signal.SIGTERM)  # its start-up pass and its stop's flush: nothing left
    assert code == 0, stderr
    assert posts() == 2  # not sent again, not even as a repeat Discord's nonce would have absorbed
    assert len(copies()) == 2
