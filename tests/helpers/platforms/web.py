"""The web chat as the tests drive it: the real web chat in this process with a page open on it, as a
browser keeps one (in process), and `companion run` serving it, signed in with `companion web-login`
and sent messages by POST /send as the page's script sends them (in a subprocess)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

import httpx

from adapters.web.chat import PARTIAL, Page, WebEvent, WebIntake
from bot.bootstrap import core_entry, web_chat
from core.turn.companion import Companion
from core.turn.people import WEB_OWNER
from core.turn.recovery import SENT_AT_MARGIN
from core.values.edge import EdgeSettings
from core.values.model import Confirmation
from tests.helpers.platforms import HAS, Fault, Where
from tests.helpers.ports import free_port
from tests.helpers.proc import companion_env, run_companion
from tests.helpers.waiting import wait_for
from tests.helpers.web import csrf_of, sign_in_blocking
from tests.helpers.wire_platforms import rows


class AttachedWebChat:
    """The web chat on the companion's entry, started and stopped as bot/gateway.py does it: the
    intake starts, then the platform is attached; the stop lets the last turns finish (the core's
    stop), detaches it, then closes its pages."""

    name = "web"

    def __init__(self, companion: Companion) -> None:
        self.edge = EdgeSettings(stop_grace=5.0)
        self.entry = core_entry(companion, edge=self.edge)
        self.platform = web_chat(companion, self.entry, self.edge)

    @property
    def chat(self) -> WebIntake:
        return self.platform.intake

    async def start(self) -> None:
        await self.chat.start()
        self.entry.attach(self.platform)

    async def aclose(self) -> None:
        await self.chat.stop_intake()
        await self.entry.stop(self.edge.stop_grace)
        self.entry.detach(self.platform)
        await self.chat.aclose()


class WebDriver:
    """The owner's web chat with one page open, collecting what it shows: each bubble's text (a reply
    shown while written is one bubble, its final text replacing the partial one), a file as
    "[file NAME]". A page that opens later draws the same from the store."""

    name = "web"
    has = HAS["web"]
    person = WEB_OWNER
    serves = frozenset({"web"})  # as the gateway configures a companion serving the web chat
    mirror_chat = None
    forward_names: ClassVar[Mapping[str, str]] = {}
    send_tries = 0
    date_step = SENT_AT_MARGIN + 0.1

    async def __aenter__(self) -> WebDriver:
        self._ids = itertools.count(1)
        self._bubbles: list[list[Any]] = []  # [stream id or None, text, final]
        self._published: list[str] = []
        self._confirm: Confirmation | None = None
        self._posting: set[asyncio.Task[Any]] = set()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        pass

    def build(self, companion: Companion) -> AttachedWebChat:
        return AttachedWebChat(companion)

    async def attach(self, adapter: Any) -> None:
        self.chat: WebIntake = adapter.chat
        self._stack = contextlib.AsyncExitStack()
        page = await self._stack.enter_async_context(self.chat.open_page())
        self._reader = asyncio.create_task(self._read(page))

    async def detach(self) -> None:
        """After the chat closed: its page's events have ended."""
        await self._stack.aclose()
        await self._reader
        await asyncio.gather(*self._posting)

    async def _read(self, page: Page) -> None:
        async for event in page:
            self._show(event)

    def _show(self, event: WebEvent) -> None:
        if event.kind == "mode":  # the page reads its mode again: nothing shown
            return
        self._published.append(event.text)
        text = f"[file {event.text}]" if event.kind == "file" else event.text
        if event.confirm is not None:
            self._confirm = event.confirm
        drawn = [b for b in self._bubbles if b[0] is not None and b[0] in event.stream]
        if not drawn:
            self._bubbles.append([event.stream[0] if event.stream else None, text, event.kind != PARTIAL])
            return
        drawn[0][1:] = [text, event.kind != PARTIAL]
        if event.kind != PARTIAL:  # a final text (or the constant line) in the first bubble; the others go
            self._bubbles[:] = [b for b in self._bubbles if b not in drawn[1:]]

    def _finals(self) -> int:
        return sum(1 for b in self._bubbles if b[2])

    async def say(self, text: str, **_: Any) -> str:
        before = self._finals()
        message_id = f"m{next(self._ids)}"
        await self.chat.send(text, message_id=message_id)
        await self.wait_until(lambda: self._finals() > before, "the answer")
        return message_id

    async def post(self, text: str) -> str:
        message_id = f"m{next(self._ids)}"
        task = asyncio.create_task(self.chat.send(text, message_id=message_id))
        self._posting.add(task)
        return message_id

    async def press(self, command: str) -> None:
        assert self._confirm is not None and self._confirm.command == command, "no button sends that"
        before = self._finals()
        await self.chat.send(command)  # what the page's button does: send its command as typed
        await self.wait_until(lambda: self._finals() >= before + 2, "the answer and its file")

    async def edit(self, message_id: str, text: str) -> None:
        raise NotImplementedError("the web chat has no edit")

    async def send_photo(self, caption: str) -> None:
        raise NotImplementedError("the web chat takes no upload")

    def post_while_down(self, text: str) -> None:
        raise NotImplementedError("the web chat refuses a message while it is down")

    def fail_sends(self) -> None:
        raise NotImplementedError("a publish to the open pages cannot fail")

    def send_calls(self) -> int:
        return len(self._published)

    def shown(self, chat: Literal["dm", "mirror"] = "dm") -> list[str]:
        return [b[1] for b in self._bubbles] if chat == "dm" else []

    def sent(self) -> list[str]:
        return list(self._published)

    async def wait_until(self, predicate: Callable[[], bool], what: str) -> None:
        await wait_for(predicate, 10.0, what)


class WebWire:
    """The web chat of `companion run` (on a free port): the owner's one chat, a DM. A message is
    POSTed in the background, in order, as the page's script posts it (the POST waits for its turn);
    what a page shows is what it draws from the store, so `replies` reads the assistant's messages of
    the web chat. A page's send cannot be refused or held: it has no faults."""

    name = "web"
    account = None  # the signed-in owner
    wheres: tuple[Where, ...] = ("dm",)
    faults: tuple[Fault, ...] = ()

    def __init__(self, folder: Path) -> None:
        self.port = free_port()
        self._folder = folder
        self._texts: queue.Queue[str | None] = queue.Queue()
        self._poster: threading.Thread | None = None

    def settings(self) -> dict[str, str]:
        return {"COMPANION_HTTP_PORT": str(self.port)}

    def say(self, where: Where, text: str) -> None:
        assert where == "dm", "the web chat is one direct chat"
        if self._poster is None:
            login = run_companion(["web-login"], companion_env(self._folder, **self.settings()))
            assert login.returncode == 0, login.stderr
            browser = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60)
            assert sign_in_blocking(browser, login.stdout.strip().split("#", 1)[1]).status_code == 200
            csrf = csrf_of(browser.get("/").text)
            self._poster = threading.Thread(target=self._post_each, args=(browser, csrf), daemon=True)
            self._poster.start()
        self._texts.put(text)

    def _post_each(self, browser: httpx.Client, csrf: str) -> None:
        try:
            for text in iter(self._texts.get, None):
                with contextlib.suppress(httpx.HTTPError):  # the gateway stopped or was killed meanwhile
                    browser.post("/send", json={"text": text}, headers={"X-CSRF-Token": csrf})
        finally:
            browser.close()

    def replies(self, where: Where) -> list[str]:
        return [
            text
            for (text,) in rows(
                self._folder / "companion.db",
                "SELECT m.text FROM messages m JOIN conversations c ON c.id = m.conversation_id"
                " WHERE c.platform = 'web' AND m.role = 'assistant' ORDER BY m.id",
            )
        ]

    def fault(self, fault: Fault) -> None:
        raise NotImplementedError("the web chat's sends have no fault")

    def faulted(self) -> bool:
        return False

    def release(self) -> None:
        pass

    def close(self) -> None:
        """The background POSTs end (one in flight is cut off by the gateway's end)."""
        self._texts.put(None)
        if self._poster is not None:
            self._poster.join(30)
