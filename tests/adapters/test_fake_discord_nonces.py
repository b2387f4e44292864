"""The fake Discord honours `nonce` + `enforce_nonce` as Discord documents it (Create Message), no
more forgiving: a repeat by the same author within a few minutes returns the first message; later,
or without `enforce_nonce`, it is a second message; a nonce is at most 25 characters. The restart
tests lean on this to say a resend after a kill is not doubled."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.helpers.fake_discord import MAX_NONCE_CHARS, NONCE_WINDOW_SECONDS, FakeDiscordServer


class MovableClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def discord_server() -> AsyncIterator[FakeDiscordServer]:
    async with FakeDiscordServer() as server:
        server.clock = MovableClock()
        yield server


async def post(server: FakeDiscordServer, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    url = f"{server.api_base}/channels/{server.guild_channel_id}/messages"
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bot {server.token}"}) as session,
        session.post(url, json=body) as response,
    ):
        return response.status, await response.json()


async def test_a_nonce_repeated_within_the_window_returns_the_first_message(discord_server) -> None:
    body = {"content": "once", "nonce": "row17000", "enforce_nonce": True}
    _, first = await post(discord_server, body)
    discord_server.clock.now += NONCE_WINDOW_SECONDS
    status, again = await post(discord_server, body)
    assert status == 200 and again["id"] == first["id"]
    assert [m.content for m in discord_server.sent] == ["once"]


async def test_a_nonce_repeated_after_the_window_is_a_second_message(discord_server) -> None:
    body = {"content": "twice", "nonce": "row17000", "enforce_nonce": True}
    _, first = await post(discord_server, body)
    discord_server.clock.now += NONCE_WINDOW_SECONDS + 1
    _, again = await post(discord_server, body)
    assert again["id"] != first["id"]
    assert [m.content for m in discord_server.sent] == ["twice", "twice"]


async def test_a_nonce_without_enforce_nonce_does_not_prevent_a_second_message(discord_server) -> None:
    body = {"content": "twice", "nonce": "row17000"}
    await post(discord_server, body)
    await post(discord_server, body)
    assert len(discord_server.sent) == 2


async def test_a_nonce_longer_than_25_characters_is_refused(discord_server) -> None:
    status, error = await post(discord_server, {"content": "x", "nonce": "n" * (MAX_NONCE_CHARS + 1)})
    assert (status, error["code"]) == (400, 50035)
    assert discord_server.sent == []
