"""The web chat's core-facing half: the owner's one direct conversation on platform `web`, handed to
the core like any chat, its replies, reminders and nudges delivered to the open pages.

A page route of the HTTP service calls three things (the routes, sign-in and CSRF are the
service's):
- `send(text, message_id=...)`: the signed-in owner typed a message (POST);
- `open_page()`: an `async with` giving a `Page`: its `transcript` (the history to draw first) and,
  iterated, the events to show live (a server-sent-events route); the page's queue is bounded;
- `start`, `stop_intake`, `aclose`: the adapter's lifecycle (core.ports.BaseChatAdapter).

What "delivered" means for a web page: an outbox row of the web chat (a reply, reminder, nudge or
mirror copy) is sent when it is published to the pages open in this process, and is marked sent
then, whether or not a page is open. Nothing waits for a page: a page that opens later draws the
history from the store (`Page.transcript`), where every reply, reminder and nudge it carried is
stored. So a delivery is sent once, and each page shows it once: a page drops a live event
carrying a message its transcript already shows (a row published after the page opened, or
published again after a crash between the publish and its mark). What is not stored (a command's
answer, a refusal) reaches only the pages open at that moment, as on a terminal. A delivery kept
pending until a page opens was the other choice; it would show each stored reply twice (history
and delivery), hold back the outbox's retries, and keep private text in rows for as long as no
page is open.

A reply shown while the model writes it (issue 24; core/delivery/streams.py) is also published:
WebChat is the outbox's streamer for `web` too (core.ports.BaseStreamer). Its `post` and `edit`
publish a `partial` event, the text so far of one bubble (`stream`, the "message id" the outbox
records), shown by the pages open now and kept nowhere (no history holds it, no row, no log line);
the reply's delivery then publishes the final text with that same bubble id, and a page replaces
the bubble's text with it rather than drawing a second one. A page's transcript is read in its
conversation's lane, after the turn running there: a page that opens while a reply is written
draws itself once the reply is stored, with the reply in its history, so the partial events
published while it waited are dropped (it has not begun), and the final's event too, as the
event of any message its history shows. Every page thus ends with the final text exactly once.

Private mode follows the same rules as everywhere: the web chat is a one-to-one chat of an
allowed person, the owner; `/private PASSPHRASE` is stored redacted and `send` tells the page not
to keep what was typed (`Sent.hide_input`); the transcript is the view of the current mode. Live
events are held in memory only, in bounded queues of open pages; nothing here logs their text.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from adapters.buttons import PendingButtons
from adapters.rendering.pieces import stream_pieces
from core.commands.registry import carries_secret
from core.turn.link import CoreLink
from core.values.copy import HANDLER_FAILED
from core.values.errors import DeliveryFailed
from core.values.model import (
    Attachment,
    Confirmation,
    ConversationKey,
    InboundMessage,
    Mode,
    OutboundDelivery,
    Reply,
    StreamedReply,
)
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
# A page has no message limit worth cutting a streamed reply at: it streams into one bubble. The
# outbox's pieces are UTF-16 code units, as on the chat apps; a reply this long is cut as they cut it.
STREAM_LIMIT = 1_000_000
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
        stream: the bubbles a reply was streamed into (their ids, as `WebChat.post` gave them): a
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


@dataclass(frozen=True, slots=True)
class Sent:
    """What a page learns at once from `send` (the answer itself comes through its events).

    `hide_input`: the message carried a secret (a passphrase): the page must not keep or show what
    was typed (the store kept `/private [redacted]`)."""

    hide_input: bool = False


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


class WebChat:
    """The owner's web chat: hands messages to the core, and is the outbox's sender and streamer
    for `web` (core.ports.BaseSender, core.ports.BaseStreamer). See the module docstring for what
    "delivered" means here."""

    name = PLATFORM

    def __init__(
        self,
        link: CoreLink,
        transcripts: TranscriptReader,
        *,
        page_queue: int = PAGE_QUEUE,
        max_pages: int = MAX_PAGES,
        stop_grace: float = 25.0,
    ) -> None:
        self._handle = link.handle
        self._outbox = link.outbox
        self._transcripts = transcripts
        self._page_queue = page_queue
        self._max_pages = max_pages
        self._stop_grace = stop_grace
        self._pages: list[Page] = []
        self._buttons = PendingButtons()
        self._posts = itertools.count(1)
        self._in_flight: set[asyncio.Task[Sent]] = set()
        self._taking = False
        self._started = False
        self._closed = False
        self._lost = asyncio.Event()  # never set: a chat in this process cannot lose its platform

    # --- lifecycle (core.ports.BaseChatAdapter) -----------------------------------

    async def start(self) -> None:
        """Take messages, and send the web chat's outbox rows and show its replies while written
        (registered with the outbox)."""
        if self._started or self._closed:
            return
        self._started = self._taking = True
        if self._outbox is not None:
            self._outbox.register(self)
            self._outbox.register_streamer(self)

    async def stop_intake(self) -> None:
        """Take no new message; what runs goes on, and open pages still get what the last turns wrote."""
        self._taking = False

    async def aclose(self) -> None:
        """Let the messages being handled finish (within `stop_grace`), stop sending, end every
        page's events; safe to call twice."""
        self._taking = False
        if self._closed:
            return
        self._closed = True
        if self._in_flight:
            await asyncio.wait(set(self._in_flight), timeout=self._stop_grace)
        if self._outbox is not None:
            self._outbox.unregister_streamer(self)
            self._outbox.unregister(self)
        for page in self._pages:
            page.close()
        self._pages.clear()

    async def wait_lost(self) -> str:
        await self._lost.wait()
        return "web: the chat was lost"

    def ready(self) -> str | None:
        """For GET /readyz: None while it takes messages."""
        if not self._started:
            return "not started"
        return None if self._taking else "stopping"

    # --- inbound --------------------------------------------------------------------

    async def send(self, text: str, *, message_id: str | None = None) -> Sent:
        """Hand the owner's message to the core; its answer reaches the pages as events.

        Args:
            text: what the owner typed.
            message_id: the page's id for this message, so a message sent twice (a retried POST)
                is handled once; None: a fresh one.
        Raises:
            WebChatStopped: the chat is not taking messages (stopping, or not started).
        """
        if not self._taking:
            raise WebChatStopped("the web chat is not taking messages now")
        inbound = InboundMessage(
            PLATFORM, CHAT_ID, USER, text, is_direct=True, message_id=message_id or uuid.uuid4().hex
        )
        # A task of its own, so that a stop can let it finish after the page stopped waiting.
        task = asyncio.get_running_loop().create_task(self._turn(inbound))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)
        return await asyncio.shield(task)

    async def _turn(self, inbound: InboundMessage) -> Sent:
        size = len(inbound.text)
        log.info("web: a message of %d chars", size)
        try:
            reply = await self._handle(inbound)
        except Exception as exc:  # noqa: BLE001 - the owner gets an answer, the log the kind only
            log.error("web: the core failed on a message (%s)", type(exc).__name__)
            reply = Reply(HANDLER_FAILED, delete_inbound=carries_secret(inbound.text))
        # The page keeps nothing of a message that may hold a secret, whatever the answer.
        hide = carries_secret(inbound.text) or (reply is not None and reply.delete_inbound)
        if reply is not None:
            await self._answer(reply)
        return Sent(hide_input=hide)

    async def _answer(self, reply: Reply) -> None:
        if reply.delivery_id is not None and reply.conversation_id is not None and self._outbox is not None:
            # An outbox row already: published and marked in the outbox's lane, never twice.
            self._buttons.expect(reply.delivery_id, reply.confirm)
            if reply.attachments:  # the file follows its words
                await self._outbox.deliver(reply.conversation_id, reply.delivery_id)
            else:
                self._outbox.hand_over(reply.conversation_id, reply.delivery_id)
        else:
            self._publish(WebEvent("answer", reply.text, confirm=reply.confirm))
        for attachment in reply.attachments:
            self._publish(WebEvent("file", attachment.filename, attachment=attachment))

    # --- pages ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def open_page(self, history: int = HISTORY) -> AsyncIterator[Page]:
        """A page opens: it subscribes first, then reads the transcript (newest `history` items), so
        nothing published in between is missed; its events leave out what the transcript shows.

        Raises:
            WebChatStopped: the chat is closed.
            TooManyPages: MAX_PAGES pages are open already.
        """
        if self._closed:
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

    async def mode_changed(self) -> None:
        """Something other than a message of this chat may have changed its mode (`/forget private`
        from the privacy page): every open page reads its mode again (a `mode` event)."""
        self._publish(WebEvent("mode", ""))

    @property
    def pages(self) -> int:
        """How many pages are open."""
        return len(self._pages)

    def _publish(self, event: WebEvent) -> None:
        for page in list(self._pages):
            page.offer(event)
            if page.overflowed:
                log.warning("web: a page fell %d events behind and was closed", self._page_queue)
                self._pages.remove(page)

    # --- outbound (core.ports.BaseSender) -------------------------------------------

    async def send_delivery(self, delivery: OutboundDelivery) -> int:
        """Publish an outbox row to the open pages: that is its send (one part). A reply shown while
        written (`delivery.streamed`) is published with its bubbles: its final text replaces the
        partial one where a page shows it (published again after a crash, it replaces it again). A
        retraction (`delivery.retracts`) is published as such: only a page that shows its bubbles
        draws its constant line there.

        Raises:
            DeliveryFailed: permanent for a chat other than the owner's; transient before `start`
                or after `aclose` (the row waits for the next start).
        """
        self._check(delivery.target.chat_id, delivery.parts_sent)
        self._publish(
            WebEvent(
                RETRACTION if delivery.retracts else delivery.kind,
                delivery.text,
                delivery_id=delivery.id,
                conversation_id=delivery.conversation_id,
                message_id=delivery.message_id,
                confirm=self._buttons.take(delivery.id),
                stream=delivery.streamed,
            )
        )
        return 1

    def _check(self, chat_id: str, parts_sent: int) -> None:
        """Only the owner's chat exists here, and only while the chat runs (every send and stream)."""
        if chat_id != CHAT_ID:
            raise DeliveryFailed("chat not found", permanent=True, parts_sent=parts_sent)
        if not self._started or self._closed:
            raise DeliveryFailed("not started", permanent=False, parts_sent=parts_sent)

    # --- shown while written (core.ports.BaseStreamer) --------------------------------

    def pieces(self, text: str, *, final: bool = False) -> list[str]:
        """One bubble: the web has no length limit worth cutting at. While not `final`, the last
        grapheme cluster (it may still grow) and trailing whitespace are held back."""
        return stream_pieces(text, STREAM_LIMIT, final=final)

    async def post(self, reply: StreamedReply, text: str, index: int) -> str:
        """Start the bubble of a reply being written: a partial event to the pages open now.

        Returns:
            The bubble's id (the outbox records it; the final send names it).
        Raises:
            DeliveryFailed: a chat other than the owner's, or the chat is not running.
        """
        self._check(reply.target.chat_id, 0)
        bubble = f"r{reply.delivery_id}-{index}"
        self._publish_partial(reply, bubble, text)
        return bubble

    async def edit(self, reply: StreamedReply, message_id: str, text: str) -> None:
        """Replace the text of a bubble of a reply being written (a partial event).

        Raises:
            DeliveryFailed: a chat other than the owner's, or the chat is not running.
        """
        self._check(reply.target.chat_id, 0)
        self._publish_partial(reply, message_id, text)

    def _publish_partial(self, reply: StreamedReply, bubble: str, text: str) -> None:
        self._publish(
            WebEvent(
                PARTIAL,
                text,
                delivery_id=reply.delivery_id,
                conversation_id=reply.conversation_id,
                stream=(bubble,),
            )
        )

    async def send_text(self, chat_id: str, text: str) -> str:
        """Publish `text` now, without a row (the test post that verifies a binding to the web chat).

        Raises:
            DeliveryFailed: a chat other than the owner's, or the chat is not started.
        """
        self._check(chat_id, 0)
        self._publish(WebEvent("post", text))
        return f"post-{next(self._posts)}"
