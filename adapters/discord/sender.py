"""The sending half of the Discord platform (core.ports.ChatSender): outbox rows, answers without a row,
the deletion of a message that carried a secret, and the typing indicator.

Every channel message carries a nonce with `enforce_nonce`: Discord then returns the message sent
before instead of a second one, so a part sent again (after a failure of ours, or a crash between
the send and the row's mark) is not doubled. A row's part has a nonce derived from the row; a
transient failure is tried again inside one outbox attempt (`EdgeSettings.retry`), then the outbox's
backoff owns it. A slash command's or a button's answer goes to its interaction as followups
(adapters/discord/routes.py): those have no nonce, so they are never sent again by us, and one that
only the person may see never falls back to a channel message.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import aiohttp
import discord

from adapters.discord.buttons import confirm_view
from adapters.discord.client import MESSAGE_LIMIT, NO_MENTIONS, PLATFORM, CompanionClient
from adapters.discord.connection import DiscordConnection
from adapters.discord.routes import InteractionRoute, InteractionRoutes, confined
from adapters.discord.streaming import part_nonce, reference_of
from adapters.rendering.pieces import stream_pieces
from adapters.rendering.text import split_message
from core.values.edge import EdgeSettings
from core.values.errors import DeliveryFailed
from core.values.model import Attachment, Confirmation, DeliveryTarget, OutboundDelivery
from core.values.retry import Attempt, retrying

log = logging.getLogger(__name__)

T = TypeVar("T")

# Failures worth sending again with the same nonce. discord.py already retries 429s
# (after `retry_after`) and 500/502/504/524 (up to five tries); what reaches us here is
# a dropped connection, a timeout, or a server error that outlasted those tries.
_TRANSIENT = (discord.DiscordServerError, discord.RateLimited, aiohttp.ClientError, OSError, asyncio.TimeoutError)
# What a followup, a typing request or a delete may fail with.
_FAILED = (discord.HTTPException, aiohttp.ClientError, OSError, asyncio.TimeoutError)
# Discord's JSON error code for a message that does not exist (deleted).
UNKNOWN_MESSAGE = 10008
# Discord's typing indicator lasts about ten seconds: renewed a little before it ends.
TYPING_EVERY = 8.0


def _is_transient(exc: Exception) -> bool:
    return isinstance(exc, _TRANSIENT)


def _retry_after(exc: Exception) -> float | None:
    # A 429 discord.py would not sleep through itself (over its limit) names its wait.
    return exc.retry_after if isinstance(exc, discord.RateLimited) else None


class DiscordSender:
    """Sends on the connection's client: rows, answers, deletes and typing.

    Args:
        connection: the intake's connection (its client sends; its DM channels cannot be deleted in).
        routes: the interactions answers may go to.
        edge: `retry` gives the tries of one send (transient failures only).
        typing_every: seconds between two typing requests.
    """

    name = PLATFORM

    def __init__(
        self,
        connection: DiscordConnection,
        routes: InteractionRoutes,
        edge: EdgeSettings,
        *,
        typing_every: float | None = TYPING_EVERY,
    ) -> None:
        self._connection = connection
        self._routes = routes
        self._policy = edge.retry(_is_transient, _retry_after)
        self.typing_every = typing_every

    # --- the outbox's rows ----------------------------------------------------------------

    async def send_delivery(self, delivery: OutboundDelivery) -> int:
        """core.ports.BaseSender: send an outbox row from part `parts_sent` on. Each part carries a
        nonce derived from the row, so a part sent again after a crash between send and mark
        is not doubled (Discord keeps nonces for a few minutes)."""
        client = self._client(delivery.parts_sent)
        target = delivery.target
        if target.route is not None:  # a slash command's or a button's answer
            answered = await self._send_routed(delivery, target.route)
            if answered is not None:
                return answered
        view = confirm_view(delivery.confirm)
        channel = _channel(client, target.chat_id)
        if delivery.streamed:
            return await self._finish_stream(channel, delivery, view)
        chunks = split_message(delivery.text, MESSAGE_LIMIT)
        for index in range(delivery.parts_sent, len(chunks)):
            try:
                await self._post_part(
                    channel,
                    chunks[index],
                    reference=reference_of(target) if index == 0 else None,
                    nonce=part_nonce(delivery.nonce, index),
                    view=view if index == len(chunks) - 1 else None,
                )
            except DeliveryFailed as exc:
                raise DeliveryFailed(exc.kind, permanent=exc.permanent, parts_sent=index) from exc
        return len(chunks)

    async def _send_routed(self, delivery: OutboundDelivery, name: str) -> int | None:
        """Send a row that answers an interaction as its followups; None when the interaction is not
        known any more and the answer may go to the channel instead.

        Raises:
            DeliveryFailed: the followup failed. Permanent for an ephemeral answer outside a DM
                (it must not fall back to a message everyone in the channel sees); otherwise
                transient, and the outbox sends it again as a channel message.
        """
        route = self._route(name, delivery.parts_sent)
        if route is None:
            return None
        view = confirm_view(delivery.confirm)
        chunks = split_message(delivery.text, MESSAGE_LIMIT)
        for index in range(delivery.parts_sent, len(chunks)):
            last = index == len(chunks) - 1
            try:
                await self._routes.followup(route, chunks[index], view=view if last else None)
            except _FAILED as exc:
                log.warning("discord: followup of delivery %s failed (%s)", delivery.id, type(exc).__name__)
                permanent = route.ephemeral and not route.direct
                raise DeliveryFailed(type(exc).__name__, permanent=permanent, parts_sent=index) from exc
        return len(chunks)

    def _route(self, name: str, parts_sent: int) -> InteractionRoute | None:
        route = self._routes.get(name)
        if route is None and confined(name):
            # Only the person may see it, and its interaction is gone: not sent at all.
            log.warning("discord: an ephemeral answer's interaction is not known any more; it is not sent")
            raise DeliveryFailed("interaction unknown", permanent=True, parts_sent=parts_sent)
        return route

    async def _finish_stream(
        self, channel: discord.abc.Messageable, delivery: OutboundDelivery, view: discord.ui.View | None
    ) -> int:
        """The final send of a reply shown while written: the messages shown are edited into its final
        text, cut where the stream cut it (piece i into message i), pieces past them are new messages,
        and messages shown past its last piece are deleted. Each step may be done again (a crash
        before the row was marked): an edit into the same text, a post whose nonce returns the
        message sent before, a delete of a message gone."""
        pieces = stream_pieces(delivery.text, MESSAGE_LIMIT, final=True)  # as DiscordStreamer.pieces
        shown = delivery.streamed
        for index in range(delivery.parts_sent, len(pieces)):
            view_here = view if index == len(pieces) - 1 else None
            try:
                if index < len(shown):
                    if await self._edit_part(channel, shown[index], pieces[index], view=view_here):
                        continue
                    # Deleted meanwhile (by a moderator): the piece goes out again, as a new message.
                    nonce = f"{delivery.nonce}r{index:03d}"
                else:
                    nonce = part_nonce(delivery.nonce, index)
                await self._post_part(
                    channel,
                    pieces[index],
                    reference=reference_of(delivery.target) if index == 0 else None,
                    nonce=nonce,
                    view=view_here,
                )
            except DeliveryFailed as exc:
                raise DeliveryFailed(exc.kind, permanent=exc.permanent, parts_sent=index) from exc
        for message_id in shown[len(pieces) :]:
            try:
                await self._delete_part(channel, message_id)
            except DeliveryFailed as exc:
                if not exc.permanent:
                    raise DeliveryFailed(exc.kind, permanent=False, parts_sent=len(pieces)) from exc
                # The words went out; a message of the partial text stays (logged, not retried for ever).
        log.info("discord: delivery %s finished as %d messages over %d shown", delivery.id, len(pieces), len(shown))
        return len(pieces)

    async def send_text(self, chat_id: str, text: str) -> str:
        """core.ports.BaseSender: post `text` to a channel now, without an outbox row (a binding's
        test post). Returns the first message's id.

        Raises:
            DeliveryFailed: permanent when the id is no channel id or Discord refused (4xx:
                unknown channel, missing access), else transient.
        """
        client = self._client(0)
        if not chat_id.isdigit():
            raise DeliveryFailed("not a channel id", permanent=True, parts_sent=0)
        channel = client.get_partial_messageable(int(chat_id))
        first = ""
        for index, chunk in enumerate(split_message(text, MESSAGE_LIMIT)):
            try:
                message = await self._send_part(
                    channel, chunk, reference=None, attachments=(), nonce=str(secrets.randbits(63))
                )
            except DeliveryFailed as exc:
                raise DeliveryFailed(exc.kind, permanent=exc.permanent, parts_sent=index) from exc
            first = first or str(message.id)
        return first

    # --- the hand-off's answers -----------------------------------------------------------------

    async def send_answer(
        self,
        target: DeliveryTarget,
        text: str,
        *,
        confirm: Confirmation | None = None,
        files: Sequence[Attachment] = (),
    ) -> None:
        """core.ports.ChatSender: an answer without a row, split to Discord's limit, the button and
        the files with its last part; to its interaction when it answers one (never to the channel
        instead). A part that fails stops the rest: a gap in the middle would read wrong.

        Raises:
            DeliveryFailed: a part was not sent (`parts_sent` went out).
        """
        client = self._client(0)
        chunks: list[str | None] = list(split_message(text, MESSAGE_LIMIT))
        if not chunks and not files:
            return
        chunks = chunks or [None]
        view = confirm_view(confirm)
        route = self._route(target.route, 0) if target.route is not None else None
        channel = _channel(client, target.chat_id)
        for index, chunk in enumerate(chunks):
            last = index == len(chunks) - 1
            try:
                if route is not None:
                    try:
                        await self._routes.followup(
                            route, chunk, view=view if last else None, files=files if last else ()
                        )
                    except _FAILED as exc:
                        raise DeliveryFailed(type(exc).__name__, permanent=True, parts_sent=index) from exc
                else:
                    await self._send_part(
                        channel,
                        chunk,
                        reference=reference_of(target) if index == 0 else None,
                        attachments=files if last else (),
                        nonce=str(secrets.randbits(63)),
                        view=view if last else None,
                    )
            except DeliveryFailed as exc:
                log.error(
                    "discord: an answer in channel %s stopped after %d of %d parts", target.chat_id, index, len(chunks)
                )
                raise DeliveryFailed(exc.kind, permanent=exc.permanent, parts_sent=index) from exc
        log.info("discord: answered in channel %s with %d parts (%d chars)", target.chat_id, len(chunks), len(text))

    async def delete(self, target: DeliveryTarget, message_id: str | None) -> bool:
        """core.ports.ChatSender: delete the person's message that carried a secret. False where the
        bot cannot: in a DM (Discord lets no bot delete the other person's messages there), or when
        Discord refused."""
        if target.route is not None:
            return True  # a slash command's options are no message in the channel: nothing to delete
        client = self._connection.client
        if client is None or message_id is None or int(target.chat_id) in self._connection.dm_channels:
            return False
        message = client.get_partial_messageable(int(target.chat_id)).get_partial_message(int(message_id))
        try:
            await message.delete()
        except discord.NotFound:
            return True  # already gone
        except (*_FAILED, *_TRANSIENT) as exc:
            log.warning(
                "discord: could not delete message %s that carried a secret (%s)", message_id, type(exc).__name__
            )
            return False
        log.info("discord: deleted message %s that carried a secret", message_id)
        return True

    async def show_typing(self, target: DeliveryTarget) -> None:
        """core.ports.ChatSender: one typing request (it shows for about ten seconds); never raises."""
        client = self._connection.client
        if client is None:
            return
        try:
            await _channel(client, target.chat_id).typing()
        except (*_FAILED, *_TRANSIENT) as exc:
            log.debug("discord: typing in channel %s failed (%s)", target.chat_id, type(exc).__name__)

    # --- one message, again after transient failures --------------------------------------------

    def _client(self, parts_sent: int) -> CompanionClient:
        client = self._connection.client
        if client is None:
            raise DeliveryFailed("not started", permanent=False, parts_sent=parts_sent)
        return client

    async def _send_part(
        self,
        channel: discord.abc.Messageable,
        content: str | None,
        *,
        reference: discord.MessageReference | None,
        attachments: Sequence[Attachment],
        nonce: str,
        view: discord.ui.View | None = None,
    ) -> discord.Message:
        """Send one message, again after transient failures; the nonce makes a repeat a no-op at Discord.

        Raises:
            DeliveryFailed: permanent when Discord refused it (4xx), else transient.
        """

        async def send(_attempt: Attempt) -> discord.Message:
            # discord.File is closed after a send, so every attempt gets fresh ones.
            files = [discord.File(io.BytesIO(a.data), filename=a.filename) for a in attachments] or None
            # discord.py's overloads of send() omit the None that its implementation accepts.
            return await channel.send(
                content,
                reference=reference,  # type: ignore[arg-type]  # None: not a reply (see above)
                allowed_mentions=NO_MENTIONS,
                nonce=nonce,
                files=files,  # type: ignore[arg-type]  # None: no files (see above)
                view=view,  # type: ignore[arg-type]  # None: no buttons (see above)
            )

        return await self._attempt(channel, "sending to", "refused a message", send)

    async def _post_part(
        self,
        channel: discord.abc.Messageable,
        content: str,
        *,
        reference: discord.MessageReference | None,
        nonce: str,
        view: discord.ui.View | None,
    ) -> None:
        """`_send_part` of a delivery's part. Its nonce may return a message sent before with other
        words: one its reply posted while written that no row recorded (the process stopped, or
        the answer was lost, between Discord taking it and the row): edited into this part."""
        message = await self._send_part(channel, content, reference=reference, attachments=(), nonce=nonce, view=view)
        if message.content != content:
            log.info("discord: message %s sent before with this part's nonce is edited into it", message.id)
            if not await self._edit_part(channel, str(message.id), content, view=view):
                raise DeliveryFailed("message gone", permanent=False, parts_sent=0)

    async def _edit_part(
        self, channel: discord.abc.Messageable, message_id: str, content: str, *, view: discord.ui.View | None
    ) -> bool:
        """Edit one of the bot's messages into `content`, again after transient failures (an edit
        into the same text changes nothing). Returns False when the message is gone (404).

        Raises:
            DeliveryFailed: permanent when Discord refused it (4xx), else transient.
        """
        message = _partial_message(channel, message_id)
        # MISSING: the buttons the message has stay as they are (None would remove them).
        buttons = discord.utils.MISSING if view is None else view

        async def edit(_attempt: Attempt) -> None:
            await message.edit(content=content, allowed_mentions=NO_MENTIONS, view=buttons)

        try:
            await self._attempt(channel, "editing a message in", "refused an edit", edit, gone=True)
        except _Gone:
            return False
        return True

    async def _delete_part(self, channel: discord.abc.Messageable, message_id: str) -> None:
        """Delete one of the bot's messages (one gone already is deleted).

        Raises:
            DeliveryFailed: permanent when Discord refused it (4xx), else transient.
        """
        message = _partial_message(channel, message_id)

        async def delete(_attempt: Attempt) -> None:
            await message.delete()

        with contextlib.suppress(_Gone):
            await self._attempt(channel, "deleting a message in", "refused a delete", delete, gone=True)

    async def _attempt(
        self,
        channel: discord.abc.Messageable,
        doing: str,
        refused: str,
        action: Callable[[Attempt], Awaitable[T]],
        *,
        gone: bool = False,
    ) -> T:
        """`action`, again after transient failures (`EdgeSettings.retry`).

        Raises:
            _Gone: `gone` and Discord answered Unknown Message (the message was deleted).
            DeliveryFailed: permanent when Discord refused it (4xx), else transient.
        """
        channel_id = getattr(channel, "id", "?")

        def failed(exc: Exception, number: int) -> None:
            log.warning(
                "discord: %s channel %s failed (%s), attempt %d of %d",
                doing,
                channel_id,
                type(exc).__name__,
                number,
                self._policy.attempts,
            )

        try:
            return await retrying(
                self._policy, action, on_retry=lambda exc, attempt, _delay: failed(exc, attempt.number)
            )
        except _TRANSIENT as exc:  # the last attempt's: an earlier one would have been retried
            failed(exc, self._policy.attempts)
            raise DeliveryFailed(type(exc).__name__, permanent=False, parts_sent=0) from exc
        except discord.HTTPException as exc:
            if gone and exc.status == 404 and exc.code == UNKNOWN_MESSAGE:
                raise _Gone from exc
            log.error("discord: channel %s %s (%s, code %s)", channel_id, refused, exc.status, exc.code)
            raise DeliveryFailed(f"http {exc.status}", permanent=True, parts_sent=0) from exc


class _Gone(Exception):
    """The message to edit or delete is not there any more (Discord's Unknown Message)."""


def _channel(client: CompanionClient, chat_id: str) -> discord.abc.Messageable:
    cached = client.get_channel(int(chat_id))
    # A cached category or forum cannot take a message; the partial one lets Discord say so.
    return cached if isinstance(cached, discord.abc.Messageable) else client.get_partial_messageable(int(chat_id))


def _partial_message(channel: discord.abc.Messageable, message_id: str) -> discord.PartialMessage:
    get = getattr(channel, "get_partial_message", None)
    if get is None:  # every channel a message of ours can be in has it; a partial messageable too
        raise DeliveryFailed("not a message channel", permanent=True, parts_sent=0)
    return get(int(message_id))
