"""DiscordAdapter: DMs and mentions on Discord through discord.py, turned into core messages at the edge."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import io
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import aiohttp

# The library, not this package: imports are absolute (see adapters/discord/client.py).
import discord
import yarl
from discord.gateway import DiscordWebSocket
from discord.http import Route

from adapters.discord.catchup import CATCH_UP_LIMIT, DmCursors, catch_up
from adapters.discord.client import MESSAGE_LIMIT, NO_MENTIONS, PLATFORM, CompanionClient
from adapters.discord.context import forwarded_text, reply_context
from adapters.discord.interactions import DiscordInteractions, confirm_view
from adapters.discord.media import media_of
from adapters.discord.streaming import DiscordStreamer, part_nonce, reference_of
from adapters.rendering.text import split_message
from core.commands.registry import carries_secret
from core.turn.link import CoreLink
from core.values.copy import DELETE_SECRET_NOTE, HANDLER_FAILED
from core.values.errors import CompanionError, DeliveryFailed
from core.values.locks import KeyedLocks
from core.values.model import Attachment, InboundMessage, OutboundDelivery, Reply
from core.values.retry import Attempt, RetryPolicy, retrying

log = logging.getLogger(__name__)

T = TypeVar("T")

# Failures worth sending again with the same nonce. discord.py already retries 429s
# (after `retry_after`) and 500/502/504/524 (up to five tries); what reaches us here is
# a dropped connection, a timeout, or a server error that outlasted those tries.
_TRANSIENT = (discord.DiscordServerError, discord.RateLimited, aiohttp.ClientError, OSError, asyncio.TimeoutError)
# Discord's JSON error code for a message that does not exist (deleted).
UNKNOWN_MESSAGE = 10008


def _is_transient(exc: Exception) -> bool:
    return isinstance(exc, _TRANSIENT)


class DiscordStartError(CompanionError):
    """Discord could not be used at start-up; the message is one line saying what to fix."""


class DiscordAdapter:
    """The companion on Discord: answers DMs, and mentions or replies in guild channels.

    `start()` logs in, connects to the gateway and returns once READY arrived (or
    raises DiscordStartError); the gateway connection then runs in a background task
    with discord.py's own reconnect loop. `aclose()` stops taking messages, lets the
    turns in flight finish sending (up to `stop_grace` seconds) and disconnects.

    Args:
        token: the bot token (COMPANION_DISCORD_TOKEN).
        link: the core: the turn handler (it receives InboundMessage, never a discord.py
            object), the commands (typed as text, and registered at start as slash commands:
            adapters/discord/interactions.py), the allow check for the DMs caught up after a
            restart, the outbox, and the state store that keeps the DM cursors.
        api_base: REST base including the version (default https://discord.com/api/v10).
        gateway_url: websocket URL of the gateway. Unset: asked from `{api_base}/gateway/bot`
            when api_base is set, else Discord's.
        on_fatal: called with one line when Discord refuses the token or the intents while
            running (close code 4004 or 4014): starting again cannot help until they are fixed.
        stop_grace: seconds the turns still running at `aclose()` may take; a turn cut off
            stays an open turn in the store, and the next start answers it.
        outage_limit: seconds the gateway may stay down while discord.py reconnects before the
            connection counts as lost for good (`wait_lost`); None: it reconnects for ever.
        ready_timeout, guild_ready_timeout: how long READY, and the guilds after it, may take.
        retry_delays: pauses before sending a message again after a transient failure.
        typing_interval: how often the typing indicator is renewed.
        catch_up_limit: at most this many DMs per channel are caught up at a start.
    """

    name = PLATFORM

    def __init__(
        self,
        token: str,
        link: CoreLink,
        *,
        api_base: str | None = None,
        gateway_url: str | None = None,
        on_fatal: Callable[[str], None] | None = None,
        stop_grace: float = 10.0,
        outage_limit: float | None = None,
        ready_timeout: float = 60.0,
        guild_ready_timeout: float = 2.0,
        retry_delays: Sequence[float] = (1.0, 4.0, 15.0),
        typing_interval: float = 8.0,
        catch_up_limit: int = CATCH_UP_LIMIT,
    ) -> None:
        self._token = token
        self._handler = link.handle
        self._api_base = api_base.rstrip("/") if api_base else None
        self._gateway_url = gateway_url
        self._ready_timeout = ready_timeout
        self._guild_ready_timeout = guild_ready_timeout
        self._send_policy = RetryPolicy.fixed(retry_delays, retryable=_is_transient)
        self._typing_interval = typing_interval
        self._stop_grace = stop_grace
        self._outbox = link.outbox
        self._client: CompanionClient | None = None
        self._connection: asyncio.Task | None = None
        self._turns: set[asyncio.Task] = set()
        self._channel_locks: KeyedLocks[int] = KeyedLocks()
        self._closing = False
        self._on_fatal = on_fatal
        self._outage_limit = outage_limit
        self._outage: asyncio.TimerHandle | None = None
        self._lost: asyncio.Future[str] | None = None
        self._down = False  # between a disconnect and the next READY or RESUMED
        # DMs sent while the gateway was down (adapters/discord/catchup.py): live DMs wait for them.
        self._cursors = DmCursors(link.state)
        self._is_allowed = link.is_allowed
        self._catch_up_limit = catch_up_limit
        self._caught_up = asyncio.Event()
        # The typing indicator renewed in each channel while its turn runs (ended by a streamed reply's first post).
        self._typing: dict[int, asyncio.Task[None]] = {}
        # Replies shown while the model writes them (adapters/discord/streaming.py).
        self._streamer = DiscordStreamer(lambda: self._client, first_post=self._stop_typing)
        # Slash commands and confirmation buttons (adapters/discord/interactions.py).
        self._interactions = DiscordInteractions(
            handler=link.handle,
            outbox=link.outbox,
            locks=self._channel_locks,
            turns=self._turns,
            commands=link.commands,
            api_base=self._api_base,
            closing=lambda: self._closing,
        )

    @property
    def bot_user_id(self) -> int | None:
        user = self._client.user if self._client is not None else None
        return user.id if user is not None else None

    # --- lifecycle --------------------------------------------------------

    async def start(self) -> None:
        """Log in and connect; return once the gateway is READY. Raises DiscordStartError."""
        if self._client is not None:
            return
        self._closing = False
        self._lost = asyncio.get_running_loop().create_future()
        self._caught_up = asyncio.Event()
        self._client = CompanionClient(
            api_base=self._api_base,
            gateway_url=self._gateway_url,
            guild_ready_timeout=self._guild_ready_timeout,
            on_message=self._on_message,
            on_down=self._disconnected,
            on_up=self._reconnected,
        )
        self._interactions.install(self._client)
        try:
            await self._log_in(self._client)
            await self._interactions.sync()
            await self._connect(self._client)
        except BaseException:
            await self.aclose()
            raise
        if self._outbox is not None:
            self._outbox.register(self)
            self._outbox.register_streamer(self._streamer)
        log.info("discord: connected as bot %s", self.bot_user_id)
        catching_up = asyncio.create_task(self._catch_up(), name="discord-dm-catch-up")
        self._turns.add(catching_up)  # a stop lets it finish its turn like any other
        catching_up.add_done_callback(self._turns.discard)

    async def _catch_up(self) -> None:
        """DMs sent to the bot while the gateway was down, from each known DM channel's history."""
        try:
            client = self._client
            if client is not None and client.user is not None:
                await self._cursors.load(client.user.id)
                await catch_up(
                    client,
                    self._cursors,
                    to_inbound=self._with_context,
                    is_allowed=self._is_allowed or (lambda _inbound: True),
                    serve=functools.partial(self._serve, catching_up=True),
                    limit=self._catch_up_limit,
                )
        except Exception as exc:  # noqa: BLE001 - live messages go on without the catch-up
            log.warning("discord: catching up DMs sent while down failed (%s)", type(exc).__name__)
        finally:
            self._caught_up.set()

    async def stop_intake(self) -> None:
        """The first step of a stop: no message or interaction is taken any more; the turns
        running (and the DM catch-up) go on until the core's stop has finished them."""
        self._closing = True

    async def aclose(self) -> None:
        """Stop intake, let the turns in flight end (bounded), then disconnect; safe to call twice.
        The client stays connected until here, so what the turns wrote is sent first."""
        self._closing = True
        self._reconnected()  # no outage to time any more
        if self._client is None:
            return
        if self._turns:
            # Turns in flight may finish (bounded); one cut off stays an open turn in the store,
            # and the next start answers it.
            done, pending = await asyncio.wait(set(self._turns), timeout=self._stop_grace)
            for task in pending:
                task.cancel()
            if pending:
                log.warning("discord: %d turns still running at shutdown were cancelled", len(pending))
                await asyncio.gather(*pending, return_exceptions=True)
        if self._outbox is not None:
            self._outbox.unregister_streamer(self._streamer)
            self._outbox.unregister(self)
        client, self._client = self._client, None
        if client is None:
            return
        await client.close()
        connection, self._connection = self._connection, None
        if connection is not None:
            done, _ = await asyncio.wait({connection}, timeout=5.0)
            if not done:
                connection.cancel()
                await asyncio.wait({connection})
            if not connection.cancelled():
                connection.exception()  # it ended as it ended; retrieving it keeps asyncio quiet

    async def _log_in(self, client: CompanionClient) -> None:
        where = self._api_base or Route.BASE
        try:
            await client.login(self._token)
        except discord.LoginFailure as exc:
            raise DiscordStartError(
                "COMPANION_DISCORD_TOKEN was rejected by Discord (401 Unauthorized); "
                "copy the bot token again from the Developer Portal (Bot > Reset Token)"
            ) from exc
        except discord.HTTPException as exc:
            hint = " (it includes the version, like https://discord.com/api/v10)" if exc.status == 404 else ""
            raise DiscordStartError(
                f"the Discord API at {where} answered {exc.status} at login; "
                f"{self._check('COMPANION_DISCORD_API_BASE')}{hint}"
            ) from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise DiscordStartError(
                f"cannot reach the Discord API at {where} ({type(exc).__name__}); "
                f"{self._check('COMPANION_DISCORD_API_BASE')}"
            ) from exc
        if self._gateway_url is None and self._api_base is not None:
            # Another REST base (a Discord-compatible server) names its own gateway.
            try:
                _, url, _ = await client.http.get_bot_gateway()
            except (TimeoutError, discord.GatewayNotFound, aiohttp.ClientError, OSError) as exc:
                raise DiscordStartError(
                    f"the Discord API at {where} named no gateway (GET /gateway/bot failed); "
                    "set COMPANION_DISCORD_GATEWAY_URL"
                ) from exc
            client.http.gateway_url = yarl.URL(url)

    async def _connect(self, client: CompanionClient) -> None:
        gateway = str(client.http.gateway_url or DiscordWebSocket.DEFAULT_GATEWAY)
        self._connection = asyncio.create_task(client.connect(reconnect=True), name="discord-gateway")
        ready = asyncio.create_task(client.wait_until_ready(), name="discord-ready")
        try:
            done, _ = await asyncio.wait(
                {self._connection, ready}, timeout=self._ready_timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            ready.cancel()
            await asyncio.gather(ready, return_exceptions=True)
        if ready in done and not ready.cancelled():
            self._connection.add_done_callback(self._connection_ended)
            return
        if self._connection not in done:
            raise DiscordStartError(
                f"the Discord gateway at {gateway} sent no READY within {self._ready_timeout:g} s; "
                f"{self._check('COMPANION_DISCORD_GATEWAY_URL')}"
            )
        exc = self._connection.exception()
        if isinstance(exc, discord.PrivilegedIntentsRequired):
            raise DiscordStartError(
                "Discord refused the Message Content intent for this bot (close code 4014); enable "
                "Bot > Privileged Gateway Intents > Message Content Intent in the Developer Portal"
            ) from exc
        if isinstance(exc, discord.ConnectionClosed) and exc.code == 4004:
            raise DiscordStartError(
                "COMPANION_DISCORD_TOKEN was rejected by the Discord gateway (close code 4004)"
            ) from exc
        check = self._check("COMPANION_DISCORD_GATEWAY_URL")
        unreachable = _network_cause(exc)
        if unreachable is not None:
            # discord.py does not retry a first connection that fails (it raises AttributeError
            # with the network error as its context), so this is where an unreachable gateway lands.
            raise DiscordStartError(
                f"cannot reach the Discord gateway at {gateway} ({type(unreachable).__name__}); {check}"
            ) from exc
        reason = f"close code {exc.code}" if isinstance(exc, discord.ConnectionClosed) else type(exc).__name__
        raise DiscordStartError(
            f"the Discord gateway at {gateway} ended the connection during start-up ({reason}); {check}"
        ) from exc

    def _check(self, variable: str) -> str:
        configured = self._api_base if variable.endswith("API_BASE") else self._gateway_url
        return f"check {variable}" if configured else "check the network connection"

    async def wait_lost(self) -> str:
        """Wait until the gateway connection is lost for good: discord.py's connection loop ended
        (a close code it does not reconnect after, or an error), or the gateway stayed down past
        `outage_limit` while it reconnected. Returns one line naming the platform and why.

        Raises:
            RuntimeError: the adapter was never started.
        """
        if self._lost is None:
            raise RuntimeError("discord: wait_lost() before start()")
        return await asyncio.shield(self._lost)

    def _connection_ended(self, task: asyncio.Task) -> None:
        self._reconnected()
        if self._closing or task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, discord.PrivilegedIntentsRequired):
            self._fatal(
                "Discord refused the Message Content intent while running (close code 4014); enable Bot > "
                "Privileged Gateway Intents > Message Content Intent in the Developer Portal and start again"
            )
        elif isinstance(exc, discord.ConnectionClosed) and exc.code == 4004:
            self._fatal(
                "COMPANION_DISCORD_TOKEN: the Discord gateway rejected the token while running "
                "(close code 4004; reset or revoked?); set a valid token and start again"
            )
        if isinstance(exc, discord.ConnectionClosed):
            reason = f" (close code {exc.code})"
        else:
            reason = f" ({type(exc).__name__})" if exc is not None else ""
        self._mark_lost(f"discord: the gateway connection ended{reason}")

    # Both lines are the caller's to report (the gateway prints one and exits): logged at INFO only.
    def _fatal(self, line: str) -> None:
        log.info("discord: %s", line)
        if self._on_fatal is not None:
            self._on_fatal(line)

    def _mark_lost(self, line: str) -> None:
        log.info("%s", line)
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(line)

    def ready(self) -> str | None:
        """core.ports.BaseChatAdapter: ready while the gateway session is up (READY or RESUMED came
        after the last disconnect) and messages are taken."""
        if self._client is None or self._closing:
            return "not connected"
        if self._lost is not None and self._lost.done():
            return "gateway connection lost"
        if self._down:
            return "gateway disconnected; reconnecting"
        return None

    def _disconnected(self) -> None:
        """discord.py lost the gateway and is reconnecting: start timing the outage."""
        self._down = True
        if self._closing or not self._outage_limit or self._outage is not None:
            return
        self._outage = asyncio.get_running_loop().call_later(self._outage_limit, self._outage_passed)

    def _reconnected(self) -> None:
        """READY or RESUMED arrived (or the adapter is closing): the outage, if any, is over."""
        self._down = False
        outage, self._outage = self._outage, None
        if outage is not None:
            outage.cancel()

    def _outage_passed(self) -> None:
        self._outage = None
        if not self._closing:
            self._mark_lost(
                f"discord: the gateway stayed disconnected for {self._outage_limit:g} s while discord.py "
                "reconnected (COMPANION_DISCORD_OUTAGE_SECONDS)"
            )

    # --- inbound ------------------------------------------------------------

    def _on_message(self, message: discord.Message, edited: bool) -> None:
        if self._closing or self._client is None:
            return
        inbound = self._with_context(message)
        if inbound is None:
            return
        inbound = dataclasses.replace(inbound, edited=edited)
        if edited and message.edited_at is not None:  # an edit's mode is that of the moment it was made
            inbound = dataclasses.replace(inbound, sent_at=message.edited_at.timestamp())
        task = asyncio.create_task(self._serve(message, inbound), name=f"discord-turn-{message.id}")
        self._turns.add(task)
        task.add_done_callback(self._turns.discard)

    def _with_context(self, message: discord.Message) -> InboundMessage | None:
        """`_to_inbound` with what the message replies to or forwards (adapters/discord/context.py):
        live, and caught up after a restart alike."""
        inbound = self._to_inbound(message)
        if inbound is None:
            return None
        return dataclasses.replace(inbound, **reply_context(message, self._me().id, self._client))

    def _to_inbound(self, message: discord.Message) -> InboundMessage | None:
        """The core's view of a message this bot should answer, or None to stay out of it."""
        me = self._me()
        author = message.author
        if author.bot or author.id == me.id or message.webhook_id is not None:
            return None
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return None  # joins, pins, boosts and other system messages
        channel = message.channel
        text = message.content or forwarded_text(message)
        if isinstance(channel, discord.DMChannel):
            direct = True
        elif message.guild is not None or getattr(channel, "guild_id", None) is not None:
            direct = False
            tokens = self._mention_tokens(message)
            addressed = any(token in text for token in tokens) or self._replies_to_me(message)
            if not addressed:
                return None
            for token in tokens:
                text = text.replace(token, " ")
        else:
            return None  # group DMs: a bot is never in one
        text = text.strip()
        media = media_of(message)  # attachments and stickers; the text is then their caption
        if not text and not media:
            return None
        return InboundMessage(
            platform=PLATFORM,
            chat_id=str(channel.id),
            user_id=str(author.id),
            text=text,
            is_direct=direct,
            message_id=str(message.id),
            user_name=author.display_name,
            sent_at=message.created_at.timestamp(),
            media=media,
        )

    def _me(self) -> discord.ClientUser:
        """This bot's own user; only known once the gateway said READY."""
        if self._client is None or self._client.user is None:
            raise RuntimeError("discord: used before the gateway said READY")
        return self._client.user

    def _mention_tokens(self, message: discord.Message) -> list[str]:
        """How a message can mention this bot: its user, or the role Discord gives the bot in the guild."""
        me = self._me().id
        tokens = [f"<@{me}>", f"<@!{me}>"]
        role = message.guild.self_role if message.guild is not None else None
        if role is not None:
            tokens.append(f"<@&{role.id}>")
        return tokens

    def _replies_to_me(self, message: discord.Message) -> bool:
        me = self._me()
        reference = message.reference
        if reference is None:
            return False
        resolved = reference.resolved
        return isinstance(resolved, discord.Message) and resolved.author.id == me.id

    async def _serve(self, message: discord.Message, inbound: InboundMessage, *, catching_up: bool = False) -> None:
        """One turn: typing while the core works, then the reply, strictly in order per channel.
        A DM waits until the DMs sent while the gateway was down were caught up, and is handled once."""
        channel = message.channel
        if inbound.is_direct and not catching_up:
            await self._caught_up.wait()
        async with self._channel_locks.of(channel.id):
            # An edit names a message handled already: the cursor says nothing about it.
            if inbound.is_direct and not inbound.edited and self._cursors.handled(channel.id, message.id):
                return
            typing = asyncio.create_task(self._keep_typing(channel))
            self._typing[channel.id] = typing
            try:
                reply = await self._handler(inbound)
            except Exception as exc:  # noqa: BLE001 - one failed turn must not end the adapter
                log.error(
                    "discord: message %s in channel %s failed in the core (%s)",
                    message.id,
                    channel.id,
                    type(exc).__name__,
                )
                reply = Reply(HANDLER_FAILED, delete_inbound=carries_secret(inbound.text))
            finally:
                if self._typing.get(channel.id) is typing:
                    del self._typing[channel.id]
                typing.cancel()
                await asyncio.gather(typing, return_exceptions=True)
            if reply is not None:
                await self._deliver(message, inbound, reply)
            if inbound.is_direct:
                await self._cursors.advance(channel.id, message.id)

    async def _keep_typing(self, channel: discord.abc.Messageable) -> None:
        """The typing indicator lasts about ten seconds on Discord; renew it until cancelled."""
        while True:
            try:
                await channel.typing()
            except (discord.HTTPException, *_TRANSIENT) as exc:
                log.debug("discord: typing in channel %s failed (%s)", getattr(channel, "id", "?"), type(exc).__name__)
            await asyncio.sleep(self._typing_interval)

    async def _stop_typing(self, channel_id: int) -> None:
        """A reply shown while written is about to post its first message: the typing indicator is
        not renewed any more (the message ends the one showing)."""
        typing = self._typing.pop(channel_id, None)
        if typing is not None:
            typing.cancel()
            await asyncio.gather(typing, return_exceptions=True)

    # --- outbound -----------------------------------------------------------

    async def send_text(self, chat_id: str, text: str) -> str:
        """core.ports.BaseSender: post `text` to a channel now, without an outbox row (a binding's
        test post). Returns the first message's id.

        Raises:
            DeliveryFailed: permanent when the id is no channel id or Discord refused (4xx:
                unknown channel, missing access), else transient.
        """
        client = self._client
        if client is None:
            raise DeliveryFailed("not started", permanent=False, parts_sent=0)
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

    async def send_delivery(self, delivery: OutboundDelivery) -> int:
        """core.ports.BaseSender: send an outbox row from part `parts_sent` on. Each part carries a
        nonce derived from the row, so a part sent again after a crash between send and mark
        is not doubled (Discord keeps nonces for a few minutes)."""
        client = self._client
        if client is None:
            raise DeliveryFailed("not started", permanent=False, parts_sent=delivery.parts_sent)
        answered = await self._interactions.send_routed(delivery)  # a slash command's or button's answer
        if answered is not None:
            return answered
        view = self._interactions.take(delivery.id)
        target = delivery.target
        cached = client.get_channel(int(target.chat_id))
        # A cached category or forum cannot take a message; the partial one lets Discord say so.
        channel = (
            cached
            if isinstance(cached, discord.abc.Messageable)
            else client.get_partial_messageable(int(target.chat_id))
        )
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

    async def _finish_stream(
        self, channel: discord.abc.Messageable, delivery: OutboundDelivery, view: discord.ui.View | None
    ) -> int:
        """The final send of a reply shown while written: the messages shown are edited into its final
        text, cut where the stream cut it (piece i into message i), pieces past them are new messages,
        and messages shown past its last piece are deleted. Each step may be done again (a crash
        before the row was marked): an edit into the same text, a post whose nonce returns the
        message sent before, a delete of a message gone."""
        pieces = self._streamer.pieces(delivery.text, final=True)
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

    async def _deliver(self, message: discord.Message, inbound: InboundMessage, reply: Reply) -> None:
        channel = message.channel
        text = reply.text
        reference = None
        if reply.delete_inbound:
            # The message carried the passphrase: gone first, then the answer.
            if not await self._delete_secret(message):
                text = f"{text}\n\n{DELETE_SECRET_NOTE}"
        elif not inbound.is_direct:
            reference = message.to_reference(fail_if_not_exists=False)
        if reply.delivery_id is not None and self._outbox is not None:
            # A pending outbox row already: sent and marked now, or later by the dispatcher.
            if reply.conversation_id is None:
                raise RuntimeError("discord: a reply with an outbox delivery names no conversation")
            if text != reply.text:
                await self._outbox.append_text(reply.delivery_id, text[len(reply.text) :])
            self._interactions.expect(reply.delivery_id, reply.confirm)
            if reply.attachments:  # the file follows its words
                await self._outbox.deliver(reply.conversation_id, reply.delivery_id)
                await self._send(channel, None, reference=None, attachments=reply.attachments)
            else:  # sent in the outbox's lane: this channel's next message need not wait for it
                self._outbox.hand_over(reply.conversation_id, reply.delivery_id)
            return
        chunks: list[str | None] = list(split_message(text, MESSAGE_LIMIT))
        if not chunks and not reply.attachments:
            return
        chunks = chunks or [None]
        for index, chunk in enumerate(chunks):
            last = index == len(chunks) - 1
            sent = await self._send(
                channel,
                chunk,
                reference=reference if index == 0 else None,
                attachments=reply.attachments if last else (),
                view=confirm_view(reply.confirm) if last else None,
            )
            if not sent:
                # A gap in the middle would read wrong; the rest stays unsent.
                log.error("discord: reply to message %s stopped after %d of %d parts", message.id, index, len(chunks))
                return
        log.info(
            "discord: answered message %s in channel %s with %d parts (%d chars)",
            message.id,
            channel.id,
            len(chunks),
            len(text),
        )

    async def _delete_secret(self, message: discord.Message) -> bool:
        """Delete the user's message that carried a secret; False when the bot cannot."""
        if isinstance(message.channel, discord.DMChannel):
            return False  # Discord lets no bot delete the other person's messages in a DM
        try:
            await message.delete()
        except discord.NotFound:
            return True  # already gone
        except (discord.HTTPException, *_TRANSIENT) as exc:
            log.warning(
                "discord: could not delete message %s that carried a secret (%s)", message.id, type(exc).__name__
            )
            return False
        log.info("discord: deleted message %s that carried a secret", message.id)
        return True

    async def _send(
        self,
        channel: discord.abc.Messageable,
        content: str | None,
        *,
        reference: discord.MessageReference | None,
        attachments: Sequence[Attachment],
        view: discord.ui.View | None = None,
    ) -> bool:
        """Send one message directly (no outbox row); False when it could not be sent."""
        try:
            await self._send_part(
                channel,
                content,
                reference=reference,
                attachments=attachments,
                nonce=str(secrets.randbits(63)),
                view=view,
            )
        except DeliveryFailed:
            return False
        return True

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
        """`action`, again after transient failures (`retry_delays`).

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
                self._send_policy.attempts,
            )

        try:
            return await retrying(
                self._send_policy, action, on_retry=lambda exc, attempt, _delay: failed(exc, attempt.number)
            )
        except _TRANSIENT as exc:  # the last attempt's: an earlier one would have been retried
            failed(exc, self._send_policy.attempts)
            raise DeliveryFailed(type(exc).__name__, permanent=False, parts_sent=0) from exc
        except discord.HTTPException as exc:
            if gone and exc.status == 404 and exc.code == UNKNOWN_MESSAGE:
                raise _Gone from exc
            log.error("discord: channel %s %s (%s, code %s)", channel_id, refused, exc.status, exc.code)
            raise DeliveryFailed(f"http {exc.status}", permanent=True, parts_sent=0) from exc


class _Gone(Exception):
    """The message to edit or delete is not there any more (Discord's Unknown Message)."""


def _partial_message(channel: discord.abc.Messageable, message_id: str) -> discord.PartialMessage:
    get = getattr(channel, "get_partial_message", None)
    if get is None:  # every channel a message of ours can be in has it; a partial messageable too
        raise DeliveryFailed("not a message channel", permanent=True, parts_sent=0)
    return get(int(message_id))


def _network_cause(exc: BaseException | None) -> BaseException | None:
    """The connection failure behind `exc`, if one is in its chain."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (aiohttp.ClientError, OSError, asyncio.TimeoutError)):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None
