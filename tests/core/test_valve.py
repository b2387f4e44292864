"""The valve (seed 000): boot lands normal, every failure lands normal, entry verified, exit free."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging

import pytest

from bot.bootstrap import build_companion
from core.privacy.lockout import DURATION as LOCKOUT_DURATION
from core.turn.companion import Companion
from core.values import copy
from core.values.errors import PrivateWriteRefused
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows, conversation_of, say, segments_of
from tests.helpers.fakes import request_text


async def mode_of(companion: Companion) -> str:
    return (await companion.valve.settle(await conversation_of(companion))).mode.value


async def test_entering_with_the_passphrase_opens_private_mode(companion):
    reply = await say(companion, f"/private {PASSPHRASE} 2h")
    assert "Private mode is on" in reply.text and reply.delete_inbound
    assert await mode_of(companion) == "private"


@pytest.mark.engines
async def test_boot_lands_in_normal_mode_and_never_resumes_private(companion, stores, provider, clock):
    await say(companion, f"/private {PASSPHRASE} 7d")
    assert await mode_of(companion) == "private"
    restarted = build_companion(stores, provider, companion.config, clock=clock)
    await restarted.start()
    assert await mode_of(restarted) == "normal"
    reply = await say(restarted, "/mode")
    assert reply.text.startswith(f"{copy.RESTART_ENDED_PRIVATE}\n\nYou are in normal mode.")
    assert (await say(restarted, "/mode")).text.startswith("You are in normal mode.")  # said once


async def test_start_up_closes_only_the_segments_of_the_platforms_it_serves(make_companion, stores, provider, clock):
    companion = await make_companion(allowed_accounts=frozenset({"telegram:7"}))
    await say(companion, f"/private {PASSPHRASE}", platform="telegram", chat="7", user="7")
    await say(companion, f"/private {PASSPHRASE}")
    # `companion chat` starts beside a running gateway: the Telegram interval stays open.
    config = dataclasses.replace(companion.config, platforms=frozenset({"terminal"}))
    chat = build_companion(stores, provider, config, clock=clock)
    await chat.start()
    telegram = await conversation_of(chat, "telegram", "7")
    terminal = await conversation_of(chat)
    assert (await chat.valve.settle(telegram)).is_private
    assert not (await chat.valve.settle(terminal)).is_private


@pytest.mark.engines
async def test_crash_open_interval_is_closed_at_the_end_of_the_stored_record(companion, stores, provider, clock):
    await say(companion, f"/private {PASSPHRASE}")
    clock.advance(10)
    await say(companion, "a private line")
    last_private_write = clock.now()
    clock.advance(3600)  # the process was dead for an hour
    restarted = build_companion(stores, provider, companion.config, clock=clock)
    await restarted.start()
    (segment,) = await segments_of(stores, (await conversation_of(restarted)).id)
    assert segment.ended_at == last_private_write and segment.end_reason == "restart"


@pytest.mark.engines
async def test_content_after_a_restart_stays_outside_the_crash_open_interval(companion, stores, provider, clock):
    await say(companion, f"/private {PASSPHRASE}")
    await say(companion, "inside the interval")
    restarted = build_companion(stores, provider, companion.config, clock=clock)
    await restarted.start()
    await say(restarted, "after the restart")
    rows = await all_rows(
        stores, "SELECT text, mode, segment_id FROM messages WHERE kind = 'chat' AND role = 'user' ORDER BY id"
    )
    rows = [(engines.opened(stores, seg, "messages.text", text), mode) for text, mode, seg in rows]
    assert rows == [("inside the interval", "private"), ("after the restart", "normal")]
    assert "inside the interval" not in request_text(provider.last_reply_request())


def with_modes(stores, modes):
    """The same stores, but with `modes` for the mode state (every consumer of it gets it)."""
    return dataclasses.replace(stores, modes=modes)


class FailingModeStore:
    """A mode store whose mode state cannot be read (everything else works)."""

    def __init__(self, stores, *, hang: bool = False, fail_close: bool = False) -> None:
        self._store = stores
        self._hang = hang
        self._fail_close = fail_close

    def __getattr__(self, name):
        return getattr(self._store, name)

    async def open_segment_of(self, conversation_id):
        if self._hang:
            await asyncio.sleep(3600)
        raise OSError("disk I/O error")

    async def close_open_segments(self, *args):
        if self._fail_close:
            raise OSError("disk I/O error")
        return await self._store.close_open_segments(*args)

    async def close_segment(self, *args):
        if self._fail_close:
            raise OSError("disk I/O error")
        return await self._store.close_segment(*args)


async def test_a_mode_read_error_lands_in_normal_mode_and_the_message_is_not_used(companion, stores, provider, clock):
    await say(companion, f"/private {PASSPHRASE}")
    broken = build_companion(
        with_modes(stores, FailingModeStore(stores.modes)), provider, companion.config, clock=clock
    )
    state = await broken.valve.settle(await conversation_of(companion))
    assert state.mode.value == "normal" and state.segment_id is None and state.unreadable
    requests = len(provider.requests)
    reply = await say(broken, "MODE-UNREADABLE-CANARY typed while the mode could not be read")
    # It may have been meant for the open private interval: stored nowhere, shown to no model.
    assert reply.text == copy.MODE_UNREADABLE
    assert len(provider.requests) == requests
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE text LIKE '%MODE-UNREADABLE-CANARY%'") == [(0,)]
    assert await all_rows(stores, "SELECT count(*) FROM recall_fts WHERE recall_fts MATCH 'CANARY'") == [(0,)]


async def test_a_mode_read_timeout_lands_in_normal_mode(companion, stores, provider, clock):
    await say(companion, f"/private {PASSPHRASE}")
    hanging = build_companion(
        with_modes(stores, FailingModeStore(stores.modes, hang=True)), provider, companion.config, clock=clock
    )
    hanging.valve._read_timeout = 0.05
    state = await hanging.valve.settle(await conversation_of(companion))
    assert state.mode.value == "normal" and state.segment_id is None


async def test_an_unknown_mode_state_value_lands_in_normal_mode(companion, stores):
    await say(companion, f"/private {PASSPHRASE}")
    await engines.rows(stores, "UPDATE segments SET expires_at = 'tomorrow-ish'")
    assert await mode_of(companion) == "normal"


async def test_without_a_configured_passphrase_private_mode_is_unavailable(make_companion):
    companion = await make_companion(passphrase_hash=None)
    reply = await say(companion, "/private anything")
    assert "Private mode is unavailable" in reply.text and "COMPANION_PRIVATE_PASSPHRASE_HASH" in reply.text
    assert reply.delete_inbound
    assert await mode_of(companion) == "normal"


async def test_an_invalid_configured_hash_makes_private_mode_unavailable(make_companion):
    companion = await make_companion(passphrase_hash="md5$deadbeef")
    reply = await say(companion, f"/private {PASSPHRASE}")
    assert "Private mode is unavailable" in reply.text
    assert await mode_of(companion) == "normal"


async def test_a_wrong_passphrase_is_refused_and_changes_nothing(companion, stores):
    reply = await say(companion, "/private not-it")
    assert "not right" in reply.text and "4 more wrong tries" in reply.text and reply.delete_inbound
    assert await mode_of(companion) == "normal"
    assert await all_rows(stores, "SELECT count(*) FROM segments") == [(0,)]


async def test_a_bad_expiry_is_refused_before_the_passphrase_is_checked(companion, stores):
    reply = await say(companion, f"/private {PASSPHRASE} someday")
    assert "45s, 30m, 24h, 7d or never" in reply.text and "nothing changed" in reply.text
    assert "someday" not in reply.text
    assert await all_rows(stores, "SELECT count(*) FROM valve_attempts") == [(0,)]
    assert await mode_of(companion) == "normal"


async def test_five_wrong_passphrases_lock_entry_for_fifteen_minutes(companion, clock):
    for _ in range(5):
        reply = await say(companion, "/private wrong")
        clock.advance(30)
    assert "locked" in reply.text
    reply = await say(companion, f"/private {PASSPHRASE}")  # even the right one is refused now
    assert "locked" in reply.text and await mode_of(companion) == "normal"
    clock.advance(LOCKOUT_DURATION)
    reply = await say(companion, f"/private {PASSPHRASE}")
    assert "Private mode is on" in reply.text


async def test_the_lockout_survives_a_restart(companion, stores, provider, clock):
    for _ in range(5):
        await say(companion, "/private wrong")
    restarted = build_companion(stores, provider, companion.config, clock=clock)
    await restarted.start()
    reply = await say(restarted, f"/private {PASSPHRASE}")
    assert "locked" in reply.text and await mode_of(restarted) == "normal"


@pytest.mark.engines
async def test_private_mode_is_refused_in_a_group_and_nothing_changes(make_companion, stores):
    companion = await make_companion(allowed_accounts=frozenset({"telegram:5"}))
    reply = await say(companion, f"/private {PASSPHRASE}", platform="telegram", chat="-100", user="5", direct=False)
    assert "only possible in a one-to-one chat" in reply.text and reply.delete_inbound
    assert await all_rows(stores, "SELECT count(*) FROM segments") == [(0,)]
    assert await all_rows(stores, "SELECT count(*) FROM valve_attempts") == [(0,)]


@pytest.mark.engines
@pytest.mark.sqlite_only("reads the database's files; PostgreSQL's data directory is test_postgres_shredding.py's")
async def test_the_passphrase_is_never_stored(companion, stores):
    await say(companion, "/private a-wrong-guess-phrase")
    await say(companion, f"/private {PASSPHRASE} 1h")
    await stores.database.aclose()
    for path in engines.sqlite_file(stores).parent.iterdir():
        raw = path.read_bytes()
        assert PASSPHRASE.encode() not in raw and b"a-wrong-guess-phrase" not in raw, path.name
    await stores.database.start()
    assert await all_rows(stores, "SELECT text FROM messages") == [("/private [redacted]",)] * 2


async def test_the_passphrase_is_never_logged(companion, caplog):
    caplog.set_level(logging.DEBUG)
    await say(companion, "/private a-wrong-guess-phrase")
    await say(companion, f"/private {PASSPHRASE}")
    assert PASSPHRASE not in caplog.text and "a-wrong-guess-phrase" not in caplog.text
    assert caplog.records  # the turns were logged, by ids and sizes


async def test_the_passphrase_never_reaches_the_provider(companion, provider):
    await say(companion, "before")
    await say(companion, f"/private {PASSPHRASE}")
    await say(companion, "inside")
    await say(companion, "/normal")
    await say(companion, "after")
    assert all(PASSPHRASE not in request_text(r) for r in provider.requests)


async def test_leaving_needs_no_verification_and_returns_the_constant_transition_line(companion, provider):
    await say(companion, f"/private {PASSPHRASE}")
    await say(companion, "something private")
    requests = len(provider.requests)
    reply = await say(companion, "/normal")
    assert reply.text == copy.TRANSITION_FALLBACK
    assert len(provider.requests) == requests  # by default no model call at all
    assert await mode_of(companion) == "normal"


@pytest.mark.engines
async def test_a_generated_transition_line_comes_from_a_constant_input_without_private_content(
    make_companion, provider
):
    companion = await make_companion(transition="generated")
    await say(companion, f"/private {PASSPHRASE}")
    await say(companion, "something private")
    reply = await say(companion, "/normal")
    assert reply.text.startswith("reply")  # the provider wrote it
    transition = provider.requests[-1]
    assert transition.purpose == "transition"
    assert transition.messages[0].content == copy.TRANSITION_INSTRUCTION
    assert "something private" not in request_text(transition)
    assert await mode_of(companion) == "normal"


async def test_the_transition_input_is_the_same_constant_every_time(make_companion, provider):
    companion = await make_companion(transition="generated")
    texts = []
    for word in ("alpha", "bravo"):
        await say(companion, f"/private {PASSPHRASE}")
        await say(companion, f"secret {word}")
        await say(companion, "/normal")
        texts.append(request_text(provider.requests[-1]))
    assert texts[0] == texts[1]


async def test_the_transition_line_falls_back_to_a_constant_when_the_provider_fails(make_companion, provider):
    companion = await make_companion(transition="generated")
    await say(companion, f"/private {PASSPHRASE}")
    provider.fail_all = True
    reply = await say(companion, "/normal")
    assert reply.text == copy.TRANSITION_FALLBACK
    assert await mode_of(companion) == "normal"


async def test_normal_always_works_even_when_storage_misbehaves(companion, stores, provider, clock):
    await say(companion, f"/private {PASSPHRASE}")
    broken = build_companion(
        with_modes(stores, FailingModeStore(stores.modes, fail_close=True)), provider, companion.config, clock=clock
    )
    reply = await say(broken, "/normal")
    assert reply.text  # a transition line, not an error
    conversation = await conversation_of(broken)
    assert (await broken.valve.settle(conversation)).mode.value == "normal"


@pytest.mark.engines
async def test_idle_timeout_returns_the_conversation_to_normal(make_companion, clock, stores):
    companion = await make_companion(private_idle_seconds=600)
    await say(companion, f"/private {PASSPHRASE} 7d")
    clock.advance(601)
    reply = await say(companion, "are you there?")
    assert reply.text.startswith("Private mode ended after 10 minutes without messages")
    assert (await all_rows(stores, "SELECT end_reason FROM segments")) == [("idle",)]
    assert (await all_rows(stores, "SELECT mode FROM messages ORDER BY id DESC LIMIT 1")) == [("normal",)]


@pytest.mark.engines
async def test_private_activity_extends_the_idle_timeout(make_companion, clock, stores):
    companion = await make_companion(private_idle_seconds=600)
    await say(companion, f"/private {PASSPHRASE} 7d")
    for _ in range(3):  # 20 minutes in all, never 10 without a message
        clock.advance(400)
        reply = await say(companion, "still here")
        assert not reply.text.startswith("Private mode ended"), reply.text
    assert await mode_of(companion) == "private"
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE mode = 'private' AND role = 'user'") == [(3,)]


@pytest.mark.engines
async def test_expiry_returns_the_conversation_to_normal(make_companion, clock):
    companion = await make_companion(private_idle_seconds=None)
    await say(companion, f"/private {PASSPHRASE} 45s")
    clock.advance(46)
    reply = await say(companion, "still private?")
    assert "its time ran out" in reply.text
    assert await mode_of(companion) == "normal"


@pytest.mark.engines
async def test_nothing_automatic_ever_enters_private_mode(make_companion, clock, stores):
    companion = await make_companion(private_idle_seconds=60)
    await say(companion, f"/private {PASSPHRASE} 1h")
    clock.advance(61)
    await say(companion, "hello")  # idle ended it
    await companion.sweep()
    await companion.start()
    for _ in range(3):
        await say(companion, "more talk")
        clock.advance(3600)
    assert await mode_of(companion) == "normal"
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE mode = 'private'") == [(0,)]


async def test_mode_tells_the_mode_and_when_private_mode_ends(make_companion, clock):
    companion = await make_companion(private_idle_seconds=None, timezone="UTC")
    await say(companion, f"/private {PASSPHRASE} 2h")
    reply = await say(companion, "/mode")
    assert reply.text.startswith("You are in private mode. It ends at ")
    assert copy.PRIVATE_MODE_MEANS in reply.text


async def test_help_and_mode_describe_the_modes_in_the_same_words(companion):
    help_text = (await say(companion, "/help")).text
    assert copy.NORMAL_MODE_MEANS in help_text and copy.PRIVATE_MODE_MEANS in help_text
    assert copy.NORMAL_MODE_MEANS in (await say(companion, "/mode")).text
    assert "incognito, not a blank slate" in help_text  # what private mode is, before anyone enters it


@pytest.mark.engines
async def test_a_group_conversation_drops_an_open_segment_toward_normal(companion, stores, clock):
    from core.values.model import ConversationKey

    conversation = await stores.timeline.ensure_conversation(
        ConversationKey("telegram", "-5"), "group", None, clock.now()
    )
    await stores.modes.open_segment(conversation.id, clock.now(), None)  # should never exist; automation tightens
    assert (await companion.valve.settle(conversation)).mode.value == "normal"
    assert (await all_rows(stores, "SELECT end_reason FROM segments")) == [("group",)]


@pytest.mark.engines
async def test_a_mistyped_private_command_is_neither_stored_nor_sent_and_is_deleted(companion, stores, provider):
    reply = await say(companion, "/privte my-passphrase")
    assert "mistyped /private" in reply.text and reply.delete_inbound
    assert "privte" not in reply.text and "my-passphrase" not in reply.text
    assert await all_rows(stores, "SELECT count(*) FROM messages") == [(0,)]
    assert provider.requests == []
    other = await say(companion, "/shrug")
    assert other.text.startswith("I don't know /shrug") and not other.delete_inbound


async def test_a_refused_account_is_logged_once_at_warning_with_the_id_the_owner_must_allow(
    make_companion, stores, caplog
):
    companion = await make_companion(allowed_accounts=frozenset({"telegram:5"}))
    caplog.set_level(logging.DEBUG)
    for text in ("hello", "anyone there?"):
        await say(companion, text, platform="telegram", chat="123456789", user="123456789")
    refusals = [r for r in caplog.records if "refused telegram:" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in refusals] == [
        (logging.WARNING, "refused telegram:123456789 (add it to COMPANION_ALLOWED_USERS)")
    ]
    assert "hello" not in caplog.text and "anyone there" not in caplog.text
    assert await all_rows(stores, "SELECT count(*) FROM messages") == [(0,)]


async def test_a_generated_transition_line_that_runs_on_is_replaced_by_the_constant(make_companion, provider):
    from core.values.model import Completion

    companion = await make_companion(transition="generated")
    await say(companion, f"/private {PASSPHRASE}")
    provider.script = [Completion("I'm back, but no longer on the moon. " * 30)]
    assert (await say(companion, "/normal")).text == copy.TRANSITION_FALLBACK


async def test_help_says_which_transition_line_is_in_effect(make_companion):
    constant = await make_companion()
    assert copy.TRANSITION_CONSTANT_NOTE in (await say(constant, "/help")).text
    generated = await make_companion(transition="generated")
    assert copy.TRANSITION_GENERATED_NOTE in (await say(generated, "/help", chat="other")).text


async def test_a_group_message_with_a_stray_open_segment_is_stored_and_answered_in_normal_mode(companion, stores):
    await say(companion, "hello all", chat="group-1", direct=False)
    conversation = await conversation_of(companion, chat="group-1")
    await stores.modes.open_segment(conversation.id, 0.0, None)  # should never exist: private mode is refused in groups
    reply = await say(companion, "GROUP-CANARY where are we?", chat="group-1", direct=False)
    assert reply.text and not reply.text.startswith("Private mode")
    assert await all_rows(stores, "SELECT mode FROM messages WHERE text LIKE '%GROUP-CANARY%'") == [("normal",)]
    assert await all_rows(stores, "SELECT end_reason FROM segments") == [("group",)]


async def test_a_segment_with_a_malformed_state_lands_in_normal_mode(companion, stores, clock):
    await say(companion, "hello")
    conversation = await conversation_of(companion)
    await stores.modes.open_segment(conversation.id, clock.now(), float("inf"))  # not a time: malformed
    await say(companion, "MALFORMED-CANARY still normal?")
    assert await mode_of(companion) == "normal"
    assert await all_rows(stores, "SELECT mode FROM messages WHERE text LIKE 'MALFORMED-CANARY%'") == [("normal",)]
    assert await all_rows(stores, "SELECT end_reason FROM segments") == [("malformed",)]


@pytest.mark.engines
async def test_an_expired_interval_is_deleted_as_soon_as_a_command_notices_it(companion, stores, clock):
    await say(companion, f"/private {PASSPHRASE} 45s")
    await say(companion, "EXPIRED-CANARY")
    clock.advance(46)
    reply = await say(companion, "/mode")  # a command, not a chat turn, and no sweep
    assert reply.text.startswith("Private mode ended: its time ran out")
    assert await all_rows(stores, "SELECT count(*) FROM segments") == [(0,)]
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE text = 'EXPIRED-CANARY'") == [(0,)]


class ExitFailingStore(FailingModeStore):
    """A mode store that reads the mode fine but cannot close a segment (until `_fail_close` is cleared)."""

    async def open_segment_of(self, conversation_id):
        return await self._store.open_segment_of(conversation_id)


async def test_when_the_exit_cannot_be_written_the_next_message_is_still_normal(companion, stores, provider, clock):
    await say(companion, f"/private {PASSPHRASE}")
    broken = build_companion(
        with_modes(stores, ExitFailingStore(stores.modes, fail_close=True)), provider, companion.config, clock=clock
    )
    await say(broken, "/normal")
    # While the exit is unwritten, the store's lasting-write guard still sees the open segment and
    # refuses the normal turn's analytics run: the turn fails safe. What matters here is where the
    # message went.
    with contextlib.suppress(PrivateWriteRefused):
        await say(broken, "EXIT-CANARY said after /normal")
    assert await all_rows(stores, "SELECT mode FROM messages WHERE text LIKE 'EXIT-CANARY%'") == [("normal",)]
    assert await all_rows(stores, "SELECT count(*) FROM segments WHERE ended_at IS NULL") == [(1,)]  # still unwritten


async def test_a_failed_exit_is_held_in_normal_mode_and_written_once_the_store_recovers(companion, stores, clock):
    await say(companion, f"/private {PASSPHRASE}")
    conversation = await conversation_of(companion)
    failing = ExitFailingStore(stores.modes, fail_close=True)
    from core.privacy.valve import ModeValve

    valve = ModeValve(failing, stores.passphrase_attempts, clock, passphrase_hash=companion.config.passphrase_hash)
    assert await valve.leave(conversation) is True
    assert (await valve.settle(conversation)).is_private is False
    failing._fail_close = False
    assert (await valve.settle(conversation)).is_private is False
    assert await all_rows(stores, "SELECT end_reason FROM segments") == [("user",)]
