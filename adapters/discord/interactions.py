"""Discord application (slash) commands and confirmation buttons: the intake's half of interactions.

The core's chat commands (`ChatCore.commands`) are registered as global slash commands at start (one
bulk overwrite). A slash command is the same command as typed text: the core gets `/name args`
and stores it the same way (a secret command's arguments as `[redacted]`). The difference is
where the secret travels: as a command option it is never a message in the channel, and the
answer to a secret-carrying command is ephemeral (only the person sees it). Every interaction is
acknowledged at once (Discord allows 3 seconds), then handed to the core with its route
(adapters/discord/routes.py): the sender answers it with followups, a reply's outbox row included,
so it is sent and marked like any delivery.

A confirmation's button (adapters/discord/buttons.py) hands its raw data to the core as a press:
the core reads the command it carries, so an expired or used confirmation gets its answer saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import discord
from discord import app_commands

from adapters.discord.buttons import ConfirmButton
from adapters.discord.client import PLATFORM
from adapters.discord.routes import InteractionRoutes
from core.ports.chat import ChatCore
from core.values.edge import PREFIX, CommandSpec, Silent
from core.values.model import InboundMessage

log = logging.getLogger(__name__)

_PLAIN_WORDS = re.compile(r"\[?[A-Z]+\]?")
_FAILED = (discord.HTTPException, aiohttp.ClientError, OSError, asyncio.TimeoutError)


@dataclass(frozen=True, slots=True)
class SlashOption:
    name: str
    required: bool
    description: str


def slash_options(command: CommandSpec) -> tuple[SlashOption, ...]:
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


class DiscordInteractions:
    """Slash commands and confirmation buttons, handed to the core like messages.

    Args:
        core: where the events go; its `commands` become the slash commands.
        routes: where each interaction is kept for its answers.
        taking: whether the intake still takes events (False once its stop began).
        work: the intake's own work; an interaction being handed in is part of it.
    """

    def __init__(
        self,
        core: ChatCore,
        routes: InteractionRoutes,
        *,
        taking: Callable[[], bool],
        work: set[asyncio.Task[Any]],
    ) -> None:
        self._core = core
        self._routes = routes
        self._taking = taking
        self._work = work
        self._tree: app_commands.CommandTree[discord.Client] | None = None

    # --- set-up -------------------------------------------------------------------

    def install(self, client: discord.Client) -> None:
        """Give `client` the command tree and the confirmation button (before login)."""
        tree: app_commands.CommandTree[discord.Client] = app_commands.CommandTree(client)
        for command in self._core.commands:
            tree.add_command(self._slash_command(command))
        client.add_dynamic_items(ConfirmButton)
        client.companion_press = self.on_button  # type: ignore[attr-defined]  # called by ConfirmButton
        self._tree = tree

    async def sync(self) -> None:
        """Overwrite the application's global commands with ours (after login: the application
        id is known). A failure is logged: typed commands keep working."""
        if self._tree is None or not self._core.commands:
            return
        try:
            synced = await self._tree.sync()
        except (*_FAILED, discord.DiscordException) as exc:
            log.warning(
                "discord: syncing the application commands failed (%s); typed commands still work", type(exc).__name__
            )
            return
        log.info("discord: %d application commands synced", len(synced))

    def _slash_command(self, command: CommandSpec) -> app_commands.Command[Any, Any, None]:
        options = slash_options(command)

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
        return app_commands.Command(name=command.name, description=command.description[:100], callback=run)

    # --- interactions ---------------------------------------------------------------

    async def on_command(
        self, interaction: discord.Interaction, command: CommandSpec, values: list[str | None]
    ) -> None:
        """A slash command: acknowledged at once (ephemeral for a secret-carrying command), then
        handed to the core; its answer comes as followups."""
        if not self._taking():
            return
        ephemeral = command.secret
        if not await self._acknowledge(interaction, ephemeral=ephemeral, thinking=True):
            return
        args = [v.strip() for v in values if v and v.strip()]
        if command.secret and any(len(v.split()) > 1 for v in args):
            # Joined into one line, a passphrase with a space would read as passphrase and expiry.
            route = self._routes.get(self._routes.open(interaction, ephemeral=ephemeral, direct=_direct(interaction)))
            if route is not None:
                with contextlib.suppress(*_FAILED):
                    await self._routes.followup(route, f"Usage: {command.usage} (each one word). Nothing changed.")
            return
        await self._hand_in(interaction, " ".join([f"/{command.name}", *args]), ephemeral=ephemeral, thinking=True)

    async def on_button(self, interaction: discord.Interaction, command: str) -> None:
        """A confirmation button: acknowledged without a loading state, then handed to the core as a
        press of its data (the core reads the command it carries)."""
        if not self._taking() or not await self._acknowledge(interaction, ephemeral=False, thinking=False):
            return
        await self._hand_in(interaction, PREFIX + command, ephemeral=False, thinking=False, pressed=True)

    async def _acknowledge(self, interaction: discord.Interaction, *, ephemeral: bool, thinking: bool) -> bool:
        try:
            with self._routes.routed():
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

    async def _hand_in(
        self, interaction: discord.Interaction, text: str, *, ephemeral: bool, thinking: bool, pressed: bool = False
    ) -> None:
        """Hand the interaction to the core (after its acknowledgement: the order of a chat's events
        is the order they reach here); a command the core answers with silence loses its "thinking"."""
        task = asyncio.current_task()
        if task is not None:
            self._work.add(task)
        try:
            event = _inbound(interaction, text, pressed)
            route = self._routes.open(interaction, ephemeral=ephemeral, direct=event.is_direct)
            outcome = await self._core.receive(dataclasses.replace(event, route=route))
            if isinstance(outcome, Silent) and thinking:
                with contextlib.suppress(*_FAILED), self._routes.routed():
                    await interaction.delete_original_response()
        finally:
            if task is not None:
                self._work.discard(task)


def _direct(interaction: discord.Interaction) -> bool:
    return interaction.guild_id is None and isinstance(interaction.channel, discord.DMChannel)


def _inbound(interaction: discord.Interaction, text: str, pressed: bool) -> InboundMessage:
    return InboundMessage(
        platform=PLATFORM,
        chat_id=str(interaction.channel_id),
        user_id=str(interaction.user.id),
        text=text,
        is_direct=_direct(interaction),
        message_id=str(interaction.id),  # a snowflake like a message id: the inbox key
        user_name=interaction.user.display_name,
        sent_at=interaction.created_at.timestamp(),
        pressed=pressed,
    )
