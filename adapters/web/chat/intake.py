"""The web chat's intake: a page's message (POST /send) handed to the core, and the pages opened (GET /events)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from adapters.web.chat.hub import (
    CHAT_ID,
    HISTORY,
    PLATFORM,
    USER,
    Page,
    PageHub,
    WebChatElsewhere,
    WebChatStopped,
    WebEvent,
)
from core.ports.chat import ChatCore
from core.values.edge import Held, Silence, Silent, acknowledged
from core.values.model import InboundMessage
from core.values.transcript import Transcript

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sent:
    """What a page learns at once from `send` (the answer itself comes through its events).

    `hide_input`: the message carried a secret (a passphrase): the page must not keep or show what
    was typed (the store kept `/private [redacted]`)."""

    hide_input: bool = False


class WebIntake:
    """The owner's messages from the pages to the core (core.ports.BaseIntake), and the pages
    themselves (the connection the sender and the streamer publish to)."""

    name = PLATFORM

    def __init__(self, core: ChatCore, hub: PageHub) -> None:
        self._core = core
        self._hub = hub
        self._taking = False
        self._lost = asyncio.Event()  # never set: a chat in this process cannot lose its platform

    # --- lifecycle (core.ports.BaseIntake) --------------------------------------------

    async def start(self) -> None:
        """Take messages, and let the sender and the streamer publish to the pages."""
        if self._hub.started or self._hub.closed:
            return
        self._hub.start()
        self._taking = True

    async def stop_intake(self) -> None:
        """Take no new message; what runs goes on, and open pages still get what the last turns wrote."""
        self._taking = False

    async def aclose(self) -> None:
        """End every page's events and stop publishing (the core's stop let the last turns finish
        first); safe to call twice."""
        self._taking = False
        if not self._hub.closed:
            self._hub.close()

    async def wait_lost(self) -> str:
        await self._lost.wait()
        return "web: the chat was lost"

    def ready(self) -> str | None:
        """For GET /readyz: None while it takes messages."""
        if not self._hub.started:
            return "not started"
        return None if self._taking else "stopping"

    # --- the owner's messages ------------------------------------------------------------

    async def send(self, text: str, *, message_id: str | None = None) -> Sent:
        """Hand the owner's message to the core and wait for its outcome; its answer reaches the
        pages as events.

        Args:
            text: what the owner typed.
            message_id: the page's id for this message, so a message sent twice (a retried POST)
                is handled once; None: a fresh one.
        Raises:
            WebChatStopped: the chat is not taking messages (stopping, or not started), or the stop
                cut the message off before it was answered: the page may send it again.
            WebChatElsewhere: another process of a shared database holds this chat now; nothing was stored.
        """
        if not self._taking:
            raise WebChatStopped("the web chat is not taking messages now")
        log.info("web: a message of %d chars", len(text))
        event = InboundMessage(PLATFORM, CHAT_ID, USER, text, is_direct=True, message_id=message_id or uuid.uuid4().hex)
        outcome = await self._core.receive(event)
        if isinstance(outcome, Silent) and outcome.reason is Silence.HELD_ELSEWHERE:
            raise WebChatElsewhere("another process of the shared database answers this chat now")
        if not acknowledged(outcome):
            raise WebChatStopped("the web chat stopped before answering")
        # The page keeps nothing of a message that carried a secret (the store kept it redacted).
        return Sent(hide_input=not isinstance(outcome, Held) and outcome.secret)

    # --- the pages -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def open_page(self, history: int = HISTORY) -> AsyncIterator[Page]:
        """A page opens (PageHub.open_page): its transcript, then its live events."""
        async with self._hub.open_page(history) as page:
            yield page

    async def history(self, limit: int = HISTORY) -> Transcript:
        """The chat's transcript now (the newest `limit` items), as a page that opened now would draw it."""
        return await self._hub.history(limit)

    async def mode_changed(self) -> None:
        """Something other than a message of this chat may have changed its mode (`/forget private`
        from the privacy page): every open page reads its mode again (a `mode` event)."""
        self._hub.publish(WebEvent("mode", ""))

    @property
    def pages(self) -> int:
        """How many pages are open."""
        return self._hub.pages
