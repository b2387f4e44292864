"""The web chat: the owner's one direct conversation on platform `web`, a platform of three parts
(core/ports/chat.py) whose connection is the pages open in this process.

The HTTP service's chat routes call the intake (`WebIntake`, the routes, sign-in and CSRF are the
service's): `send(text, message_id=...)` when the signed-in owner typed a message (POST /send),
handed to the core, and `open_page()`, an `async with` giving a `Page`: its `transcript` (the
history to draw first) and, iterated, the events to show live (GET /events); a page's queue is
bounded. The core's hand-off and outbox give answers to the sender (`WebSender`), and replies being
written to the streamer (`WebStreamer`); both publish to the open pages (`PageHub`).

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

A reply shown while the model writes it (issue 24; core/delivery/streams.py) is published by the
streamer as `partial` events, the text so far of one bubble (`stream`, the "message id" the outbox
records), shown by the pages open now and kept nowhere (no history holds it, no row, no log line);
the reply's delivery then publishes the final text with that same bubble id, and a page replaces
the bubble's text with it rather than drawing a second one. A page's transcript is read in its
conversation's lane, after the turn running there: a page that opens while a reply is written
draws itself once the reply is stored, with the reply in its history, so the partial events
published while it waited are dropped (it has not begun), and the final's event too, as the
event of any message its history shows. Every page thus ends with the final text exactly once.

Private mode follows the same rules as everywhere: the web chat is a one-to-one chat of an
allowed person, the owner; `/private PASSPHRASE` is stored redacted and `send` tells the page not
to keep what was typed (`Sent.hide_input`, from the outcome's `secret`); the transcript is the view
of the current mode. Live events are held in memory only, in bounded queues of open pages; nothing
here logs their text.
"""

from __future__ import annotations

from dataclasses import dataclass

from adapters.web.chat.hub import (
    CHAT_ID,
    HISTORY,
    KEY,
    MAX_PAGES,
    PAGE_QUEUE,
    PARTIAL,
    PLATFORM,
    RETRACTION,
    USER,
    Page,
    PageHub,
    TooManyPages,
    TranscriptReader,
    WebChatElsewhere,
    WebChatError,
    WebChatStopped,
    WebEvent,
)
from adapters.web.chat.intake import Sent, WebIntake
from adapters.web.chat.sender import STREAM_LIMIT, WebSender, WebStreamer
from core.ports.chat import ChatCore, Platform
from core.values.edge import EdgeSettings
from core.values.transcript import Transcript

__all__ = [
    "CHAT_ID",
    "HISTORY",
    "KEY",
    "MAX_PAGES",
    "PAGE_QUEUE",
    "PARTIAL",
    "PLATFORM",
    "RETRACTION",
    "STREAM_LIMIT",
    "USER",
    "Page",
    "PageHub",
    "Sent",
    "TooManyPages",
    "Transcript",
    "TranscriptReader",
    "WebChatElsewhere",
    "WebChatError",
    "WebChatStopped",
    "WebEvent",
    "WebIntake",
    "WebPlatform",
    "WebSender",
    "WebStreamer",
    "web_platform",
]


@dataclass(frozen=True, slots=True)
class WebPlatform(Platform):
    """The web chat's three parts; its intake is also what the chat's pages call (adapters/web/chat_page.py)."""

    intake: WebIntake
    sender: WebSender
    streamer: WebStreamer


def web_platform(
    core: ChatCore,
    edge: EdgeSettings,
    *,
    transcripts: TranscriptReader,
    page_queue: int = PAGE_QUEUE,
    max_pages: int = MAX_PAGES,
) -> WebPlatform:
    """The web chat as a platform on `core`: `transcripts` reads the chat's history as its mode
    shows it (core.turn.transcript.Transcripts.read); `page_queue` events a page may fall behind,
    `max_pages` pages open at once. `edge` is every platform's; the web chat neither retries nor
    waits: a publish is its send, and the core's stop lets its last turns finish."""
    hub = PageHub(transcripts, page_queue=page_queue, max_pages=max_pages)
    return WebPlatform(PLATFORM, intake=WebIntake(core, hub), sender=WebSender(hub), streamer=WebStreamer(hub))
