"""Telegram served by three `companion run` processes on one PostgreSQL database (issue 33, test 5): Telegram's
webhook behind a round-robin front (tests/helpers/round_robin.py), each process storing what reaches it and
answering the chats it holds; one SIGKILLed in the middle.

Each chat's next message is sent once its reply came (as tests/bot/test_webhook_wire.py does): messages close
together would be one burst, answered once. The processes share one COMPANION_KEY_DIR (same host), as a shared
database serving Telegram requires (docs/operations.md): any of them may open a row another stored.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.ports import free_port
from tests.helpers.proc import run_companion
from tests.helpers.round_robin import RoundRobinFront
from tests.helpers.running import Running
from tests.helpers.telegram_gateway import gateway_env
from tests.helpers.wire_platforms import rows

pytestmark = pytest.mark.wire

SECRET = "wire-shared_webhook-secret-3"
HOST = "companion.example.com"
PATH = "/telegram/hook"
URL = f"https://{HOST}{PATH}"
CHATS = [5001 + n for n in range(50)]  # private chats: a user's chat id is the user's id
MESSAGES = 10
# The chat that goes private in the process killed: the first of these whose holder holds some of CHATS too (a new
# chat is claimed by whichever process reads its first update first, so which one cannot be chosen).
SECRETIVE_CANDIDATES = [7001 + n for n in range(12)]
PASS = "sesame"  # tests/helpers/telegram_gateway.py's passphrase
CANARY = "pangolin-shared-canary-8810"
ALLOWED = ",".join(f"telegram:{user}" for user in [*CHATS, *SECRETIVE_CANDIDATES])


def echo(body: dict[str, Any]) -> str:
    """The model's answer: the last user message's words, so a chat's replies show its order."""
    said = [m["content"] for m in body["messages"] if m.get("role") == "user" and isinstance(m.get("content"), str)]
    return f"echo: {said[-1].splitlines()[-1] if said else ''}"


class Shared:
    """Three gateways' environments on one database and one key folder, the fake servers, and the front."""

    def __init__(self, tmp_path: Path, servers: tuple[FakeTelegramServer, FakeOpenAIServer], url: str) -> None:
        self.telegram, self.model = servers
        self.model.responder = echo
        self.url = url
        keys = tmp_path / "keys"
        self.envs = [self.env(tmp_path / name, COMPANION_KEY_DIR=str(keys)) for name in ("a", "b", "c")]

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        home.mkdir()
        return gateway_env(
            home,
            self.telegram,
            self.model,
            COMPANION_DATABASE_URL=self.url,
            COMPANION_SHARED_DATABASE="true",
            COMPANION_HTTP_PORT=str(free_port()),
            COMPANION_TELEGRAM_WEBHOOK_URL=URL,
            COMPANION_TELEGRAM_WEBHOOK_SECRET=SECRET,
            COMPANION_ALLOWED_USERS=ALLOWED,
            **extra,
        )

    def ports(self) -> list[int]:
        return [int(env["COMPANION_HTTP_PORT"]) for env in self.envs]

    def holder_of(self, chat: int) -> int | None:
        """The pid of the process holding the chat's conversation."""
        found = rows(
            self.url,
            "SELECT p.pid FROM chat_claims h JOIN conversations c ON c.id = h.conversation_id"
            " JOIN gateway_processes p ON p.id = h.holder WHERE c.platform = 'telegram' AND c.chat_id = ?",
            (str(chat),),
        )
        return int(found[0][0]) if found else None


@pytest.fixture
def shared(tmp_path: Path, telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], postgres_url: str) -> Shared:
    return Shared(tmp_path, telegram_servers, postgres_url)


@pytest.fixture
def gateways(shared: Shared) -> Iterator[list[Running]]:
    """The three gateways running (the first started alone: it sets the webhook), the front before them."""
    with contextlib.ExitStack() as stack:  # each stopped, and its pipes closed, at the end
        started = [stack.enter_context(Running(env)) for env in shared.envs[:1]]
        started[0].wait_running()
        for env in shared.envs[1:]:
            started.append(stack.enter_context(Running(env)))
        for gateway in started[1:]:
            gateway.wait_running()
        front = stack.enter_context(RoundRobinFront.run_in_thread(backends=shared.ports()))
        shared.telegram.deliver_to(f"http://127.0.0.1:{front.port}{PATH}")
        yield started


def converse(shared: Shared, gateways: list[Running], sent: dict[int, int], upto: int) -> None:
    """Each chat's messages up to `upto`, each sent once the chat's reply to the one before it came (`sent`: how
    many the test sent in each chat so far)."""
    telegram = shared.telegram
    deadline = time.monotonic() + 90
    while True:
        behind = False
        for chat in CHATS:
            answered = len(telegram.texts_to(chat))
            if answered >= upto:
                continue
            behind = True
            if sent[chat] == answered:
                telegram.send_text(chat, chat, f"message {answered} of {chat}")
                sent[chat] += 1
        if not behind:
            return
        assert time.monotonic() < deadline, {c: len(telegram.texts_to(c)) for c in CHATS}
        for gateway in gateways:
            assert gateway.proc.poll() is None, gateway.stderr[-3000:]
        time.sleep(0.05)


def test_three_gateways_answer_fifty_chats_once_and_in_order_and_a_killed_one_loses_nothing(
    shared: Shared, gateways: list[Running]
) -> None:
    telegram = shared.telegram
    assert len(telegram.calls_of("setWebhook")) == 1  # by the first process; the others found it set
    sent = dict.fromkeys(CHATS, 0)
    converse(shared, gateways, sent, MESSAGES // 2)
    # A chat goes private in a process that holds some of the others too, and that process then dies.
    for secretive in SECRETIVE_CANDIDATES:
        telegram.send_text(secretive, secretive, "hello")
        gateways[0].wait_for(lambda s=secretive: len(telegram.texts_to(s)) == 1, "the first reply")
        pid = shared.holder_of(secretive)
        held = {chat for chat in CHATS if shared.holder_of(chat) == pid}
        if held:
            break
    tried = SECRETIVE_CANDIDATES.index(secretive) + 1
    assert held and len(held) < len(CHATS), tried  # the chats are spread over the processes
    (victim,) = [g for g in gateways if g.proc.pid == pid]
    telegram.send_text(secretive, secretive, f"/private {PASS} 1h")
    victim.wait_for(lambda: len(telegram.texts_to(secretive)) == 2, "private mode on")
    telegram.send_text(secretive, secretive, f"between us: {CANARY}")
    victim.wait_for(lambda: len(telegram.texts_to(secretive)) == 3, "the private reply")
    # Killed while the next message of every chat is on its way: some stored by it and not answered yet.
    delivered = len(telegram.delivered_ids())
    for chat in CHATS:
        telegram.send_text(chat, chat, f"message {MESSAGES // 2} of {chat}")
        sent[chat] += 1
    victim.wait_for(lambda: len(telegram.delivered_ids()) >= delivered + len(CHATS) // 3, "deliveries under way")
    victim.end(signal.SIGKILL)
    survivors = [g for g in gateways if g is not victim]
    converse(shared, survivors, sent, MESSAGES)
    # Its chats were taken over by the others, its private interval closed as a restart closes it.
    assert all(shared.holder_of(chat) not in (None, pid) for chat in held | {secretive})
    assert rows(shared.url, "SELECT end_reason FROM segments") == [("restart",)]
    telegram.send_text(secretive, secretive, "after the kill")
    survivors[0].wait_for(lambda: len(telegram.texts_to(secretive)) == 4, "the reply after the kill")
    assert rows(shared.url, "SELECT mode, segment_id FROM messages WHERE role = 'user' ORDER BY id DESC LIMIT 1") == [
        ("normal", None)
    ]
    base = f"http://127.0.0.1:{shared.ports()[gateways.index(survivors[0])]}"
    survivors[0].wait_for(lambda: httpx.get(f"{base}/readyz").json()["inbox"] == 0, "an empty inbox")
    ended = [survivors[0].end()]
    assert telegram.webhook is not None and not telegram.calls_of("deleteWebhook")  # another is still serving
    ended.append(survivors[1].end())
    for chat in CHATS:  # every reply once, in order
        assert telegram.texts_to(chat) == [f"echo: message {n} of {chat}" for n in range(MESSAGES)], chat
    assert all(code == 0 for code, _ in ended), [stderr[-3000:] for _, stderr in ended]
    assert not any(CANARY in stderr for _, stderr in ended) and CANARY not in victim.stderr
    assert telegram.calls_of("deleteWebhook") and telegram.webhook is None  # by the last one stopping
    # A chat's updates begun only where it is held: a process learns it does not hold a chat at most once, when
    # the chat's first update is read by several at once (the core's claim then decides).
    logs = [victim.stderr, *(stderr for _, stderr in ended)]
    elsewhere = sum(log.count("is held by another process: not handled here") for log in logs)
    assert elsewhere <= 2 * (len(CHATS) + tried), elsewhere
    assert rows(shared.url, "SELECT count(*) FROM webhook_inbox WHERE body IS NOT NULL") == [(0,)]


def test_an_update_redelivered_after_a_timeout_is_answered_once_across_the_gateways(
    shared: Shared, gateways: list[Running]
) -> None:
    telegram = shared.telegram
    assert len(telegram.calls_of("setWebhook")) == 1  # by the first process; the others found it set
    chat = CHATS[0]
    telegram.time_out_next(1)  # its 200 counted as too late: delivered again, through the front to another
    telegram.send_text(chat, chat, "only once")
    gateways[0].wait_for(lambda: len(telegram.delivered_ids()) == 1, "delivered again")
    gateways[0].wait_for(lambda: len(telegram.texts_to(chat)) == 1, "its reply")  # then the next: not one burst
    telegram.send_text(chat, chat, "and then this")
    gateways[0].wait_for(lambda: len(telegram.texts_to(chat)) >= 2, "both replies")
    ended = [g.end() for g in gateways]
    (first, *_) = [d.update_id for d in telegram.deliveries]
    assert [d.update_id for d in telegram.deliveries].count(first) == 2
    assert telegram.texts_to(chat) == ["echo: only once", "echo: and then this"]
    assert all(code == 0 for code, _ in ended)
    # The redelivery was stored nowhere again (a new chat's first update may be read by every process at once:
    # the core's claim lets one answer it, the others leave it, "held by another process").
    assert rows(shared.url, "SELECT update_id FROM webhook_inbox ORDER BY update_id") == [(first,), (first + 1,)]
    assert rows(shared.url, "SELECT count(*) FROM messages WHERE role = 'user' AND text = 'only once'") == [(1,)]


def test_a_delivery_without_the_secret_or_with_a_wrong_one_is_refused_by_every_gateway(
    shared: Shared, gateways: list[Running]
) -> None:
    update = {
        "update_id": 434343,
        "message": {
            "message_id": 9,
            "date": 1700000000,
            "chat": {"id": CHATS[0], "type": "private", "first_name": "U"},
            "from": {"id": CHATS[0], "is_bot": False, "first_name": "U"},
            "text": f"forged {CANARY}",
        },
    }
    body = json.dumps(update).encode()
    statuses = []
    for port in shared.ports():
        for secret in (None, "wrong-secret", SECRET[:-1]):
            headers = {"Host": HOST, "Content-Type": "application/json"}
            if secret is not None:
                headers["X-Telegram-Bot-Api-Secret-Token"] = secret
            statuses.append(httpx.post(f"http://127.0.0.1:{port}{PATH}", content=body, headers=headers).status_code)
    assert statuses == [401, 403, 403] * 3
    assert rows(shared.url, "SELECT count(*) FROM webhook_inbox") == [(0,)]
    assert all(g.end()[0] == 0 for g in gateways)


def test_a_gateway_with_a_transit_key_folder_of_its_own_is_refused_beside_the_others(
    shared: Shared, tmp_path: Path
) -> None:
    with Running(shared.envs[0]) as first:
        first.wait_running()
        alone = shared.env(tmp_path / "elsewhere", COMPANION_KEY_DIR=str(tmp_path / "other-keys"))
        refused = run_companion(["run"], alone)
        code, stderr = first.end()
    assert code == 0, stderr
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        "companion: COMPANION_SHARED_DATABASE: another live process stores Telegram's webhook updates under another "
        "transit key folder; every process must use one COMPANION_KEY_DIR/transit/ (the same COMPANION_KEY_DIR on "
        "one host, or that folder on a shared mount)"
    )
