"""Confirmation buttons, the same on every platform: what a button carries and what a press may send.

A button carries its command in its data (`companion:/export confirm`), so a press is understood
after a restart, and an old one gets the core's own answer (the confirmation expired, or was used).
A press is the presser typing that command: it is handed to the core as text, and only a known
command without a secret may come out of a button. A reply that goes out through the outbox gets
its button when its row is sent (`PendingButtons`); each platform draws the button itself.
What a button carries is core/values/edge.py's; what a press may send, core.commands.registry's
`command_of`. The chat adapters use this module until they are split into intake, sender and
streamer (the core's hand-off then keeps the pending buttons).
"""

from __future__ import annotations

from collections import OrderedDict

from core.commands.registry import command_of as command_of
from core.values.edge import PREFIX as PREFIX
from core.values.edge import REMEMBERED
from core.values.edge import TEMPLATE as TEMPLATE
from core.values.edge import button_data as edge_button_data
from core.values.model import Confirmation


def button_data(confirmation: Confirmation) -> str:
    """The data a button carries for `confirmation`.

    Raises:
        ValueError: the command is not one a button may send (see `command_of`).
    """
    data = edge_button_data(confirmation)
    if command_of(data) is None:
        raise ValueError("a confirmation's command must be a known command without a secret")
    return data


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
