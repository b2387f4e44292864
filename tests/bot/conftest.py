"""Fake servers in threads, for the tests that run the real `companion` in a subprocess."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer


@pytest.fixture
def telegram_servers() -> Iterator[tuple[FakeTelegramServer, FakeOpenAIServer]]:
    with FakeTelegramServer.run_in_thread() as telegram, FakeOpenAIServer.run_in_thread() as model:
        yield telegram, model


@pytest.fixture
def discord_servers() -> Iterator[tuple[FakeDiscordServer, FakeOpenAIServer]]:
    with FakeDiscordServer.run_in_thread() as discord_server, FakeOpenAIServer.run_in_thread() as model:
        yield discord_server, model
