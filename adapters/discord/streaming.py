"""Replies shown on Discord while the model writes them (core.ports.BaseStreamer).

The outbox's lane of the reply's channel (core/delivery/streams.py) calls `post` for each message
of the reply and `edit` for each change of one, paced by COMPANION_STREAM_EDIT_SECONDS. A post is
a channel message like the reply's final send would make: the same nonce for the same part (so
the final send, finding a message the stream posted but never recorded, gets that message back
from Discord instead of a second one), and in a guild channel the first part replies to the
message it answers. An edit is `PATCH /channels/{id}/messages/{id}`; Discord has no "not
modified" error (an edit to the same text is a 200).

Nothing here may hold the lane long: the reply's final edit waits behind it. discord.py sleeps
through a 429 itself and sends the request again; for these requests the platform's HTTP client
ends it at once instead (adapters/discord/client.py `raising_429`) and it becomes
`DeliveryThrottled(retry_after)`: the lane waits that long (or until the answer is written) with
the newest text, and edits more slowly from then on. Every request is also bounded in time
(`timeout`); one that takes longer stops the showing, and the final send copes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import aiohttp
import discord

from adapters.discord.client import MESSAGE_LIMIT, NO_MENTIONS, PLATFORM, CompanionClient, Throttled, raising_429
from adapters.rendering.pieces import stream_pieces
from core.values.errors import DeliveryFailed, DeliveryThrottled
from core.values.model import DeliveryTarget, StreamedReply

log = logging.getLogger(__name__)

T = TypeVar("T")

# A post or an edit of a streamed reply taking longer than this stops the showing (seconds). Above
# the few seconds discord.py may wait before returning from a request that emptied its bucket
# (Discord's `X-RateLimit-Reset-After`), so that wait only slows the showing down.
STREAM_REQUEST_SECONDS = 10.0


def part_nonce(nonce: str, index: int) -> str:
    """The nonce of part `index` of a delivery (at most 25 characters: a row's nonce is 16)."""
    return f"{nonce}{index:03d}"


def reference_of(target: DeliveryTarget) -> discord.MessageReference | None:
    """What the first part of a reply replies to: the message it answers, in a guild channel."""
    if not target.reply_to:
        return None
    return discord.MessageReference(
        message_id=int(target.reply_to), channel_id=int(target.chat_id), fail_if_not_exists=False
    )


class DiscordStreamer:
    """The streaming half of the Discord platform (core.ports.BaseStreamer; the core ends the chat's
    typing indicator before a reply's first post).

    Args:
        client: the connection's client, or None while it is not open.
        timeout: seconds one post or edit may take before the showing stops.
    """

    name = PLATFORM

    def __init__(
        self, client: Callable[[], CompanionClient | None], *, timeout: float = STREAM_REQUEST_SECONDS
    ) -> None:
        self._client = client
        self._timeout = timeout

    def pieces(self, text: str, *, final: bool = False) -> list[str]:
        return stream_pieces(text, MESSAGE_LIMIT, final=final)

    async def post(self, reply: StreamedReply, text: str, index: int) -> str:
        channel = self._channel(reply.target.chat_id)
        # discord.py's overloads of send() omit the None that its implementation accepts.
        message = await self._request(
            reply,
            "post",
            channel.send(
                text,
                reference=reference_of(reply.target) if index == 0 else None,  # type: ignore[arg-type]
                allowed_mentions=NO_MENTIONS,
                nonce=part_nonce(reply.nonce, index),
            ),
        )
        return str(message.id)

    async def edit(self, reply: StreamedReply, message_id: str, text: str) -> None:
        message = self._channel(reply.target.chat_id).get_partial_message(int(message_id))
        await self._request(reply, "edit", message.edit(content=text, allowed_mentions=NO_MENTIONS))

    def _channel(self, chat_id: str) -> discord.PartialMessageable:
        client = self._client()
        if client is None:
            raise DeliveryFailed("not started", permanent=False, parts_sent=0)
        return client.get_partial_messageable(int(chat_id))

    async def _request(self, reply: StreamedReply, what: str, call: Awaitable[T]) -> T:
        """One request of a streamed reply, its failures as the outbox's."""
        try:
            with raising_429():
                async with asyncio.timeout(self._timeout):
                    return await call
        except (Throttled, discord.RateLimited) as exc:
            raise DeliveryThrottled(exc.retry_after) from exc
        except TimeoutError as exc:
            log.info("discord: a %s of delivery %s took over %.0f s", what, reply.delivery_id, self._timeout)
            raise DeliveryFailed("timeout", permanent=False, parts_sent=0) from exc
        except discord.HTTPException as exc:
            log.info(
                "discord: a %s of delivery %s refused (%s, code %s)", what, reply.delivery_id, exc.status, exc.code
            )
            raise DeliveryFailed(f"http {exc.status}", permanent=exc.status < 500, parts_sent=0) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise DeliveryFailed(type(exc).__name__, permanent=False, parts_sent=0) from exc
