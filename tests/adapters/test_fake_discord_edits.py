"""The fake Discord edits messages as strictly as Discord (Edit Message, `PATCH
/channels/{channel.id}/messages/{message.id}`): Unknown Message for one that is not there, another
author's refused, over 2000 characters refused with Invalid Form Body, an empty message refused,
the same words again a plain 200; a 429 with `retry_after` and Discord's headers when told; every
edit recorded with its moment. The streaming tests lean on this to say what Discord would do."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.helpers.fake_discord import MESSAGE, FakeDiscordServer, RestFault

USER = 111


@pytest.fixture
async def discord_server() -> AsyncIterator[FakeDiscordServer]:
    async with FakeDiscordServer() as server:
        yield server


async def request(
    server: FakeDiscordServer, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, Any, dict[str, str]]:
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bot {server.token}"}) as session,
        session.request(method, f"{server.api_base}{path}", json=body) as response,
    ):
        data = await response.json() if response.content_type == "application/json" else None
        return response.status, data, dict(response.headers)


async def bot_message(server: FakeDiscordServer, content: str = "first words") -> tuple[int, int]:
    channel = server.guild_channel_id
    status, message, _ = await request(server, "POST", f"/channels/{channel}/messages", {"content": content})
    assert status == 200
    return channel, int(message["id"])


async def test_an_edit_replaces_the_words_and_is_recorded_with_its_moment(discord_server) -> None:
    channel, message_id = await bot_message(discord_server)
    status, edited, _ = await request(
        discord_server, "PATCH", f"/channels/{channel}/messages/{message_id}", {"content": "second words"}
    )
    assert status == 200 and edited["content"] == "second words" and edited["edited_timestamp"]
    status, again, _ = await request(
        discord_server, "PATCH", f"/channels/{channel}/messages/{message_id}", {"content": "second words"}
    )
    assert status == 200 and again["content"] == "second words"  # Discord has no "not modified"
    assert [edit.content for edit in discord_server.edits_of(message_id)] == ["second words", "second words"]
    first, second = discord_server.edits
    assert first.at <= second.at and discord_server.sent[0].at <= first.at
    assert discord_server.shown(channel) == ["second words"]


async def test_an_edit_of_a_message_not_there_is_unknown_message(discord_server) -> None:
    channel, message_id = await bot_message(discord_server)
    for path in (f"/channels/{channel}/messages/{message_id + 1}", f"/channels/{channel}/messages/123"):
        status, error, _ = await request(discord_server, "PATCH", path, {"content": "x"})
        assert (status, error["code"]) == (404, 10008)
    dm = discord_server.dm_channel_id(USER)
    status, error, _ = await request(discord_server, "PATCH", f"/channels/{dm}/messages/{message_id}", {"content": "x"})
    assert (status, error["code"]) == (404, 10008)  # a message of another channel
    await request(discord_server, "DELETE", f"/channels/{channel}/messages/{message_id}")
    status, error, _ = await request(
        discord_server, "PATCH", f"/channels/{channel}/messages/{message_id}", {"content": "x"}
    )
    assert (status, error["code"]) == (404, 10008)
    assert discord_server.edits == []


async def test_an_edit_over_2000_characters_or_empty_is_invalid_and_changes_nothing(discord_server) -> None:
    channel, message_id = await bot_message(discord_server)
    path = f"/channels/{channel}/messages/{message_id}"
    status, error, _ = await request(discord_server, "PATCH", path, {"content": "x" * 2001})
    assert (status, error["code"]) == (400, 50035)
    assert error["errors"]["content"]["_errors"][0]["code"] == "BASE_TYPE_MAX_LENGTH"
    status, error, _ = await request(discord_server, "PATCH", path, {"content": ""})
    assert (status, error["code"]) == (400, 50006)
    status, _, _ = await request(discord_server, "PATCH", path, {"content": "x" * 2000})
    assert status == 200
    assert [edit.content for edit in discord_server.edits] == ["x" * 2000]


async def test_another_authors_message_cannot_be_edited(discord_server) -> None:
    message_id = discord_server.post_dm_while_offline(USER, "mine")
    status, error, _ = await request(
        discord_server,
        "PATCH",
        f"/channels/{discord_server.dm_channel_id(USER)}/messages/{message_id}",
        {"content": "not yours"},
    )
    assert (status, error["code"]) == (403, 50005)


async def test_a_429_on_an_edit_carries_retry_after_in_its_body_and_headers_when_told(discord_server) -> None:
    channel, message_id = await bot_message(discord_server)
    discord_server.fail_next("PATCH", MESSAGE, RestFault(status=429, retry_after=2.5))
    path = f"/channels/{channel}/messages/{message_id}"
    status, body, headers = await request(discord_server, "PATCH", path, {"content": "later"})
    assert status == 429 and body["retry_after"] == 2.5 and body["global"] is False
    assert headers["Retry-After"] == "2" or headers["Retry-After"] == "3"
    assert float(headers["X-RateLimit-Reset-After"]) == 2.5 and headers["X-RateLimit-Remaining"] == "0"
    assert headers["Via"]  # discord.py reads a 429 without it as a Cloudflare ban
    assert [(m, r, s) for m, r, s, _ in discord_server.faults_served] == [("PATCH", MESSAGE, 429)]
    status, _, _ = await request(discord_server, "PATCH", path, {"content": "later"})
    assert status == 200  # told once
    assert [edit.content for edit in discord_server.edits] == ["later"]
