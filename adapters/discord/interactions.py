"""Discord application (slash) commands and confirmation buttons, answered through interactions.

The chat commands of `core/commands/registry.py` are registered as global slash commands at start (one
bulk overwrite). A slash command is the same command as typed text: the core gets `/name args`
and stores it the same way (a secret command's arguments as `[redacted]`). The difference is
where the secret travels: as a command option it is never a message in the channel, and the
answer to a secret-carrying command is ephemeral (only the person sees it). Every interaction is
acknowledged at once (Discord allows 3 seconds) and answered by followups; a reply's outbox row
is sent through the interaction (`send_routed`), so it is sent and marked like any delivery.

A confirmation (`Reply.confirm`) becomes a button; a press is the presser typing its command
(`adapters/buttons.py`), so an expired or used confirmation gets the core's answer saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import discord
from discord import app_commands
from discord.http import Route
from discord.webhook.async_ import AsyncWebhookAdapter, async_context

from adapters.buttons import PREFIX, REMEMBERED, TEMPLATE, PendingButtons, button_data, command_of
from adapters.discord.client import MESSAGE_LIMIT, NO_MENTIONS, PLATFORM
from adapters.rendering.text import split_message
from core.commands.call import Command
from core.commands.registry import command_info
from core.delivery.outbox import Outbox
from core.ports import MessageHandler
from core.values.copy import HANDLER_FAILED
from core.values.errors import DeliveryFailed
from core.values.locks import KeyedLocks
from core.values.model import Attachment, Confirmation, InboundMessage, OutboundDelivery, Reply

log = logging.getLogger(__name__)

_PLAIN_WORDS = re.compile(r"\[?[A-Z]+\]?")
_FAILED = (discord.HTTPException, aiohttp.ClientError, OSError, asyncio.TimeoutError)


@dataclass(frozen=True, slots=True)
class SlashOption:
    name: str
    required: bool
    description: str


def slash_options(command: Command) -> tuple[SlashOption, ...]:
    """The options of a command on Discord: a secret command's words by name (`/private`'s
    `passphrase` and `expiry`), one optional `args` for every other command taking arguments."""
    words = command.usage.split()[1:]
    if not words:
        return ()
    if command.secret and all(_PLAIN_WORDS.fullmatch(w) for w in words):
        return tuple(
            SlashOption(w.strip("[]").lower(), not w.startswith("["), f"{w.strip('[]')} (only you see it)")
            for w in words
        )
    return (SlashOption("args", False, f"As in {command.usage}"[:100]),)


@dataclass(frozen=True, slots=True)
class _Route:
    """A reply's delivery that goes out as followups of the interaction it answers."""

    interaction: discord.Interaction
    ephemeral: bool
    direct: bool


class ConfirmButton(discord.ui.DynamicItem[discord.ui.Button[discord.ui.View]], template=TEMPLATE):
    """A confirmation button; its custom_id carries the command, so a press is understood after a restart."""

    def __init__(self, command: str, label: str) -> None:
        super().__init__(
            discord.ui.Button(label=label[:80], style=discord.ButtonStyle.danger, custom_id=PREFIX + command)
        )
        self.command = command

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str]
    ) -> ConfirmButton:
        return cls(match["command"], getattr(item, "label", None) or "Confirm")

    async def callback(self, interaction: discord.Interaction) -> None:
        handler = getattr(interaction.client, "companion_interactions", None)
        if isinstance(handler, DiscordInteractions):
            await handler.on_button(interaction, self.command)


def confirm_view(confirmation: Confirmation | None) -> discord.ui.View | None:
    if confirmation is None:
        return None
    button_data(confirmation)  # raises for a command no button may send
    view = discord.ui.View(timeout=None)
    view.add_item(ConfirmButton(confirmation.command, confirmation.label))
    return view


class _RoutedWebhookAdapter(AsyncWebhookAdapter):
    """discord.py sends interaction answers and followups through its webhook adapter, which
    builds URLs from `Route.BASE` itself (not through the client's HTTPClient): rewritten here."""

    def __init__(self, api_base: str) -> None:
        super().__init__()
        self._api_base = api_base

    async def request(self, route: Route, session: aiohttp.ClientSession, **kwargs: Any) -> Any:
        if route.url.startswith(Route.BASE):
            route.url = self._api_base + route.url[len(Route.BASE) :]
        return await super().request(route, session, **kwargs)


class DiscordInteractions:
    """Slash commands and confirmation buttons for one DiscordAdapter."""

    def __init__(
        self,
        *,
        handler: MessageHandler,
        outbox: Outbox | None,
        locks: KeyedLocks[int],
        turns: set[asyncio.Task[Any]],
        commands: Sequence[tuple[str, str]],
        api_base: str | None,
        closing: Callable[[], bool],
    ) -> None:
        self._handler = handler
        self._outbox = outbox
        self._locks = locks
        self._turns = turns
        self._closing = closing
        self._commands = [c for c in (command_info(name) for name, _ in commands) if c is not None]
        self._descriptions = dict(commands)
        self._webhooks = _RoutedWebhookAdapter(api_base) if api_base else None
        self._routes: OrderedDict[int, _Route] = OrderedDict()
        self._buttons = PendingButtons()
        self._tree: app_commands.CommandTree[discord.Client] | None = None

    # --- set-up -------------------------------------------------------------------

    def install(self, client: discord.Client) -> None:
        """Give `client` the command tree and the confirmation button (before login)."""
        tree: app_commands.CommandTree[discord.Client] = app_commands.CommandTree(client)
        for command in self._commands:
            tree.add_command(self._slash_command(command))
        client.add_dynamic_items(ConfirmButton)
        client.companion_interactions = self  # type: ignore[attr-defined]  # found again by ConfirmButton
        self._tree = tree

    async def sync(self) -> None:
        """Overwrite the application's global commands with ours (after login: the application
        id is known). A failure is logged: typed commands keep working."""
        if self._tree is None or not self._commands:
            return
        try:
            synced = await self._tree.sync()
        except (*_FAILED, discord.DiscordException) as exc:
            log.warning(
                "discord: syncing the application commands failed (%s); typed commands still work", type(exc).__name__
            )
            return
        log.info("discord: %d application commands synced", len(synced))

    def _slash_command(self, command: Command) -> app_commands.Command[Any, Any, None]:
        options = slash_options(command)
        name = command.name

        async def run(interaction: discord.Interaction, **values: str | None) -> None:
            await self.on_command(interaction, command, [values.get(o.name) for o in options])

        parameters = [
            inspect.Parameter("interaction", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=discord.Interaction)
        ]
        for option in options:
            parameters.append(
                inspect.Parameter(
                    option.name,
                    inspect.Parameter.KEYWORD_ONLY,
                    annotation=str if option.required else (str | None),
                    default=inspect.Parameter.empty if option.required else None,
                )
            )
        run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]  # read by discord.py
        run.__discord_app_commands_param_description__ = {o.name: o.description for o in options}  # type: ignore[attr-defined]  # discord.py's describe()
        description = (self._descriptions.get(name) or command.description)[:100]
        return app_commands.Command(name=name, description=description, callback=run)

    # --- interactions ---------------------------------------------------------------

    @contextlib.contextmanager
    def _routed(self) -> Iterator[None]:
        if self._webhooks is None:
            yield
            return
        token = async_context.set(self._webhooks)
        try:
            yield
        finally:
            async_context.reset(token)

    async def on_command(self, interaction: discord.Interaction, command: Command, values: list[str | None]) -> None:
        """A slash command: acknowledged at once (ephemeral for a secret-carrying command), then the
        core's answer as followups."""
        if self._closing():
            return
        ephemeral = command.secret
        if not await self._acknowledge(interaction, ephemeral=ephemeral, thinking=True):
            return
        args = [v.strip() for v in values if v and v.strip()]
        if command.secret and any(len(v.split()) > 1 for v in args):
            # Joined into one line, a passphrase with a space would read as passphrase and expiry.
            await self._followups(
                interaction, Reply(f"Usage: {command.usage} (each one word). Nothing changed."), ephemeral
            )
            return
        await self._turn(interaction, " ".join([f"/{command.name}", *args]), ephemeral)

    async def on_button(self, interaction: discord.Interaction, command: str) -> None:
        """A confirmation button: acknowledged without a loading state, then the core's answer."""
        text = command_of(PREFIX + command)
        if self._closing() or not await self._acknowledge(interaction, ephemeral=False, thinking=False):
            return
        if text is None:
            return
        await self._turn(interaction, text, ephemeral=False)

    async def _acknowledge(self, interaction: discord.Interaction, *, ephemeral: bool, thinking: bool) -> bool:
        try:
            with self._routed():
                await interaction.response.defer(ephemeral=ephemeral, thinking=thinking)
        except _FAILED as exc:
            # Too late (Discord waits 3 s) or answered already: the command is not run, so nothing
            # changes that the person was not told about.
            code = getattr(exc, "code", None)
            log.warning(
                "discord: interaction %s could not be acknowledged (%s, code %s)",
                interaction.id,
                type(exc).__name__,
                code,
            )
            return False
        return True

    async def _turn(self, interaction: discord.Interaction, text: str, ephemeral: bool) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._turns.add(task)
        try:
            inbound = self._inbound(interaction, text)
            async with self._locks.of(int(inbound.chat_id)):
                try:
                    reply = await self._handler(inbound)
                except Exception as exc:  # noqa: BLE001 - one failed turn must not end the adapter
                    log.error("discord: interaction %s failed in the core (%s)", interaction.id, type(exc).__name__)
                    reply = Reply(HANDLER_FAILED)
                await self._answer(interaction, inbound, reply, ephemeral)
        finally:
            if task is not None:
                self._turns.discard(task)

    def _inbound(self, interaction: discord.Interaction, text: str) -> InboundMessage:
        channel = interaction.channel
        direct = interaction.guild_id is None and isinstance(channel, discord.DMChannel)
        return InboundMessage(
            platform=PLATFORM,
            chat_id=str(interaction.channel_id),
            user_id=str(interaction.user.id),
            text=text,
            is_direct=direct,
            message_id=str(interaction.id),  # a snowflake like a message id: the inbox key
            user_name=interaction.user.display_name,
            sent_at=interaction.created_at.timestamp(),
        )

    async def _answer(
        self, interaction: discord.Interaction, inbound: InboundMessage, reply: Reply | None, ephemeral: bool
    ) -> None:
        if reply is None:  # the core stays silent: the loading answer goes
            with contextlib.suppress(*_FAILED), self._routed():
                await interaction.delete_original_response()
            return
        if reply.delivery_id is not None and self._outbox is not None and reply.conversation_id is not None:
            self.expect(reply.delivery_id, reply.confirm)
            self._routes[reply.delivery_id] = _Route(interaction, ephemeral, inbound.is_direct)
            while len(self._routes) > REMEMBERED:  # rows never sent (a restart) must not pile up
                self._routes.popitem(last=False)
            await self._outbox.deliver(reply.conversation_id, reply.delivery_id)
            if reply.attachments:
                await self._followups(interaction, Reply("", attachments=reply.attachments), ephemeral)
            return
        await self._followups(interaction, reply, ephemeral)

    async def _followups(self, interaction: discord.Interaction, reply: Reply, ephemeral: bool) -> None:
        """Send a reply directly as followups (no outbox row): the confirmation on the last part, files with it."""
        chunks: list[str | None] = list(split_message(reply.text, MESSAGE_LIMIT)) or [None]
        view = confirm_view(reply.confirm)
        for index, chunk in enumerate(chunks):
            last = index == len(chunks) - 1
            try:
                await self._followup(
                    interaction, chunk, ephemeral, view if last else None, reply.attachments if last else ()
                )
            except _FAILED as exc:
                log.error("discord: followup to interaction %s failed (%s)", interaction.id, type(exc).__name__)
                return

    async def _followup(
        self,
        interaction: discord.Interaction,
        content: str | None,
        ephemeral: bool,
        view: discord.ui.View | None,
        attachments: Sequence[Attachment],
    ) -> None:
        options: dict[str, Any] = {"ephemeral": ephemeral, "allowed_mentions": NO_MENTIONS, "wait": True}
        if view is not None:
            options["view"] = view
        if attachments:
            options["files"] = [discord.File(io.BytesIO(a.data), filename=a.filename) for a in attachments]
        with self._routed():
            await interaction.followup.send(content or discord.utils.MISSING, **options)

    # --- deliveries ----------------------------------------------------------------------

    async def send_routed(self, delivery: OutboundDelivery) -> int | None:
        """Send a delivery that answers an interaction as its followups; None when it answers none.

        Raises:
            DeliveryFailed: the followup failed. Permanent for an ephemeral answer outside a DM
                (it must not fall back to a message everyone in the channel sees); otherwise
                transient, and the outbox sends it again as a channel message.
        """
        route = self._routes.pop(delivery.id, None)
        if route is None:
            return None
        view = self.take(delivery.id)
        chunks = split_message(delivery.text, MESSAGE_LIMIT)
        for index in range(delivery.parts_sent, len(chunks)):
            last = index == len(chunks) - 1
            try:
                await self._followup(route.interaction, chunks[index], route.ephemeral, view if last else None, ())
            except _FAILED as exc:
                log.warning("discord: followup of delivery %s failed (%s)", delivery.id, type(exc).__name__)
                permanent = route.ephemeral and not route.direct
                raise DeliveryFailed(type(exc).__name__, permanent=permanent, parts_sent=index) from exc
        return len(chunks)

    def expect(self, delivery_id: int, confirmation: Confirmation | None) -> None:
        """The delivery `delivery_id` carries this confirmation's button (adapters/buttons.py)."""
        self._buttons.expect(delivery_id, confirmation)

    def take(self, delivery_id: int) -> discord.ui.View | None:
        """The button of the delivery `delivery_id`, drawn for its send; None once taken."""
        return confirm_view(self._buttons.take(delivery_id))
