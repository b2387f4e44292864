"""The web chat in a real browser: headless Chromium (Debian's, through Playwright) against a real
`companion run` subprocess with the HTTP service on a free loopback port and the fake model server.

One gateway and one browser serve the whole module; each test opens contexts (cookie jars) of its
own. Signing in uses `companion web-login`'s link, as a person would. With COMPANION_SCREENSHOTS
set to a folder, the screenshots the tests take (the chat in both modes, /context, the privacy
page) are copied there too (docs/screenshots/ holds the README's).
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.privacy.secrets import hash_passphrase
from core.values import copy
from tests.helpers.browser import chromium_browser, require_chromium
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.ports import free_port
from tests.helpers.proc import companion_env, run_companion
from tests.helpers.web import stop_gateway

pytestmark = pytest.mark.wire

PASSPHRASE = "lantern-BROWSER-PASSPHRASE-7"
CANARY = "BROWSER-PRIVATE-CANARY"
REBIND = "rebind.example"  # the browser resolves it to 127.0.0.1, as DNS rebinding would
HELLO = "Hello from the browser!"
WALK = "I am planning a walk along the river on Sunday."
SECRET = f"Only private mode may read this: {CANARY}"
TEA = "How do I make a proper pot of tea?"
WHISPER = "Tell me the long secret story, slowly."
WHISPER_STORY = " ".join(f"hush{n}" for n in range(300)) + "."  # half a minute at ten words a second
TEA_ANSWER = "**Warm the pot** first, the slow way: " + " ".join(f"sip{n}" for n in range(40)) + " Then `steep` it."
# What the fake model answers (the screenshots show these); anything else: "Noted."
REPLIES = {
    HELLO: "Hello! Good to see you here.",
    WALK: "That sounds lovely. Shall I ask you on Monday how it went?",
    SECRET: "I'm listening. Nothing of this will be kept.",
    TEA: TEA_ANSWER,
    WHISPER: WHISPER_STORY,
}


def _answer(body: dict[str, Any]) -> str:
    return REPLIES.get(body["messages"][-1].get("content") or "", "Noted.")


WAIT_MS = 20_000


@dataclass
class Gateway:
    base: str
    env: dict[str, str]
    folder: Path
    model: FakeOpenAIServer
    log: Path
    browser: Any
    shots: Path
    urls: list[str] = field(default_factory=list)

    @property
    def db(self) -> Path:
        return Path(self.env["COMPANION_DB_PATH"])

    def login_link(self) -> str:
        result = run_companion(["web-login"], self.env)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    def new_page(self) -> Any:
        """A page in a fresh context (its own cookies), every request it makes recorded in `urls`."""
        context = self.browser.new_context(viewport={"width": 1100, "height": 820}, service_workers="block")
        context.on("request", lambda request: self.urls.append(request.url))
        return context.new_page()

    def signed_in_page(self) -> Any:
        page = self.new_page()
        page.goto(self.login_link())
        page.wait_for_url(self.base + "/", timeout=WAIT_MS)
        page.wait_for_selector("#send-form", timeout=WAIT_MS)
        return page

    def database_bytes(self) -> bytes:
        files = [self.db, self.db.with_name(self.db.name + "-wal"), self.db.with_name(self.db.name + "-shm")]
        return b"".join(f.read_bytes() for f in files if f.exists())

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def screenshot(self, page: Any, name: str, focus: Any = None) -> None:
        """The page's viewport (scrolled to `focus`, a locator, when given)."""
        if focus is not None:
            focus.evaluate("element => element.scrollIntoView({block: 'center'})")
        path = self.shots / name
        page.screenshot(path=str(path), full_page=False)
        if target := os.environ.get("COMPANION_SCREENSHOTS"):
            Path(target).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(target) / name)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    require_chromium()
    folder = tmp_path_factory.mktemp("web-browser")
    port = free_port()
    with FakeOpenAIServer.run_in_thread() as model:
        model.responder = _answer
        env = companion_env(
            folder,
            COMPANION_HTTP_PORT=str(port),
            COMPANION_LLM_BASE_URL=model.base_url,
            COMPANION_PRIVATE_PASSPHRASE_HASH=hash_passphrase(PASSPHRASE),
            COMPANION_LOG_LEVEL="DEBUG",
        )
        log = folder / "companion.log"
        with log.open("w") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", "bot", "run"], env=env, cwd=folder, stdout=sink, stderr=subprocess.STDOUT
            )
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_for(base, process, log)
            with chromium_browser(f"--host-resolver-rules=MAP {REBIND} 127.0.0.1") as browser:
                shots = folder / "screenshots"
                shots.mkdir()
                yield Gateway(base, env, folder, model, log, browser, shots)
        finally:
            stop_gateway(process)


def _wait_for(base: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise AssertionError(f"companion run exited with {process.returncode}: {log.read_text()}")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("companion run did not become ready")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def chat(gateway: Gateway) -> Any:
    """One signed-in page for the tests that follow the conversation."""
    return gateway.signed_in_page()


# --- what the tests do in the page ------------------------------------------------------------------


def answers(page: Any) -> int:
    return page.locator("#messages li.assistant").count()


def say(page: Any, text: str) -> str:
    """Type `text` in the chat and wait for its answer, drawn without a reload; return the answer."""
    before = answers(page)
    page.fill("#text", text)
    page.press("#text", "Enter")
    page.wait_for_function(
        "n => document.querySelectorAll('#messages li.assistant').length > n"
        " && !document.querySelector('#messages li.pending')",
        arg=before,
        timeout=WAIT_MS,
    )
    return page.locator("#messages li.assistant").last.inner_text()


def enter_private_mode(page: Any) -> None:
    """The chat page's form: the passphrase in its password field."""
    page.fill("#passphrase", PASSPHRASE)
    page.select_option("select[name=expiry]", "2h")
    page.click("button.private-button")
    page.wait_for_selector("#private-banner", timeout=WAIT_MS)


def leave_private_mode(page: Any) -> None:
    page.click("#normal-form button")
    page.wait_for_selector("body.normal", timeout=WAIT_MS)


def end_every_interval(gateway: Gateway, page: Any) -> None:
    """The privacy page's buttons, until no interval is left."""
    page.goto(gateway.base + "/privacy")
    while page.locator("section.intervals button.danger").count():
        with page.expect_navigation():
            page.locator("section.intervals button.danger").first.click()
    assert page.locator("#no-intervals").count() == 1


def next_request(gateway: Gateway, sent_before: int) -> bytes:
    deadline = time.monotonic() + 20
    while len(gateway.model.raw_requests) <= sent_before:
        assert time.monotonic() < deadline, "the model server received no request"
        time.sleep(0.02)
    return gateway.model.raw_requests[sent_before]


def web_request_body(page: Any) -> str:
    return page.locator("section.request[data-platform=web] pre.request-body").text_content()


# --- the tests ------------------------------------------------------------------------------------------


def test_a_sign_in_link_signs_in_once_and_a_reused_or_expired_link_is_refused(gateway):
    link = gateway.login_link()
    first = gateway.new_page()
    first.goto(link)
    first.wait_for_url(gateway.base + "/", timeout=WAIT_MS)
    assert first.locator("#send-form").count() == 1
    assert "#" not in first.url  # the code left the address bar

    reused = gateway.new_page()
    reused.goto(link)
    reused.wait_for_function(
        "() => document.getElementById('status').textContent.includes('wrong, expired or used')", timeout=WAIT_MS
    )
    reused.goto(gateway.base + "/")
    assert reused.url == gateway.base + "/login"  # not signed in

    expired_link = gateway.login_link()
    with sqlite3.connect(gateway.db, timeout=10) as db:
        db.execute("UPDATE web_login_codes SET expires_at = 1")  # ten minutes have passed
    expired = gateway.new_page()
    expired.goto(expired_link)
    expired.wait_for_function(
        "() => document.getElementById('status').textContent.includes('wrong, expired or used')", timeout=WAIT_MS
    )
    expired.goto(gateway.base + "/memory")
    assert expired.url == gateway.base + "/login"


def test_a_normal_exchange_is_answered_in_the_page_without_a_reload(gateway, chat):
    chat.goto(gateway.base + "/")
    chat.evaluate("window.stillThisPage = true")
    answer = say(chat, HELLO)
    assert answer == REPLIES[HELLO]
    assert chat.evaluate("window.stillThisPage === true")  # drawn by the event stream, not a reload
    assert chat.locator("#messages li.user").last.inner_text() == HELLO
    assert chat.locator("#private-banner").count() == 0
    say(chat, WALK)
    gateway.screenshot(chat, "chat-normal.png")


def test_a_streamed_answer_grows_in_one_bubble_after_the_typing_dots_and_ends_formatted(gateway):
    """Streaming as shipped (one edit a second), with a model writing about eight words a second: the
    typing dots until the first words, then the answer's bubble grows in place while it is written,
    and its final text replaces its text, formatted; no second bubble, no reload."""
    page = gateway.signed_in_page()
    page.evaluate("window.stillThisPage = true")
    before = answers(page)
    gateway.model.token_seconds = 0.12
    try:
        page.fill("#text", TEA)
        page.press("#text", "Enter")
        page.wait_for_selector("#messages li.typing", timeout=WAIT_MS)  # until the first words
        page.wait_for_selector("#messages li.assistant.streaming", timeout=WAIT_MS)
        page.evaluate("window.bubble = document.querySelector('#messages li.assistant.streaming')")
        assert page.locator("#messages li.typing").count() == 0
        grown = [page.evaluate("window.bubble.textContent")]
        while len(grown) < 3:  # it grows, edit by edit, while the model writes
            page.wait_for_function(
                "n => window.bubble.textContent.length > n && window.bubble.classList.contains('streaming')",
                arg=len(grown[-1]),
                timeout=WAIT_MS,
            )
            grown.append(page.evaluate("window.bubble.textContent"))
        page.wait_for_function(
            "() => !window.bubble.classList.contains('streaming') && window.bubble.querySelector('strong')",
            timeout=WAIT_MS,
        )
    finally:
        gateway.model.token_seconds = 0.0
    assert all(TEA_ANSWER.startswith(text) for text in grown)  # drawn as written while it grows ...
    assert grown[0].startswith("**Warm the pot**")
    final = page.evaluate(
        "() => ({connected: window.bubble.isConnected, text: window.bubble.textContent,"
        " strong: window.bubble.querySelector('strong').textContent, code: window.bubble.querySelector('code').textContent,"
        " last: [...document.querySelectorAll('#messages li.assistant')].pop() === window.bubble})"
    )
    # ... and ends in the same bubble, formatted
    assert final == {
        "connected": True,
        "text": TEA_ANSWER.replace("**", "").replace("`", ""),
        "strong": "Warm the pot",
        "code": "steep",
        "last": True,
    }
    assert answers(page) == before + 1  # one bubble for the answer
    assert page.locator("#messages li.typing").count() == 0
    assert page.evaluate("window.stillThisPage === true")
    page.wait_for_function("() => !document.querySelector('#messages li.pending')", timeout=WAIT_MS)

    page.goto(gateway.base + "/")  # drawn again from the history: once, formatted
    page.wait_for_function("() => document.querySelector('#messages li.assistant strong')", timeout=WAIT_MS)
    assert page.locator("#messages li.assistant", has_text="the slow way").count() == 1
    assert "sip20" not in gateway.log_text()  # no partial (nor final) text in any log line
    page.context.close()


def test_a_page_draws_normal_mode_at_once_when_private_mode_expires_mid_answer(gateway):
    """Issue 29: the server tells the page at the end, while the answer the end cut off was still being
    written: the page draws normal mode's view in place (the interval as its placeholder, no banner,
    the bubble as the constant line, the form to enter private mode back), without loading again, so
    neither its own timer nor a page load waiting for the conversation's lane does it."""
    page = gateway.signed_in_page()
    page.fill("#text", f"/private {PASSPHRASE} 6s")  # the form offers half an hour at least; the command any expiry
    page.press("#text", "Enter")
    page.wait_for_selector("#private-banner", timeout=WAIT_MS)  # the page loads again, in private mode
    page.evaluate("window.stillThisPage = true")
    gateway.model.token_seconds = 0.1
    try:
        page.fill("#text", WHISPER)
        page.press("#text", "Enter")
        page.wait_for_selector("#messages li.assistant.streaming", timeout=WAIT_MS)
        assert "hush" in page.locator("#messages li.assistant.streaming").inner_text()
        page.wait_for_function(
            "() => !document.getElementById('private-banner') && document.body.classList.contains('normal')",
            timeout=WAIT_MS,
        )
        drawn = page.evaluate(
            "() => ({same: window.stillThisPage === true, text: document.getElementById('messages').textContent,"
            " placeholder: document.querySelectorAll('#messages li.placeholder').length,"
            " withdrawn: [...document.querySelectorAll('#messages li.retracted')].map(li => li.textContent),"
            " form: getComputedStyle(document.querySelector('.enter-private')).display})"
        )
    finally:
        gateway.model.token_seconds = 0.0
    assert drawn["same"]  # drawn in place by the server's event: no reload
    assert "hush" not in drawn["text"] and drawn["placeholder"] >= 1
    assert drawn["withdrawn"] == [copy.INTERVAL_ENDED_SHOWN]
    assert drawn["form"] != "none"  # private mode can be entered again from here
    page.context.close()


def test_private_mode_has_its_banner_and_the_passphrase_is_in_no_html_url_database_byte_or_log_line(gateway, chat):
    pages: list[str] = []
    chat.goto(gateway.base + "/")
    enter_private_mode(chat)
    banner = chat.locator("#private-banner")
    assert "Private mode." in banner.text_content() and "It ends at" in banner.text_content()
    colours = chat.evaluate(
        "() => [getComputedStyle(document.getElementById('private-banner')).backgroundColor,"
        " getComputedStyle(document.body).backgroundColor]"
    )
    assert colours[0] != colours[1] and colours[1] != "rgb(246, 247, 249)"  # not normal mode's page
    pages.append(chat.content())

    answer = say(chat, SECRET)
    assert answer == REPLIES[SECRET]
    assert CANARY in chat.content()  # the live private chat shows it, while it is open
    gateway.screenshot(chat, "chat-private.png")

    for path in ("/context", "/memory", "/privacy"):  # no page but the live private chat shows it
        chat.goto(gateway.base + path)
        assert CANARY not in chat.content(), path
        pages.append(chat.content())
    assert chat.locator("section.intervals li").count() >= 1  # the privacy page lists the open interval
    gateway.screenshot(chat, "privacy.png")

    chat.goto(gateway.base + "/")
    leave_private_mode(chat)
    assert CANARY not in chat.content()
    assert chat.locator("#messages li.placeholder").count() >= 1
    pages.append(chat.content())

    assert all(PASSPHRASE not in html for html in pages)
    assert not [url for url in gateway.urls if PASSPHRASE in url]
    assert PASSPHRASE.encode() not in gateway.database_bytes()
    log = gateway.log_text()
    assert "POST /private 200" in log  # the log is being written, at DEBUG
    assert PASSPHRASE not in log and CANARY not in log


def test_context_shows_an_interval_as_one_placeholder_without_its_canary_and_is_the_next_request_byte_for_byte(
    gateway, chat
):
    end_every_interval(gateway, chat)
    chat.goto(gateway.base + "/")
    enter_private_mode(chat)
    say(chat, f"A second secret: {CANARY}")
    leave_private_mode(chat)

    upcoming = "What shall we cook tonight?"
    chat.goto(gateway.base + "/context")
    chat.fill("#next", upcoming)
    with chat.expect_navigation():
        chat.click(".preview-form button")
    body = web_request_body(chat)
    assert CANARY not in chat.content()
    messages = json.loads(body)["messages"]
    assert sum(1 for m in messages if m["content"] == copy.PLACEHOLDER) == 1
    assert messages[-1]["content"] == upcoming
    gateway.screenshot(
        chat, "context.png", chat.locator("section.request[data-platform=web] li", has_text="earlier private").first
    )

    chat.goto(gateway.base + "/")
    sent = len(gateway.model.raw_requests)
    say(chat, upcoming)
    assert next_request(gateway, sent) == body.encode("utf-8")


def test_a_memory_deleted_on_its_page_is_gone_from_the_next_request(gateway, chat):
    fact = "I keep bees on the roof"
    chat.goto(gateway.base + "/")
    assert "Remembered" in say(chat, f"/remember {fact}")
    chat.goto(gateway.base + "/context")
    assert fact in web_request_body(chat)

    chat.goto(gateway.base + "/memory")
    item = chat.locator("#memories li", has_text=fact)
    with chat.expect_navigation():
        item.locator("button", has_text="Forget").click()
    assert "Forgot memory" in chat.locator(".flash").inner_text()
    assert chat.locator("#memories li", has_text=fact).count() == 0

    chat.goto(gateway.base + "/")
    sent = len(gateway.model.raw_requests)
    say(chat, "How are the bees doing?")
    assert fact.encode() not in next_request(gateway, sent)


def test_a_forged_cross_site_post_a_wrong_host_and_a_missing_csrf_token_are_refused(gateway, chat):
    forged = "FORGED-CROSS-SITE-CANARY"
    form = (
        f'<form method="post" action="{gateway.base}/send"><input name="text" value="{forged}"></form>'
        "<script>document.forms[0].submit()</script>"
    )
    # Another site (localhost: the session cookie is SameSite=Strict, so it stays home), and another
    # port of this same host (the same site to a browser: the cookie goes along); the token is missing.
    # Both are other origins: refused by the exact Origin check, before the CSRF check is reached.
    for host in ("localhost", "127.0.0.1"):
        with _PageServer(form, host) as other:
            chat.goto(other)
            chat.wait_for_url(gateway.base + "/send", timeout=WAIT_MS)
            assert "other origins are refused" in chat.locator("body").inner_text(), host

    chat.goto(f"http://{REBIND}:{gateway.base.rsplit(':', 1)[1]}/")  # a rebound name reaching this address
    assert "Unknown host" in chat.locator("body").inner_text()

    chat.goto(gateway.base + "/")
    status = chat.evaluate(
        "() => fetch('/send', {method: 'POST', headers: {'Content-Type': 'application/json'},"
        f" body: JSON.stringify({{text: '{forged}'}})}}).then(r => r.status)"
    )
    assert status == 403
    with sqlite3.connect(gateway.db, timeout=10) as db:
        assert db.execute("SELECT count(*) FROM messages WHERE text LIKE ?", (f"%{forged}%",)).fetchone()[0] == 0
    assert not any(forged.encode() in body for body in gateway.model.raw_requests)


def test_metrics_hold_no_canary_no_passphrase_and_no_id(gateway, chat):
    chat.goto(gateway.base + "/metrics")
    text = chat.locator("body").inner_text()
    assert "companion_updates_received_total" in text and 'platform="web"' in text
    assert CANARY not in text and PASSPHRASE not in text and "owner" not in text
    for line in text.splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        labels = line[line.index("{") + 1 : line.index("}")]
        values = [pair.split("=", 1)[1] for pair in labels.split(",") if not pair.startswith("le=")]
        assert not any(ch.isdigit() for value in values for ch in value), line
    log = gateway.log_text()
    assert CANARY not in log and PASSPHRASE not in log and "Traceback" not in log


class _Page(http.server.BaseHTTPRequestHandler):
    html = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.end_headers()
        self.wfile.write(self.html)

    def log_message(self, *args: object) -> None:
        pass


class _PageServer:
    """One page of another site, on another loopback port; entered, the address to open it at."""

    def __init__(self, html: str, host: str) -> None:
        handler = type("Handler", (_Page,), {"html": f"<!doctype html><html><body>{html}</body></html>".encode()})
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.host = host

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://{self.host}:{self.server.server_address[1]}/"

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()
