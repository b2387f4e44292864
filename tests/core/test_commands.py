"""Command parsing: disguised and look-alike `/private` commands never leak the passphrase."""

from __future__ import annotations

import logging

import pytest

from core.commands.registry import mistyped_secret_command
from core.values.command_text import normalize_command_text, parse_command
from tests.conftest import PASSPHRASE
from tests.helpers.chat import all_rows, say
from tests.helpers.fakes import request_text

SECRET = "SECRET-CANARY-4417"

# A disguised but correctly spelled /private is /private itself: verified, redacted, deleted.
DISGUISED = {
    "byte-order mark": f"\ufeff/private {SECRET}",
    "zero-width space": f"\u200b/\u200bprivate {SECRET}",
    "word joiner and zero-width joiner": f"/pri\u2060va\u200dte {SECRET}",
    "full-width slash": f"\uff0fprivate {SECRET}",
    "full-width letters": f"\uff0f\uff50\uff52\uff49\uff56\uff41\uff54\uff45 {SECRET}",
}
# A look-alike or mistyped /private is refused unquoted: nothing of it kept.
LOOKALIKE = {
    "cyrillic er": f"/\u0440rivate {SECRET}",
    "four cyrillic letters": f"/\u0440r\u0456v\u0430t\u0435 {SECRET}",
    "greek iota": f"/pr\u03b9vate {SECRET}",
    "one letter dropped": f"/privat {SECRET}",
    "two letters swapped": f"/pirvate {SECRET}",
    "zero-width space as the separator": f"/private\u200b{SECRET}",
    "backslash": f"\\private {SECRET}",
}
# The command itself, with the words in the wrong order or too many of them.
BAD_ARGUMENTS = {
    "swapped words": f"/private 2h {SECRET}",
    "bad expiry": f"/private {PASSPHRASE} {SECRET}",
    "extra words": f"/private {SECRET} 2h more",
}
VARIANTS = {**DISGUISED, **LOOKALIKE, **BAD_ARGUMENTS}


def database_bytes(tmp_path) -> bytes:
    """The database and its WAL and shared-memory files, as they are on disk."""
    return b"".join(path.read_bytes() for path in sorted(tmp_path.glob("companion.db*")) if path.is_file())


# SQLite alone: it reads the database's files. What keeps the passphrase out runs before any write, the same
# on every engine (the lookalike test below, on both, shows nothing is stored).
@pytest.mark.parametrize("text", VARIANTS.values(), ids=VARIANTS.keys())
async def test_no_passphrase_variant_leaves_a_trace_in_the_database_the_model_the_replies_or_the_logs(
    companion, stores, provider, tmp_path, caplog, text
):
    caplog.set_level(logging.DEBUG)
    reply = await say(companion, text)
    assert SECRET not in reply.text
    assert reply.delete_inbound  # the platform message is deleted where the platform allows
    after = await say(companion, "what did I just say?")  # the history goes to the model
    assert SECRET not in after.text
    assert provider.requests and all(SECRET not in request_text(r) for r in provider.requests)
    await companion.drain()
    await stores.database.aclose()
    assert SECRET.encode() not in database_bytes(tmp_path)
    assert SECRET.encode("utf-16-le") not in database_bytes(tmp_path)
    assert SECRET not in caplog.text


@pytest.mark.parametrize("text", DISGUISED.values(), ids=DISGUISED.keys())
async def test_a_disguised_private_command_is_the_private_command_itself(companion, stores, text):
    reply = await say(companion, text)
    assert "not right" in reply.text  # verified as a passphrase, not answered as an unknown command
    assert await all_rows(stores, "SELECT text FROM messages") == [("/private [redacted]",)]
    entered = await say(companion, text.replace(SECRET, PASSPHRASE))
    assert "Private mode is on" in entered.text


@pytest.mark.engines
@pytest.mark.parametrize("text", LOOKALIKE.values(), ids=LOOKALIKE.keys())
async def test_a_lookalike_private_command_is_neither_stored_nor_answered_by_the_model(
    companion, stores, provider, text
):
    reply = await say(companion, text)
    assert "mistyped /private" in reply.text and reply.delete_inbound
    assert await all_rows(stores, "SELECT count(*) FROM messages") == [(0,)]
    assert provider.requests == []


async def test_swapped_words_are_explained_without_quoting_either_word(companion, stores):
    reply = await say(companion, f"/private 2h {SECRET}")
    assert "passphrase comes first" in reply.text and "2h" not in reply.text
    assert await all_rows(stores, "SELECT count(*) FROM segments") == [(0,)]


def test_input_is_normalised_before_command_parsing():
    assert normalize_command_text("\ufeff\uff0fmode") == "/mode"
    assert parse_command("\u200b/help\u2060") == parse_command("/help")
    # The arguments keep their characters (NFKC would change a passphrase `companion passphrase` hashed).
    assert parse_command("\uff0fprivate \uff50w").args == "\uff50w"


@pytest.mark.parametrize(
    "text",
    ["/shrug", "/help", "/mode", "/private x", "private thoughts", "/ remember", "hello /privat x", "", "\u200b"],
)
def test_other_words_are_not_taken_for_a_mistyped_private_command(text):
    assert not mistyped_secret_command(text)
