"""Where a streamed reply is cut into messages (adapters/rendering/pieces.py): a reply that fits one message
is shown as written, trimmed as the cuts would trim it, holding back its last grapheme cluster
while it is still written; a joined space (whitespace a modifier attaches to) is never split."""

from __future__ import annotations

import pytest

from adapters.rendering.pieces import stream_pieces


@pytest.mark.parametrize(
    ("text", "final", "shown"),
    [
        ("  hello there \n", True, ["hello there"]),
        ("hello there", False, ["hello ther"]),
        ("a family 👨\u200d👩\u200d👧", False, ["a family"]),  # the family may still grow
        ("a family 👨\u200d👩\u200d👧", True, ["a family 👨\u200d👩\u200d👧"]),
        ("thumbs 👍🏽", False, ["thumbs"]),  # the skin tone arrived with the thumb: held back together
        (" \u200d\r\n🏽", True, [" \u200d\r\n🏽"]),  # the ZWJ joins the space: nothing to trim at the start
        (" \u0301word", True, [" \u0301word"]),
        ("   ", True, []),
        ("", False, []),
    ],
)
def test_a_reply_in_one_message_is_shown_as_written(text, final, shown):
    assert stream_pieces(text, 4096, final=final) == shown


def test_a_reply_past_the_limit_is_cut_between_words():
    text = "word " * 30
    pieces = stream_pieces(text, 40, final=True)
    assert len(pieces) > 1 and all(len(piece) <= 40 for piece in pieces)
    assert " ".join(pieces).split() == text.split()
