"""The end of an interval ends what it shows (issue 29, points 4 and 8), through `companion run` (a real
subprocess) with the defaults as shipped (bursts 1.5 s, one edit a second), the fake platforms and a
fake model writing ten words a second.

A private answer still streaming when its interval expires: from the end on, nothing more of it is
posted or edited, on Telegram, on Discord and in the web chat, but one edit of what it showed into
the constant line; the web chat's page gets normal mode's history at the end. A private reply the
platform refused (502) and that waits to be sent is never sent after /normal, /forget private or its
expiry. A kill between the end and the constant edit still gives exactly one constant edit at the
next start. The fake servers log when each post and edit arrived; the interval's end is its expiry
in the database (or the moment /normal closed it). Each test sets the expiry sweep to every two
seconds where the interval's deletion is looked at: as shipped it runs once a minute (the promise in
PRIVACY.md), which only makes these tests slower."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx
import pytest

from core.privacy.secrets import hash_passphrase
from core.values import copy
from tests.bot.test_discord_streaming_wire import db_bytes
from tests.bot.test_discord_streaming_wire import stream_env as discord_stream_env
from tests.bot.test_gateway_discord import FRIEND
from tests.bot.test_streaming_telegram_wire import TOKEN_SECONDS, USER, story, stream_env
from tests.conftest import PASSPHRASE
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.ports import free_port
from tests.helpers.proc import companion_env, run_companion
from tests.helpers.running import Running
from tests.helpers.web import csrf_of, sign_in
from tests.helpers.web_pages import EventStream
from tests.helpers.wire_platforms import rows, shipped

pytestmark = pytest.mark.wire

CANARY = "ENDCANARY"
SECRET_STORY = f"{CANARY} " + story(150, "hush")  # fifteen seconds of answer at ten words a second
SWEEP = {"COMPANION_EXPIRY_SWEEP_SECONDS": "2"}  # see the module's docstring
# A post or edit the companion sent before the end may arrive a moment after it on a loaded machine;
# one edit a second means at most one such request.
ARRIVAL = 1.0
CUT_OFF = "its interval ended; not sent"  # the outbox's log line (ids only)


def end_of_interval(db: Path) -> float:
    """The open interval's expiry, on this process's time.monotonic() clock (the fakes' clock)."""
    [(expires_at,)] = rows(db, "SELECT expires_at FROM segments WHERE ended_at IS NULL")
    return expires_at - time.time() + time.monotonic()


def telegram_after(telegram: FakeTelegramServer, moment: float) -> list[str]:
    """Every text posted or edited into the person's chat from `moment` on (its arrival)."""
    posted = [m.text for m in telegram.sent if m.chat_id == USER and m.at >= moment]
    return posted + [e.text for e in telegram.edits_of(USER) if e.at >= moment]


# --- a private answer streaming across its expiry ---------------------------------------------------------


def test_a_private_answer_streaming_across_its_expiry_on_telegram_is_never_posted_or_edited_after_it_but_once(
    tmp_path: Path, telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer]
) -> None:
    telegram, model = telegram_servers
    model.token_seconds = TOKEN_SECONDS
    model.responder = lambda body: SECRET_STORY
    env = stream_env(tmp_path, telegram, model, **SWEEP)
    db = tmp_path / "companion.db"
    with Running(env) as gateway:
        gateway.wait_running()
        telegram.send_text(USER, USER, "/private sesame 8s")
        gateway.wait_for(lambda: len(telegram.texts_to(USER)) == 1, "/private")
        end = end_of_interval(db)
        telegram.send_text(USER, USER, "tell me everything")
        gateway.wait_for(lambda: len(telegram.texts_to(USER)) == 2, "the answer shown while written")
        answer = telegram.sent[-1]
        withdrawn = lambda: telegram.message(USER, answer.message_id).text == copy.INTERVAL_ENDED_SHOWN  # noqa: E731
        gateway.wait_for(withdrawn, "the constant line")
        gateway.wait_for(lambda: rows(db, "SELECT count(*) FROM segments") == [(0,)], "the sweep")
        gateway.wait_for(lambda: unsent(db) == 0, "nothing left to send")
        telegram.send_text(USER, USER, "/mode")  # a later exchange: anything of the answer left would come first
        gateway.wait_for(lambda: len(telegram.texts_to(USER)) == 3, "the answer to /mode")
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr
    assert answer.text.startswith(CANARY) and answer.at < end  # shown while written, before the end
    # From the end on: the constant edit, once, and nothing else of the answer (but one request sent
    # before the end, arriving within ARRIVAL).
    after = telegram_after(telegram, end)
    assert after.count(copy.INTERVAL_ENDED_SHOWN) == 1
    assert len(of_the_answer(after)) <= 1 and of_the_answer(telegram_after(telegram, end + ARRIVAL)) == []
    posted = [m.text for m in telegram.sent if m.chat_id == USER and m.at >= end]
    assert len(posted) == 1 and "You are in normal mode" in posted[0]  # the answer to /mode, nothing else
    assert telegram.texts_to(USER)[1] == copy.INTERVAL_ENDED_SHOWN
    assert CANARY.encode() not in db_bytes(tmp_path)
    assert CANARY not in stderr and "hush" not in stderr


def of_the_answer(texts: list[str]) -> list[str]:
    """The texts holding a word of the private answer."""
    return [text for text in texts if CANARY in text or "hush" in text]


def unsent(db: Path) -> int:
    [(count,)] = rows(db, "SELECT count(*) FROM deliveries WHERE status IN ('pending', 'streaming')")
    return count


def test_a_private_answer_streaming_across_its_expiry_on_discord_is_never_posted_or_edited_after_it_but_once(
    tmp_path: Path, discord_servers: tuple[FakeDiscordServer, FakeOpenAIServer], passphrase_hash: str
) -> None:
    discord_server, model = discord_servers
    call = discord_server.call
    env = discord_stream_env(tmp_path, discord_server, model, passphrase_hash) | SWEEP
    dm = discord_server.dm_channel_id(FRIEND)
    db = tmp_path / "companion.db"
    with Running(env) as gateway:
        gateway.wait_running()
        call(discord_server.send_dm(FRIEND, f"/private {PASSPHRASE} 8s"))
        gateway.wait_for(lambda: len(discord_server.shown(dm)) == 1, "/private")
        end = end_of_interval(db)
        model.token_seconds = 0.1
        model.reply_text(SECRET_STORY)
        call(discord_server.send_dm(FRIEND, "tell me everything"))
        gateway.wait_for(lambda: len(discord_server.shown(dm)) == 2, "the answer shown while written")
        answer = [m for m in discord_server.sent if m.channel_id == dm][-1]
        gateway.wait_for(lambda: discord_server.shown(dm)[-1] == copy.INTERVAL_ENDED_SHOWN, "the constant line")
        gateway.wait_for(lambda: rows(db, "SELECT count(*) FROM segments") == [(0,)], "the sweep")
        gateway.wait_for(lambda: unsent(db) == 0, "nothing left to send")
        model.reply_text("Noted.")
        call(discord_server.send_dm(FRIEND, "/mode"))
        gateway.wait_for(lambda: len(discord_server.shown(dm)) == 3, "the answer to /mode")
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr
    assert answer.content.startswith(CANARY) and answer.at < end  # shown while written, before the end
    posted = [m.content for m in discord_server.sent if m.channel_id == dm and m.at >= end]
    edited = [e.content for e in discord_server.edits if e.channel_id == dm and e.at >= end]
    late = [e.content for e in discord_server.edits if e.channel_id == dm and e.at >= end + ARRIVAL]
    # From the end on: the constant edit, once, and nothing else of the answer (but one request sent
    # before the end, arriving within ARRIVAL); nothing posted but the answer to /mode.
    assert edited.count(copy.INTERVAL_ENDED_SHOWN) == 1
    assert len(of_the_answer(edited)) <= 1 and of_the_answer(late) == []
    assert len(posted) == 1 and "normal mode" in posted[0]
    assert discord_server.shown(dm)[1] == copy.INTERVAL_ENDED_SHOWN
    assert CANARY.encode() not in db_bytes(tmp_path)
    assert CANARY not in stderr and "hush" not in stderr


async def test_a_private_answer_streaming_across_its_expiry_in_the_web_chat_ends_at_the_end_and_the_page_is_told(
    tmp_path: Path,
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with FakeOpenAIServer.run_in_thread() as model:
        model.responder = lambda body: SECRET_STORY if "everything" in str(body["messages"][-1]) else "Noted."
        model.token_seconds = 0.1
        env = companion_env(
            tmp_path,
            COMPANION_HTTP_PORT=str(port),
            COMPANION_LLM_BASE_URL=model.base_url,
            COMPANION_PRIVATE_PASSPHRASE_HASH=hash_passphrase("sesame"),
            COMPANION_LOG_LEVEL="INFO",
            COMPANION_BURST_SECONDS=shipped("burst_seconds"),  # as shipped (companion_env shortens it)
            **SWEEP,
        )
        db = tmp_path / "companion.db"
        with Running(env) as gateway:
            gateway.wait_running()
            login = run_companion(["web-login"], env)
            assert login.returncode == 0, login.stderr
            async with httpx.AsyncClient(base_url=base, timeout=30) as browser:
                assert (await sign_in(browser, login.stdout.strip().split("#", 1)[1])).status_code == 200
                headers = {"X-CSRF-Token": csrf_of((await browser.get("/")).text)}
                entered = await browser.post("/send", json={"text": "/private sesame 8s"}, headers=headers)
                assert entered.status_code == 200
                end = end_of_interval(db)
                async with EventStream(browser) as events:
                    _, history = await events.next("history", timeout=30)
                    assert history["mode"] == "private"
                    asking = browser.post("/send", json={"text": "tell me everything"}, headers=headers)
                    sending = asyncio.create_task(asking)
                    _, shown = await events.next("partial", timeout=30)
                    _, ended = await events.next("history", timeout=30)
                    await until(lambda: bool(withdrawn_frames(events)), "the withdrawn bubble")
                    assert (await sending).status_code == 200
                    await until(lambda: rows(db, "SELECT count(*) FROM segments") == [(0,)], "the sweep")
                    await until(lambda: unsent(db) == 0, "nothing left to send")
            code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr
    # The frames' times are the loop's clock: time.monotonic(), as `end`.
    assert CANARY in shown["text"]
    # Told at the end, not by its own timer: normal mode's history, the interval as its placeholder.
    assert (ended["mode"], ended["segment"]) == ("normal", None)
    assert ended["items"][-1] == {"placeholder": True} and "hush" not in str(ended)
    [withdrawn] = withdrawn_frames(events)
    assert withdrawn == {"kind": "retraction", "text": copy.INTERVAL_ENDED_SHOWN, "stream": [shown["stream"]]}
    late = [(kind, data) for at, kind, data in events.received if at >= end + ARRIVAL]
    assert [kind for kind, _ in late if kind == "partial"] == [] and "hush" not in str(late)
    assert CANARY.encode() not in db_bytes(tmp_path)
    assert CANARY not in stderr and "hush" not in stderr


def withdrawn_frames(events: EventStream) -> list[dict]:
    """The live frames of a withdrawn bubble (the answer to /private may come as a live frame too)."""
    return [data for _, kind, data in events.received if kind == "live" and data["kind"] == "retraction"]


async def until(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        await asyncio.sleep(0.05)


# --- a private reply the platform refused, waiting to be sent --------------------------------------------


@pytest.mark.parametrize("ending", ["/normal", "/forget private", "expiry"])
def test_a_private_reply_telegram_refused_is_never_sent_after_its_interval_ends(
    tmp_path: Path, telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], ending: str
) -> None:
    telegram, model = telegram_servers
    secret = f"Between us: {CANARY}."
    model.token_seconds = 0.0  # answered at once: sent whole, and refused
    model.responder = lambda body: secret if body["messages"][-1].get("content") == "how am I, really?" else "Noted."
    env = stream_env(tmp_path, telegram, model)
    db = tmp_path / "companion.db"
    with Running(env) as gateway:
        gateway.wait_running()
        telegram.send_text(USER, USER, "/private sesame 8s" if ending == "expiry" else "/private sesame")
        gateway.wait_for(lambda: len(telegram.texts_to(USER)) == 1, "/private")
        end = end_of_interval(db)
        telegram.fail_next("sendMessage", 502, times=10_000)  # Telegram refuses every send for a while
        telegram.send_text(USER, USER, "how am I, really?")
        refused = lambda: any(CANARY in str(p.get("text")) for p in telegram.calls_of("sendMessage"))  # noqa: E731
        gateway.wait_for(refused, "the private reply refused")
        if ending == "expiry":
            # Telegram is back at the end, while the adapter still retries the reply (its tries span
            # the 8 s): a try after the end would now go through.
            gateway.wait_for(lambda: time.monotonic() >= end, "the expiry")
            telegram.forget_failures("sendMessage")
            gateway.wait_for(lambda: time.monotonic() >= end + ARRIVAL, "a try sent before the end arrived")
            calls_at_end = len(telegram.calls)
            # Nothing else of the conversation happens until the send ended, cut off at the expiry (or
            # went through): a later message would end the interval itself and cancel the send.
            ended = lambda: CUT_OFF in gateway.stderr or any(CANARY in m.text for m in telegram.sent)  # noqa: E731
            gateway.wait_for(ended, "the reply's send cut off at the end")
        else:
            telegram.send_text(USER, USER, ending)
            gateway.wait_for(
                lambda: rows(db, "SELECT count(*) FROM segments WHERE ended_at IS NULL") == [(0,)], "the end"
            )
            calls_at_end = len(telegram.calls)
            telegram.forget_failures("sendMessage")  # Telegram is back
            gateway.wait_for(lambda: len(telegram.texts_to(USER)) == 2, f"the answer to {ending}")
        # A later reply of the same outbox lane: a private one still sendable would go out before it.
        telegram.send_text(USER, USER, "and now?")
        answered = lambda: telegram.texts_to(USER)[-1].endswith("Noted.")  # noqa: E731 (after a notice, if expired)
        gateway.wait_for(answered, "the next normal answer")
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr
    assert not any(CANARY in m.text for m in telegram.sent)  # never sent
    after = [p for name, p in telegram.calls[calls_at_end:] if name == "sendMessage"]
    assert after and not any(CANARY in str(p.get("text")) for p in after)  # not even tried after the end
    assert CANARY not in stderr


# --- a kill between the end and the constant edit ---------------------------------------------------------


def test_a_kill_between_the_end_of_an_interval_and_its_constant_edit_gives_exactly_one_at_the_next_start(
    tmp_path: Path, telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer]
) -> None:
    telegram, model = telegram_servers
    model.token_seconds = TOKEN_SECONDS
    answer_text = f"{CANARY} " + story(50, "hush")
    model.responder = lambda body: (
        answer_text if body["messages"][-1].get("content") == "tell me everything" else "Noted."
    )
    env = stream_env(tmp_path, telegram, model)
    db = tmp_path / "companion.db"
    with Running(env) as gateway:
        gateway.wait_running()
        telegram.send_text(USER, USER, "/private sesame")
        gateway.wait_for(lambda: len(telegram.texts_to(USER)) == 1, "/private")
        telegram.send_text(USER, USER, "tell me everything")
        gateway.wait_for(lambda: telegram.edits_of(USER), "the answer shown while written")
        answer = telegram.sent[-1]
        telegram.fail_next("editMessageText", 502, times=10_000)  # from now on Telegram refuses every edit
        gateway.wait_for(
            lambda: rows(db, "SELECT status FROM deliveries WHERE streamed_ids IS NOT NULL") == [("pending",)],
            "the final edit refused",
        )
        telegram.send_text(USER, USER, "/normal")
        gateway.wait_for(lambda: rows(db, "SELECT count(*) FROM segments WHERE ended_at IS NULL") == [(0,)], "/normal")
        ended = time.monotonic()
        tried = lambda: any(p.get("text") == copy.INTERVAL_ENDED_SHOWN for p in telegram.calls_of("editMessageText"))  # noqa: E731
        gateway.wait_for(tried, "the constant edit tried (and refused)")
        code, _ = gateway.end(signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert telegram.message(USER, answer.message_id).text != copy.INTERVAL_ENDED_SHOWN
    assert rows(db, "SELECT retracts, status, segment_id, text FROM deliveries WHERE streamed_ids IS NOT NULL") == [
        (1, "pending", None, copy.INTERVAL_ENDED_SHOWN)
    ]

    telegram.forget_failures("editMessageText")  # Telegram is back
    with Running(env) as gateway:
        gateway.wait_running()
        gateway.wait_for(
            lambda: telegram.message(USER, answer.message_id).text == copy.INTERVAL_ENDED_SHOWN, "the constant line"
        )
        gateway.wait_for(
            lambda: rows(db, "SELECT count(*) FROM deliveries WHERE retracts = 1") == [(0,)], "its row gone"
        )
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr
    with Running(env) as gateway:  # a third start finds nothing left to do
        gateway.wait_running()
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr
    edits_after = [e.text for e in telegram.edits_of(USER) if e.at >= ended]
    assert edits_after == [copy.INTERVAL_ENDED_SHOWN]  # exactly one, the constant
    posted_after = [m.text for m in telegram.sent if m.chat_id == USER and m.at >= ended]
    assert all(CANARY not in text and "hush" not in text for text in posted_after)
    # No outbox row holds a word of it (the interval itself, closed, lives on until it is forgotten).
    assert rows(db, "SELECT count(*) FROM deliveries WHERE text LIKE ?", (f"%{CANARY}%",)) == [(0,)]
