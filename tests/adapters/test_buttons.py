"""What a confirmation button may carry and send, and which delivery carries which button
(adapters/buttons.py), the same on every platform."""

from __future__ import annotations

import pytest

from adapters.buttons import TEMPLATE, PendingButtons, button_data, command_of
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


def test_a_confirmation_that_would_carry_a_secret_cannot_become_a_button():
    with pytest.raises(ValueError, match="without a secret"):
        button_data(Confirmation("Enter", "/private sesame"))


def test_the_discord_template_matches_exactly_what_button_data_makes():
    import re

    assert re.fullmatch(TEMPLATE, "companion:/export confirm")
    assert not re.fullmatch(TEMPLATE, "companion:/export confirm; /private x")


EXPORT = Confirmation("Create the non-private file", "/export confirm")


def test_a_pending_button_goes_with_its_delivery_once():
    pending = PendingButtons()
    pending.expect(7, EXPORT)
    pending.expect(8, None)  # a reply without a confirmation waits for no button
    assert pending.take(8) is None
    assert pending.take(7) == EXPORT
    assert pending.take(7) is None  # sent again (a retry), the delivery goes without it


def test_pending_buttons_keep_only_the_newest_deliveries():
    pending = PendingButtons(limit=2)
    for delivery_id in (1, 2, 3):
        pending.expect(delivery_id, EXPORT)
    assert [pending.take(d) for d in (1, 2, 3)] == [None, EXPORT, EXPORT]


def test_a_pending_button_that_would_carry_a_secret_is_refused_when_expected():
    pending = PendingButtons()
    with pytest.raises(ValueError, match="without a secret"):
        pending.expect(1, Confirmation("Enter", "/private sesame"))
    assert pending.take(1) is None
