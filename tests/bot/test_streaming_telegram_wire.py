"""Replies shown while written on Telegram, through `companion run` (a real subprocess) with the
defaults as shipped (bursts 1.5 s, one edit a second), a fake model that streams at a set token rate
and the fake Bot API (issue 24): a kill mid-stream leaves the message to be edited into the one final
answer after the restart; a stop lets the stream finish and sends it once; a message sent while an
answer streams is answered in a turn of its own; a private stream reaches no mirror, no normal
request and no byte of the database once its interval is gone; streaming turned off sends whole."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.privacy.secrets import hash_passphrase
from core.values import copy
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.proc import companion_env
from tests.helpers.running import Running
from tests.helpers.wire_platforms import rows, shipped

pytestmark = pytest.mark.wire

USER = 111
MIRROR_CHAT = -4343  # a Telegram group a DM is mirrored to
TOKEN_SECONDS = 0.1  # ten words a second: a 60-word answer streams for six seconds
CANARY = "CANARY-41b7e0"
PRIVATE_MARKER = "This conversation is in private mode"  # in the system prompt of every private request


def story(words: int, tag: str = "word") -> str:
    return " ".join(f"{tag}{n}" for n in range(words)) + "."


@pytest.fixture
def servers() -> Iterator[tuple[FakeTelegramServer, FakeOpenAIServer]]:
    with FakeTelegramServer.run_in_thread() as telegram, FakeOpenAIServer.run_in_thread() as model:
        model.token_seconds = TOKEN_SECONDS
        yield telegram, model


def stream_env(tmp_path: Path, telegram: FakeTelegramServer, model: FakeOpenAIServer, **extra: str) -> dict[str, str]:
    settings = {
        "COMPANION_TELEGRAM_TOKEN": telegram.token,
        "COMPANION_TELEGRAM_BASE_URL": telegram.base_url,
        "COMPANION_LLM_BASE_URL": model.base_url,
        "COMPANION_ALLOWED_USERS": f"telegram:{USER}",
        "COMPANION_PRIVATE_PASSPHRASE_HASH": hash_passphrase("sesame"),
        "COMPANION_LOG_LEVEL": "INFO",
        # companion_env shortens the burst window for the other wire tests; streaming meets bursts
        # here as shipped. COMPANION_STREAM_EDIT_SECONDS is left as shipped (1.0) unless a test says.
        "COMPANION_BURST_SECONDS": shipped("burst_seconds"),
    }
    return companion_env(tmp_path, **{**settings, **extra})


def said_last(body: dict) -> str:
    return [m for m in body["messages"] if m["role"] == "user"][-1]["content"]


def posts_to(telegram: FakeTelegramServer, chat: int) -> list[dict]:
    return [p for p in telegram.calls_of("sendMessage") if int(p["chat_id"]) == chat]


def streaming(telegram: FakeTelegramServer) -> bool:
    """A reply's first piece is out and has been edited since: the model is still writing it."""
    return bool(telegram.edits_of(USER))


def unsent(db: Path) -> bool:
    """A delivery is still being shown while written, or waits to be sent."""
    return rows(db, "SELECT count(*) FROM deliveries WHERE status IN ('streaming', 'pending')") != [(0,)]


def reply_sent(db: Path) -> bool:
    return rows(db, "SELECT count(*) FROM deliveries WHERE kind = 'reply' AND status = 'sent'") != [(0,)]


def ask_for_a_story(gateway: Running, telegram: FakeTelegramServer) -> None:
    """Ask for the long answer and wait until it is being shown while written."""
    telegram.send_text(USER, USER, "tell me a long story")
    gateway.wait_for(lambda: streaming(telegram), "the answer shown while written")


def a_start_and_a_stop(env: dict[str, str]) -> None:
    """One more start, stopped as soon as it runs (what it finds left to do, it does)."""
    with Running(env) as gateway:
        gateway.wait_running()
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr


def test_a_kill_mid_stream_leaves_one_message_that_the_restart_edits_into_the_one_final_answer(
    tmp_path: Path, servers: tuple[FakeTelegramServer, FakeOpenAIServer]
) -> None:
    telegram, model = servers
    first, after = story(60), "The whole answer, written again after the restart."
    model.responder = lambda body: first if len(model.requests) == 1 else after
    env = stream_env(tmp_path, telegram, model)
    db = tmp_path / "companion.db"
    with Running(env) as gateway:
        gateway.wait_running()
        ask_for_a_story(gateway, telegram)
        code, _ = gateway.end(signal.SIGKILL)
    assert code == -signal.SIGKILL
    [shown] = telegram.sent
    assert first.startswith(shown.text) and shown.text != first  # a part of the answer, shown
    assert rows(db, "SELECT status, streamed_ids FROM deliveries") == [("streaming", str(shown.message_id))]

    with Running(env) as gateway:
        gateway.wait_running()
        gateway.wait_for(lambda: reply_sent(db), "the cut-off turn answered")
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr
    # One message: the one shown before the kill, now the answer; nothing posted next to it.
    assert telegram.texts_to(USER) == [after]
    assert len(posts_to(telegram, USER)) == 1
    assert telegram.edits_of(USER)[-1].message_id == shown.message_id
    assert rows(db, "SELECT kind, status FROM deliveries") == [("reply", "sent")]
    assert rows(db, "SELECT count(*) FROM messages WHERE role = 'assistant'") == [(1,)]
    assert len(model.requests) == 2  # the kill's turn, answered once by the restart

    a_start_and_a_stop(env)  # a third start finds nothing left to do
    assert telegram.texts_to(USER) == [after] and len(posts_to(telegram, USER)) == 1
    assert len(model.requests) == 2


def test_a_stop_mid_stream_lets_the_answer_finish_within_the_grace_and_sends_it_once(
    tmp_path: Path, servers: tuple[FakeTelegramServer, FakeOpenAIServer]
) -> None:
    telegram, model = servers
    answer = story(60)
    model.responder = lambda body: answer
    env = stream_env(tmp_path, telegram, model)
    db = tmp_path / "companion.db"
    with Running(env) as gateway:
        gateway.wait_running()
        ask_for_a_story(gateway, telegram)
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr
    assert telegram.texts_to(USER) == [answer]
    assert len(posts_to(telegram, USER)) == 1
    assert rows(db, "SELECT kind, status FROM deliveries") == [("reply", "sent")]
    assert rows(db, "SELECT count(*) FROM messages WHERE turn = 'open'") == [(0,)]
    # Typing showed until the first piece and stopped then (renewed every 4 s, it would otherwise
    # have shown again during the six seconds of the stream).
    methods = [name for name, params in telegram.calls if int(params.get("chat_id") or 0) == USER]
    first_post = methods.index("sendMessage")
    assert "sendChatAction" in methods[:first_post]
    assert "sendChatAction" not in methods[first_post:]

    a_start_and_a_stop(env)
    assert telegram.texts_to(USER) == [answer] and len(posts_to(telegram, USER)) == 1
    assert len(model.requests) == 1


def test_a_message_sent_while_an_answer_streams_is_answered_in_the_next_turn_never_in_the_text_shown(
    tmp_path: Path, servers: tuple[FakeTelegramServer, FakeOpenAIServer]
) -> None:
    telegram, model = servers
    long_answer, second = story(60), "And about what you added: noted."
    model.responder = lambda body: long_answer if said_last(body) == "tell me a long story" else second
    env = stream_env(tmp_path, telegram, model)
    db = tmp_path / "companion.db"
    with Running(env) as gateway:
        gateway.wait_running()
        ask_for_a_story(gateway, telegram)
        telegram.send_text(USER, USER, "oh, and one more thing")
        gateway.wait_for(lambda: len(telegram.texts_to(USER)) == 2, "the second answer")
        gateway.wait_for(
            lambda: rows(db, "SELECT count(*) FROM deliveries WHERE status = 'sent'") == [(2,)], "both sent"
        )
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr
    first, then = telegram.sent
    assert (first.text, then.text) == (long_answer, second)
    # The first message only ever grew towards its own answer: nothing of the second turn in it.
    assert all(
        long_answer.startswith(edit.text) for edit in telegram.edits_of(USER) if edit.message_id == first.message_id
    )
    # The second turn read the whole first exchange.
    later = model.requests[1]["messages"]
    assert {"role": "assistant", "content": long_answer} in [{k: m[k] for k in ("role", "content")} for m in later]
    assert said_last(model.requests[1]) == "oh, and one more thing"
    assert len(model.requests) == 2


@pytest.mark.parametrize("ending", ["forget", "expiry"])
def test_a_private_stream_reaches_no_mirror_no_normal_request_and_no_database_byte_once_its_interval_is_gone(
    tmp_path: Path, servers: tuple[FakeTelegramServer, FakeOpenAIServer], ending: str
) -> None:
    telegram, model = servers

    def answer(body: dict) -> str:
        said = said_last(body)
        if "secret" in said:
            return f"Here it is: {CANARY} " + story(30, "hush")
        return f"answer to {said}"

    model.responder = answer
    env = stream_env(tmp_path, telegram, model)
    db = tmp_path / "companion.db"

    def say(text: str, gateway: Running) -> str:
        """Send `text`; the text of its reply once it is final (sent whole, or its stream finished)."""
        before = len(posts_to(telegram, USER))
        telegram.send_text(USER, USER, text)
        gateway.wait_for(lambda: len(posts_to(telegram, USER)) > before, f"an answer to {text.split()[0]}")
        gateway.wait_for(lambda: not unsent(db), f"the answer to {text.split()[0]} final")
        return telegram.texts_to(USER)[-1]

    with Running(env) as gateway:
        gateway.wait_running()
        assert say(f"/mirror telegram:{MIRROR_CHAT}", gateway).startswith("Mirror 1 is on")
        expiry = " 20s" if ending == "expiry" else ""
        began = time.monotonic()
        assert say(f"/private sesame{expiry}", gateway).startswith("Private mode is on")
        secret = say("tell me the secret", gateway)
        assert secret.startswith(f"Here it is: {CANARY}")
        streamed = [e.text for e in telegram.edits_of(USER)[:-1]]  # shown while written, before the final edit
        assert any(CANARY in text for text in streamed)
        say("and then?", gateway)
        assert CANARY in model.raw_requests[-1].decode()  # private mode reads its interval: the check can see it
        if ending == "forget":
            assert say("/forget private", gateway).startswith("Private mode is off")
        else:
            time.sleep(max(0.0, began + 21 - time.monotonic()))  # the interval (20 s from /private) expires
            assert "You are in normal mode." in say("/mode", gateway)
        normal_from = len(model.requests)
        assert say("hello again", gateway) == "answer to hello again"
        gateway.wait_for(lambda: len(telegram.texts_to(MIRROR_CHAT)) >= 2, "the normal exchange mirrored")
        on_disk = b"".join(path.read_bytes() for path in tmp_path.glob("companion.db*"))
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr
    # The mirror chat got the binding's hello and the normal exchange; no request to it held the canary.
    assert telegram.texts_to(MIRROR_CHAT) == [
        copy.MIRROR_HELLO.format(source="telegram DM"),
        "[telegram DM] you: hello again\ncompanion: answer to hello again",
    ]
    to_mirror = [p for name, p in telegram.calls if int(p.get("chat_id") or 0) == MIRROR_CHAT]
    assert to_mirror and all(CANARY not in str(p) for p in to_mirror)
    # No normal-mode request carried it (every request after the interval, and every one outside it).
    normal = [raw for raw in model.raw_requests if PRIVATE_MARKER.encode() not in raw]
    assert normal and all(CANARY.encode() not in raw for raw in normal)
    assert all(CANARY.encode() not in raw for raw in model.raw_requests[normal_from:])
    # No byte of the database (its WAL included) holds it, while running and after the stop.
    assert CANARY.encode() not in on_disk
    assert CANARY.encode() not in b"".join(path.read_bytes() for path in tmp_path.glob("companion.db*"))
    assert CANARY not in stderr


def test_streaming_turned_off_sends_each_reply_whole(
    tmp_path: Path, servers: tuple[FakeTelegramServer, FakeOpenAIServer]
) -> None:
    telegram, model = servers
    answer = story(40)
    model.responder = lambda body: answer
    # Off is the setting under test: the same slow model as above, and no reply shown while written.
    env = stream_env(tmp_path, telegram, model, COMPANION_STREAM_EDIT_SECONDS="off")
    db = tmp_path / "companion.db"
    with Running(env) as gateway:
        gateway.wait_running()
        telegram.send_text(USER, USER, "tell me a story")
        gateway.wait_for(lambda: reply_sent(db), "the reply")
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr
    assert telegram.texts_to(USER) == [answer]
    assert [p["text"] for p in posts_to(telegram, USER)] == [answer]
    assert telegram.calls_of("editMessageText") == []
    assert model.requests[0].get("stream") is not True  # the model was not even asked to stream
