"""A confirmation (`Reply.confirm`) as a Discord button; its custom_id carries the command it sends
(core.values.edge.button_data), so a press is understood after a restart, and an expired or used
confirmation gets the core's own answer saying so."""

from __future__ import annotations

import re
from typing import Any

import discord

from core.values.edge import PREFIX, TEMPLATE, button_data
from core.values.model import Confirmation


class ConfirmButton(discord.ui.DynamicItem[discord.ui.Button[discord.ui.View]], template=TEMPLATE):
    """A confirmation button. A press goes to the client's `companion_press(interaction, command)`
    (the intake sets it: adapters/discord/interactions.py), so this module needs nothing of the intake."""

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
        press = getattr(interaction.client, "companion_press", None)
        if press is not None:
            await press(interaction, self.command)


def confirm_view(confirmation: Confirmation | None) -> discord.ui.View | None:
    """The button of `confirmation` under a message; None without one."""
    if confirmation is None:
        return None
    button_data(confirmation)  # raises for data no button may carry
    view = discord.ui.View(timeout=None)
    view.add_item(ConfirmButton(confirmation.command, confirmation.label))
    return view
