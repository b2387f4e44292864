"""The web chat's open pages: each gets its transcript first, then the live events the sender and the
streamer publish, in order and each once (`PageHub`, `Page`, `WebEvent`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from core.values.errors import DeliveryFailed
from core.values.model import Attachment, Confirmation, ConversationKey, Mode
from core.values.transcript import Transcript

log = logging.getLogger(__name__)

PLATFORM = "web"
# One account, the signed-in owner's (bot/bootstrap.py makes it one of the owner's accounts, as
# COMPANION_OWNER's), and one direct conversation, theirs.
USER = "owner"
CHAT_ID = "owner"
KEY = ConversationKey(PLATFORM, CHAT_ID)
PAGE_QUEUE = 100  # events a page may fall behind by before it is closed (its browser reconnects)
MAX_PAGES = 16  # open pages (tabs) at once
HISTORY = 200  # items of the transcript a page draws first
# Events only the pages open now may show: never stored, so no history holds them.
PARTIAL = "partial"
# A private reply's bubbles withdrawn when its interval ended: they show the constant line instead.
RETRACTION = "retraction"

# Reads a chat's transcript (core.turn.transcript.Transcripts.read).
TranscriptReader = Callable[[ConversationKey, int], Awaitable[Transcript]]


class WebChatError(Exception):
    """The root of the web chat's errors: the route answers them, never the core."""


class WebChatStopped(WebChatError):
    """The chat takes no message now (it is stopping, or not started)."""


class WebChatElsewhere(WebChatError):
    """Another process of a shared database answers this chat now (issue 33): the page may send it again."""


class TooManyPages(WebChatError):
    """MAX_PAGES pages are open already."""


@dataclass(frozen=True, slots=True)
class WebEvent:
    """One thing a page shows live.

    Attributes:
        kind: reply | reminder | nudge | mirror (an outbox row), answer (an answer that is no outbox
            row), post (a binding's test post), file (an attachment of the answer before it), mode
            (the chat's mode may have changed: read it again; `text` is empty), partial (the text
            so far of a reply the model is writing, for its bubble `stream[0]`; stored nowhere),
            retraction (the constant line a private reply's bubbles `stream` show once its interval
            ended before it was finished; a page without them draws nothing).
        text: what to show (a file's name for a file).
        delivery_id: the outbox row it is, if one.
        conversation_id: the conversation the row belongs to (a mirror's is its source).
        message_id: the stored message it carries, if one (a transcript may show it already).
        confirm: a button under it: pressing it sends `confirm.command` as typed.
        attachment: the file of a `file` event.
        stream: the bubbles a reply was streamed into (their ids, as `WebStreamer.post` gave them): a
            partial event's one bubble, or a streamed reply's final text, which replaces the first
            of them (a page drops the others).
    """

    kind: str
    text: str
    delivery_id: int | None = None
    conversation_id: int | None = None
    message_id: int | None = None
    confirm: Confirmation | None = None
    attachment: Attachment | None = None
    stream: tuple[str, ...] = ()


_CLOSE = object()  # ends a page's events


class Page:
    """One open page: its transcript, then its live events, in order, each once (an async iterator).
    Iterating ends when the chat closes or when the page fell PAGE_QUEUE events behind
    (`overflowed`: it should reopen, drawing the history afresh)."""

    def __init__(self, size: int) -> None:
        self.transcript = Transcript(None, Mode.NORMAL, ())
        self._shown: frozenset[int] = frozenset()
        self.overflowed = False
        self._queue: asyncio.Queue[object] = asyncio.Queue(size + 1)  # room for the closing mark
        self._size = size
        self._closed = False
        self._ended = False
        self._begun = False

    def begin(self, transcript: Transcript) -> None:
        """The page's transcript: drawn first; its messages are left out of the live events."""
        self.transcript = transcript
        self._shown = transcript.message_ids
        self._begun = True

    def offer(self, event: WebEvent) -> None:
        """Queue `event` for the page; a page PAGE_QUEUE events behind is closed instead."""
        if self._closed:
            return
        if event.kind == PARTIAL and not self._begun:
            # Its reply is stored by the time the transcript is read (in the lane, after the turn):
            # the page would draw it twice, in its history and in this bubble (whose final event
            # it drops, as its history shows that message).
            return
        if self._queue.qsize() >= self._size:
            self.overflowed = True
            self.close()
            return
        self._queue.put_nowait(event)

    def close(self) -> None:
        """End the page's events after those queued; safe to call twice."""
        if not self._closed:
            self._closed = True
            self._queue.put_nowait(_CLOSE)

    def ready(self) -> list[WebEvent]:
        """The events queued now, without waiting (an events route may write them in one go)."""
        events = []
        while not self._ended and not self._queue.empty():
            event = self._take(self._queue.get_nowait())
            if event is not None:
                events.append(event)
        return events

    def __aiter__(self) -> Page:
        return self

    async def __anext__(self) -> WebEvent:
        while not self._ended:
            event = self._take(await self._queue.get())
            if event is not None:
                return event
        raise StopAsyncIteration

    def _take(self, item: object) -> WebEvent | None:
        if not isinstance(item, WebEvent):
            self._ended = True
            return None
        if item.conversation_id == self.transcript.conversation_id and item.message_id in self._shown:
            return None  # its transcript shows this message already
        return item


class PageHub:
    """The pages open in this process: the web chat's connection. The intake opens and closes it;
    the sender and the streamer publish to it while it is open."""

    def __init__(self, transcripts: TranscriptReader, *, page_queue: int = PAGE_QUEUE, max_pages: int = MAX_PAGES):
        self._transcripts = transcripts
        self._page_queue = page_queue
        self._max_pages = max_pages
        self._pages: list[Page] = []
        self.started = False
        self.closed = False

    def start(self) -> None:
        self.started = True

    def close(self) -> None:
        """End every page's events (after those queued); nothing is published any more."""
        self.closed = True
        for page in self._pages:
            page.close()
        self._pages.clear()

    def check(self, chat_id: str, parts_sent: int) -> None:
        """Only the owner's chat exists here, and only while the chat runs (every send and stream).

        Raises:
            DeliveryFailed: permanent for a chat other than the owner's; transient before the start
                or after the close (a row waits for the next start).
        """
        if chat_id != CHAT_ID:
            raise DeliveryFailed("chat not found", permanent=True, parts_sent=parts_sent)
        if not self.started or self.closed:
            raise DeliveryFailed("not started", permanent=False, parts_sent=parts_sent)

    @contextlib.asynccontextmanager
    async def open_page(self, history: int = HISTORY) -> AsyncIterator[Page]:
        """A page opens: it subscribes first, then reads the transcript (newest `history` items), so
        nothing published in between is missed; its events leave out what the transcript shows.

        Raises:
            WebChatStopped: the chat is closed.
            TooManyPages: MAX_PAGES pages are open already.
        """
        if self.closed:
            raise WebChatStopped("the web chat is closed")
        if len(self._pages) >= self._max_pages:
            raise TooManyPages(f"{self._max_pages} pages are open already")
        page = Page(self._page_queue)
        self._pages.append(page)
        try:
            page.begin(await self._transcripts(KEY, history))
            yield page
        finally:
            page.close()
            with contextlib.suppress(ValueError):
                self._pages.remove(page)

    async def history(self, limit: int = HISTORY) -> Transcript:
        """The chat's transcript now (the newest `limit` items), as a page that opened now would draw it."""
        return await self._transcripts(KEY, limit)

    @property
    def pages(self) -> int:
        """How many pages are open."""
        return len(self._pages)

    def publish(self, event: WebEvent) -> None:
        """Show `event` on every page open now (a page that fell behind is closed instead)."""
        for page in list(self._pages):
            page.offer(event)
            if page.overflowed:
                log.warning("web: a page fell %d events behind and was closed", self._page_queue)
                self._pages.remove(page)
