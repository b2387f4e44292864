"""Confirmation buttons, the same on every platform: what a button carries and what a press may send.

A button carries its command in its data (`companion:/export confirm`), so a press is understood
after a restart, and an old one gets the core's own answer (the confirmation expired, or was used).
A press is the presser typing that command: it is handed to the core as text, and only a known
command without a secret may come out of a button. A reply that goes out through the outbox gets
its button when its row is sent (`PendingButtons`); each platform draws the button itself.
"""

from __future__ import annotations

import re
from collections import OrderedDict

from core.commands.registry import carries_secret, command_info
from core.values.command_text import parse_command
from core.values.model import Confirmation

PREFIX = "companion:"
# What a button may send: a command name and at most one plain word (Telegram allows 64 bytes of
# callback_data, Discord 100 characters of custom_id).
COMMAND = re.compile(r"/[a-z_]{1,32}(?: [a-z0-9_]{1,16})?")
TEMPLATE = re.escape(PREFIX) + r"(?P<command>" + COMMAND.pattern + r")"
# Confirmations kept for outbox rows not sent yet: rows never sent by this process (a restart)
# must not pile up.
REMEMBERED = 256


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


class PendingButtons:
    """Which outbox delivery carries which confirmation's button, until the delivery is sent.

    The adapter that hands a reply's row to the outbox `expect`s its confirmation; the send of the
    row `take`s it, once: a row sent again later (a retry, a restart) goes without the button, and
    the typed confirmation still works. Only the newest `limit` are kept.
    """

    def __init__(self, limit: int = REMEMBERED) -> None:
        self._limit = limit
        self._pending: OrderedDict[int, Confirmation] = OrderedDict()

    def expect(self, delivery_id: int, confirmation: Confirmation | None) -> None:
        """The delivery `delivery_id` carries `confirmation`'s button (nothing when it is None).

        Raises:
            ValueError: the command is not one a button may send (see `button_data`).
        """
        if confirmation is None:
            return
        button_data(confirmation)
        self._pending[delivery_id] = confirmation
        while len(self._pending) > self._limit:
            self._pending.popitem(last=False)

    def take(self, delivery_id: int) -> Confirmation | None:
        """The confirmation whose button goes with the delivery's send, or None; forgotten once taken."""
        return self._pending.pop(delivery_id, None)
