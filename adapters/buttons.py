"""Confirmation buttons, the same on every platform: what a button carries and what a press may send.

A button carries its command in its data (`companion:/export confirm`), so a press is understood
after a restart, and an old one gets the core's own answer (the confirmation expired, or was used).
A press is the presser typing that command: it is handed to the core as text, and only a known
command without a secret may come out of a button.
"""

from __future__ import annotations

import re

from core.commands.registry import carries_secret, command_info
from core.values.command_text import parse_command
from core.values.model import Confirmation

PREFIX = "companion:"
# What a button may send: a command name and at most one plain word (Telegram allows 64 bytes of
# callback_data, Discord 100 characters of custom_id).
COMMAND = re.compile(r"/[a-z_]{1,32}(?: [a-z0-9_]{1,16})?")
TEMPLATE = re.escape(PREFIX) + r"(?P<command>" + COMMAND.pattern + r")"


def button_data(confirmation: Confirmation) -> str:
    """The data a button carries for `confirmation`.

    Raises:
        ValueError: the command is not one a button may send (see `command_of`).
    """
    data = PREFIX + confirmation.command
    if command_of(data) is None:
        raise ValueError("a confirmation's command must be a known command without a secret")
    return data


def command_of(data: str | None) -> str | None:
    """The command a pressed button sends, or None when the data is not one of ours."""
    if not data or not data.startswith(PREFIX):
        return None
    text = data[len(PREFIX) :]
    if not COMMAND.fullmatch(text) or carries_secret(text):
        return None
    command = parse_command(text)
    if command is None or command_info(command.name) is None:
        return None
    return text
