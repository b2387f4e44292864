"""What a confirmation button may carry and send, and which delivery carries which button, the same
on every platform: the data's shape (core/values/edge.py), what a press may send
(core/commands/registry.py `command_of`) and the rows' buttons until their first send
(core/delivery/handoff.py). That a confirmation carrying a secret never becomes a button is the
entry's: tests/core/test_entry.py::test_a_confirmation_that_would_carry_a_secret_never_becomes_a_button."""

from __future__ import annotations

import re

import pytest

from core.commands.registry import command_of
from core.delivery.handoff import _Extras
from core.values.edge import TEMPLATE, button_data
from core.values.model import Confirmation


def test_a_button_carries_its_command_within_telegrams_64_bytes_and_discords_100_characters():
    data = button_data(Confirmation("Create the non-private file", "/export confirm"))
    assert data == "companion:/export confirm"
    assert len(data.encode()) <= 64
    assert command_of(data) == "/export confirm"


@pytest.mark.parametrize(
    "data",
    [
        "companion:/private sesame",  # a secret command: a button never sends a passphrase
        "companion:/link 123456",
        "companion:/privte sesame",  # a look-alike of one
        "companion:/nosuchcommand",
        "companion:hello",  # not a command: a press is never chat text
        "companion:/export confirm now",  # more than one word
        "/export confirm",  # not ours
        "",
        None,
    ],
)
def test_a_press_sends_only_a_known_command_without_a_secret(data):
    assert command_of(data) is None


def test_a_button_that_would_carry_a_secret_sends_nothing_when_pressed():
    # Drawn by mistake, its press is refused where it comes in (the entry draws none: see above).
    assert command_of(button_data(Confirmation("Enter", "/private sesame"))) is None


def test_the_discord_template_matches_exactly_what_button_data_makes():
    assert re.fullmatch(TEMPLATE, "companion:/export confirm")
    assert not re.fullmatch(TEMPLATE, "companion:/export confirm; /private x")


EXPORT = Confirmation("Create the non-private file", "/export confirm")


def test_a_pending_button_goes_with_its_delivery_once():
    pending = _Extras()
    pending.expect(7, EXPORT, None)
    pending.expect(8, None, None)  # a reply without a confirmation waits for no button
    assert pending.take(8) is None
    assert pending.take(7) == (EXPORT, None)
    assert pending.take(7) is None  # sent again (a retry), the delivery goes without it


def test_pending_buttons_keep_only_the_newest_deliveries():
    pending = _Extras(limit=2)
    for delivery_id in (1, 2, 3):
        pending.expect(delivery_id, EXPORT, None)
    assert [pending.take(d) for d in (1, 2, 3)] == [None, (EXPORT, None), (EXPORT, None)]
