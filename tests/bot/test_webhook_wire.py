"""Telegram webhooks through `companion run` (issue 33 part A): each update stored durably before its 200, answered
once and in order, the secret refused when missing or wrong, the webhook set at the start and removed at a clean stop.

The fake Telegram records the public URL and POSTs to the gateway's HTTP service on 127.0.0.1 under the public
host name, as a reverse proxy passes it on (tests/helpers/fake_telegram.py `deliver_to`).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.ports import free_port
from tests.helpers.postgres import PostgresCluster, holding
from tests.helpers.proc import run_companion
from tests.helpers.running import Running
from tests.helpers.telegram_gateway import USER, gateway_env
from tests.helpers.wire_platforms import rows

pytestmark = pytest.mark.wire

SECRET = "wire-webhook_secret-7"
HOST = "companion.example.com"
PATH = "/telegram/hook"
URL = f"https://{HOST}{PATH}"
USERS = (USER, 112, 113)
CANARY = "okapi-webhook-canary-5521"
PASS = "sesame"  # tests/helpers/telegram_gateway.py's passphrase


def echo(body: dict[str, Any]) -> str:
    """The model's answer: the last user message's words, so a chat's replies show its order."""
    said = [m["content"] for m in body["messages"] if m.get("role") == "user" and isinstance(m.get("content"), str)]
    return f"echo: {said[-1].splitlines()[-1] if said else ''}"


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest) -> dict[str, str]:
    """The settings of the store: the SQLite file (the default), or a PostgreSQL database of the test's own."""
    if request.param == "postgres":
        return {"COMPANION_DATABASE_URL": request.getfixturevalue("postgres_url")}
    return {}


class Hooked:
    """The fake servers and the environment of a gateway taking Telegram's updates by webhook."""

    def __init__(self, tmp_path: Path, servers: tuple[FakeTelegramServer, FakeOpenAIServer], engine: dict[str, str]):
        self.telegram, self.model = servers
        self.model.responder = echo
        self.port = free_port()
        self.tmp_path = tmp_path
        self.url = engine.get("COMPANION_DATABASE_URL")
        self.env = gateway_env(
            tmp_path,
            self.telegram,
            self.model,
            COMPANION_HTTP_PORT=str(self.port),
            COMPANION_TELEGRAM_WEBHOOK_URL=URL,
            COMPANION_TELEGRAM_WEBHOOK_SECRET=SECRET,
            COMPANION_ALLOWED_USERS=",".join(f"telegram:{user}" for user in USERS),
            **engine,
        )
        self.target = f"http://127.0.0.1:{self.port}{PATH}"

    def start(self) -> Running:
        gateway = Running(self.env)
        gateway.wait_running()
        assert self.telegram.webhook is not None and self.telegram.webhook["url"] == URL
        self.telegram.deliver_to(self.target)
        return gateway

    def replies(self, chat: int) -> list[str]:
        return self.telegram.texts_to(chat)

    def inbox(self) -> list[tuple[Any, ...]]:
        """(update_id, whether a body is kept) of every inbox row."""
        query = "SELECT update_id, body IS NOT NULL FROM webhook_inbox ORDER BY update_id"
        if self.url is not None:
            return [(u, bool(kept)) for u, kept in rows(self.url, query)]
        with contextlib.closing(sqlite3.connect(self.tmp_path / "companion.db")) as db:
            return [(u, bool(kept)) for u, kept in db.execute(query).fetchall()]

    def messages(self) -> list[str]:
        query = "SELECT text FROM messages WHERE role = 'user' ORDER BY id"
        if self.url is not None:
            return [text for (text,) in rows(self.url, query)]
        with contextlib.closing(sqlite3.connect(self.tmp_path / "companion.db")) as db:
            return [text for (text,) in db.execute(query).fetchall()]

    def post(self, body: bytes, secret: str | None) -> int:
        headers = {"Host": HOST, "Content-Type": "application/json"}
        if secret is not None:
            headers["X-Telegram-Bot-Api-Secret-Token"] = secret
        return httpx.post(self.target, content=body, headers=headers).status_code


@pytest.fixture
def hooked(tmp_path: Path, telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], engine: dict[str, str]):
    return Hooked(tmp_path, telegram_servers, engine)


def routed(stderr: str, update_id: int) -> int:
    """How many times the intake handed update `update_id` to the core (its log line of ids and sizes)."""
    return sum(1 for line in stderr.splitlines() if f"telegram: update {update_id}, " in line)


def test_webhook_updates_of_several_chats_are_answered_once_and_in_order_and_a_clean_stop_removes_the_webhook(
    hooked: Hooked,
) -> None:
    telegram = hooked.telegram
    with hooked.start() as gateway:
        for n in range(3):  # each chat's next message after its reply: close together they would be one burst
            for user in USERS:
                telegram.send_text(user, user, f"message {n} of {user}")
            gateway.wait_for(lambda n=n: all(len(hooked.replies(user)) > n for user in USERS), f"replies to {n}")
        base = f"http://127.0.0.1:{hooked.port}"
        gateway.wait_for(lambda: httpx.get(f"{base}/readyz").json()["inbox"] == 0, "an empty inbox at /readyz")
        metrics = httpx.get(f"{base}/metrics").text
        code, stderr = gateway.end()
    assert code == 0, stderr
    for user in USERS:
        assert hooked.replies(user) == [f"echo: message {n} of {user}" for n in range(3)]
    assert telegram.calls_of("getUpdates") == []  # never polled while the webhook is set
    (set_webhook,) = telegram.calls_of("setWebhook")
    assert set_webhook["secret_token"] == SECRET
    assert json.loads(set_webhook["allowed_updates"]) == ["message", "edited_message", "callback_query"]
    assert telegram.calls_of("deleteWebhook") and telegram.webhook is None  # removed at the clean stop
    assert "companion_webhook_inbox_depth 0.0" in metrics
    assert all(not kept for _, kept in hooked.inbox())  # every body deleted once handled
    assert len(hooked.inbox()) == 9


# One engine: the route refuses or the inbox dedupes before any engine differs (both engines' inbox: the contract,
# tests/adapters/store/test_inbox_contract.py); keeps the suite's time down.
@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_a_delivery_without_the_secret_or_with_a_wrong_one_is_refused_and_stored_nowhere(hooked: Hooked) -> None:
    update = {
        "update_id": 424242,
        "message": {
            "message_id": 9,
            "date": 1700000000,
            "chat": {"id": USER, "type": "private", "first_name": "U"},
            "from": {"id": USER, "is_bot": False, "first_name": "U"},
            "text": f"forged {CANARY}",
        },
    }
    body = json.dumps(update).encode()
    with hooked.start() as gateway:
        statuses = [hooked.post(body, None), hooked.post(body, "wrong-secret"), hooked.post(body, SECRET[:-1])]
        metrics = httpx.get(f"http://127.0.0.1:{hooked.port}/metrics").text
        # Then an update that does carry it: answered, so the refused ones had their chance to be.
        hooked.telegram.send_text(USER, USER, "the real one")
        gateway.wait_for(lambda: len(hooked.replies(USER)) == 1, "the reply to the real one")
        code, stderr = gateway.end()
    assert code == 0, stderr
    assert statuses == [401, 403, 403]
    assert "companion_webhook_refused_total 3.0" in metrics
    assert hooked.replies(USER) == ["echo: the real one"]
    assert [u for u, _ in hooked.inbox()] != [] and 424242 not in [u for u, _ in hooked.inbox()]
    assert hooked.messages() == ["the real one"]
    assert CANARY not in stderr


# One engine: the route refuses or the inbox dedupes before any engine differs (both engines' inbox: the contract,
# tests/adapters/store/test_inbox_contract.py); keeps the suite's time down.
@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_an_update_redelivered_after_a_timeout_is_answered_once(hooked: Hooked) -> None:
    telegram = hooked.telegram
    with hooked.start() as gateway:
        telegram.time_out_next(1)  # its 200 counted as too late: Telegram delivers it again
        telegram.send_text(USER, USER, "only once")
        gateway.wait_for(lambda: len(telegram.delivered_ids()) == 1 and len(hooked.replies(USER)) == 1, "redelivered")
        # Delivered after the redelivery (one chat's updates go one at a time): its reply comes after any second one.
        telegram.send_text(USER, USER, "and then this")
        gateway.wait_for(lambda: len(hooked.replies(USER)) >= 2, "both replies")
        code, stderr = gateway.end()
    assert code == 0, stderr
    (first, *_) = [d.update_id for d in telegram.deliveries]
    assert [d.update_id for d in telegram.deliveries].count(first) == 2
    assert hooked.replies(USER) == ["echo: only once", "echo: and then this"]
    assert routed(stderr, first) == 1  # the redelivery was a no-op: not handed to the core again


def test_an_update_stored_and_answered_200_before_a_sigkill_is_answered_after_the_restart(hooked: Hooked) -> None:
    telegram = hooked.telegram
    with hooked.start() as first:
        first.end(signal.SIGKILL)  # the webhook stays set, as after a crash
    telegram.send_text(USER, USER, "while it was down")
    telegram.hold_methods.add("getMe")  # the next start's intake waits: its HTTP service takes deliveries
    with Running(hooked.env) as second:
        second.wait_for(lambda: bool(telegram.delivered_ids()), "the delivery's 200")
        code, _ = second.end(signal.SIGKILL)  # after the 200, before the intake took it
    assert code == -signal.SIGKILL
    assert hooked.inbox() == [(telegram.delivered_ids()[0], True)]  # stored durably, not handled
    assert hooked.messages() == []
    telegram.hold_methods.clear()
    with Running(hooked.env) as third:
        third.wait_for(lambda: len(hooked.replies(USER)) == 1, "the reply after the restart")
        code, stderr = third.end()
    assert code == 0, stderr
    assert hooked.replies(USER) == ["echo: while it was down"]
    assert hooked.inbox() == [(telegram.delivered_ids()[0], False)]


def test_private_words_through_the_webhook_are_not_readable_in_the_database_once_handled(
    hooked: Hooked, request: pytest.FixtureRequest
) -> None:
    telegram = hooked.telegram
    with hooked.start() as gateway:
        telegram.send_text(USER, USER, f"/private {PASS} 1h")
        gateway.wait_for(lambda: len(hooked.replies(USER)) == 1, "private mode on")
        telegram.send_text(USER, USER, f"between us: {CANARY}")
        gateway.wait_for(lambda: len(hooked.replies(USER)) == 2, "the private reply")
        gateway.wait_for(lambda: all(not kept for _, kept in hooked.inbox()), "every inbox row handled")
        code, stderr = gateway.end()
    assert code == 0, stderr
    assert hooked.replies(USER)[1] == f"echo: between us: {CANARY}"
    assert CANARY not in stderr
    if hooked.url is None:
        # SQLite keeps a private interval's words in plain text until its expiry (PRIVACY.md), but no update's
        # body: deleted with secure_delete, its JSON (a field only an update has) is nowhere in the files.
        files = [p for p in hooked.tmp_path.iterdir() if p.name.startswith("companion.db")]
        assert files and not any(b'"is_bot"' in p.read_bytes() for p in files)
        return
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    cluster.execute("CHECKPOINT")
    places = {"the data directory (pg_wal too)": cluster.data, "the key folder": hooked.tmp_path / "data" / "keys"}
    assert holding(places, {"canary": CANARY.encode()}) == set()


@pytest.mark.parametrize("engine", ["postgres"], indirect=True)
def test_an_update_the_inbox_cannot_store_is_refused_and_delivered_again(hooked: Hooked) -> None:
    telegram = hooked.telegram
    transit = hooked.tmp_path / "data" / "keys" / "transit"
    away = transit.with_name("transit.away")
    with hooked.start() as gateway:
        transit.rename(away)  # a file in its place: no transit key can be made, so nothing can be stored sealed
        transit.write_bytes(b"")
        try:
            telegram.send_text(USER, USER, "stored at the second try")
            gateway.wait_for(lambda: any(d.status == 503 for d in telegram.deliveries), "a refusal")
        finally:
            transit.unlink()
            away.rename(transit)
        gateway.wait_for(lambda: len(hooked.replies(USER)) == 1, "the reply")
        code, stderr = gateway.end()
    assert code == 0, stderr
    assert hooked.replies(USER) == ["echo: stored at the second try"]
    assert hooked.telegram.deliveries[-1].status == 200


@pytest.mark.parametrize(
    ("settings", "line"),
    [
        (
            {"COMPANION_TELEGRAM_WEBHOOK_URL": "http://companion.example.com/hook"},
            "companion: COMPANION_TELEGRAM_WEBHOOK_URL: must be a public https:// URL (Telegram delivers to HTTPS "
            "only), such as https://companion.example.com/telegram/webhook",
        ),
        (
            {"COMPANION_TELEGRAM_WEBHOOK_URL": "https://companion.example.com/"},
            "companion: COMPANION_TELEGRAM_WEBHOOK_URL: must have a path of its own (letters, digits, / - _ .), "
            "such as https://companion.example.com/telegram/webhook",
        ),
        (
            {"COMPANION_TELEGRAM_WEBHOOK_URL": "https://companion.example.com/login"},
            "companion: COMPANION_TELEGRAM_WEBHOOK_URL: its path /login is one of the HTTP service's own pages; "
            "choose another, such as https://companion.example.com/telegram/webhook",
        ),
        (
            {"COMPANION_TELEGRAM_WEBHOOK_SECRET": ""},
            "companion: COMPANION_TELEGRAM_WEBHOOK_SECRET: must be set with COMPANION_TELEGRAM_WEBHOOK_URL: 1 to 256 "
            "characters of A-Z, a-z, 0-9, _ and -, which Telegram sends back with every delivery",
        ),
        (
            {"COMPANION_TELEGRAM_WEBHOOK_SECRET": "has spaces in it"},
            "companion: COMPANION_TELEGRAM_WEBHOOK_SECRET: must be 1 to 256 characters of A-Z, a-z, 0-9, _ and - "
            "(Telegram's rule; not shown)",
        ),
        (
            {"COMPANION_HTTP_PORT": "off"},
            "companion: COMPANION_TELEGRAM_WEBHOOK_URL: the webhook is served by the HTTP service, which is off; set "
            "COMPANION_HTTP_PORT (the default is 8765) and put the reverse proxy in front of it",
        ),
    ],
    ids=["http", "no-path", "a-page-of-the-service", "no-secret", "bad-secret", "no-http-service"],
)
@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_a_webhook_misconfigured_stops_the_start_with_one_line(
    hooked: Hooked, settings: dict[str, str], line: str
) -> None:
    done = run_companion(["run"], {**hooked.env, **settings})
    assert done.returncode == 2
    assert done.stderr.strip() == line
    assert hooked.telegram.calls == []


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_a_webhook_telegram_refuses_stops_the_start_with_one_line(hooked: Hooked) -> None:
    hooked.telegram.fail_next("setWebhook", 400, description="Bad Request: bad webhook: Failed to resolve host")
    done = run_companion(["run"], hooked.env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "companion: COMPANION_TELEGRAM_WEBHOOK_URL: Telegram refused setWebhook "
        "(BadRequest: Bad webhook: failed to resolve host)"
    )


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_a_stored_update_python_telegram_bot_cannot_parse_is_skipped_with_its_ids_alone(hooked: Hooked) -> None:
    telegram = hooked.telegram
    with hooked.start() as gateway:
        poison = telegram.send_unparsable(USER, USER, f"poison {CANARY}")
        gateway.wait_for(lambda: poison in telegram.delivered_ids(), "the poison's delivery")
        telegram.send_text(USER, USER, "after the poison")
        gateway.wait_for(lambda: len(hooked.replies(USER)) == 1, "the reply after it")
        code, stderr = gateway.end()
    assert code == 0, stderr
    assert hooked.replies(USER) == ["echo: after the poison"]
    assert f"telegram: update {poison} (message, " in stderr and "cannot be parsed; skipped" in stderr
    assert CANARY not in stderr
    assert all(not kept for _, kept in hooked.inbox())
