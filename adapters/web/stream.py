"""The web chat's live events as server-sent events, carried from the core's event loop to the service's.

The web chat lives on the core's loop (its pages' queues belong to that loop); the HTTP service answers
on a loop of its own, in its own thread. One GET /events holds one `Relay`. On the core's loop `pump`
(started by the handler through `CoreBridge.call`) opens a page (`WebIntake.open_page`), puts its
transcript into the relay, then each live event, and the chat's mode again whenever it changed;
every put crosses to the service's loop through `CoreBridge.notify` (a plain call handed over
thread-safely). On the service's loop the handler takes them from the relay and writes them as SSE
frames. Neither side waits for the other: the relay is bounded, and a browser that falls RELAY_SIZE
events behind is cut off (its EventSource reconnects and draws the history afresh), as the chat cuts
off a page PAGE_QUEUE events behind. When the handler ends (the browser left, the service stops),
cancelling its `call` cancels the pump on the core's loop, which closes the page there.

A reply shown while the model writes it arrives as `partial` frames (its bubble's id and text so
far), then as the `live` frame of its final text naming the same bubble. When private mode ends the
page gets a `history` frame of normal mode's transcript at once, without waiting for the lane (a
private answer the end cut off may still run there), and a private bubble the end cut off gets the
`live` frame of its retraction, the constant line. Nothing is replayed by
event id (a reconnecting browser's Last-Event-ID is not needed): every connection starts with the
history, which holds every stored reply, a streamed one's final text included; partial text is
stored nowhere, so a page that connects mid-stream draws the bubble from the next partial frame.
Replies are drawn formatted (adapters/web/formatting.py); partial text is drawn as written.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from adapters.web.bridge import CoreBridge
from adapters.web.chat import PARTIAL, RETRACTION, Page, Transcript, WebChatError, WebEvent, WebIntake
from adapters.web.formatting import formatted
from core.values.transcript import ChatMode

RELAY_SIZE = 200
HEARTBEAT_SECONDS = 15.0  # a comment line keeps proxies from closing an idle stream
LEFT_SECONDS = 1.0  # how often a stream waiting for its next event looks whether its browser left
RETRY_MS = 1000  # how soon a browser reconnects after the stream ended

END_MARGIN = 0.05  # the pump wakes this long after private mode's end, so the store agrees it ended

ModeReader = Callable[[], Awaitable[ChatMode]]
# Reads, outside the lane, normal mode's transcript once private mode has ended (core/turn/transcript.py
# `Transcripts.at_end`), or the mode it is still in.
EndReader = Callable[[], Awaitable[Transcript | ChatMode]]


@dataclass(frozen=True, slots=True)
class Refused:
    """The page could not open (the chat is stopping, or too many pages are open)."""

    reason: str


_END = object()


class Relay:
    """A bounded hand-over from the core's loop (`put`, `close`) to the service's (`get`)."""

    def __init__(self, bridge: CoreBridge, size: int = RELAY_SIZE) -> None:
        self._bridge = bridge
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._size = size
        self._ended = False
        self.overflowed = False

    def put(self, item: Transcript | WebEvent | ChatMode | Refused) -> None:
        """From the core's loop: hand `item` to the service's."""
        self._bridge.notify(self._offer, item)

    def close(self) -> None:
        """From the core's loop: nothing more comes."""
        self._bridge.notify(self._offer, _END)

    def end(self) -> None:
        """On the service's loop: end the stream now (the service is stopping)."""
        self._offer(_END)

    async def get(self) -> Transcript | WebEvent | ChatMode | Refused | None:
        """On the service's loop: the next item; None once the relay ended."""
        item = await self._queue.get()
        return None if item is _END else item  # type: ignore[return-value]

    def _offer(self, item: object) -> None:
        if self._ended:
            return
        if item is not _END and self._queue.qsize() >= self._size:
            self.overflowed = True
            item = _END
        if item is _END:
            self._ended = True
        self._queue.put_nowait(item)


async def pump(
    chat: WebIntake,
    modes: ModeReader,
    relay: Relay,
    *,
    at_end: EndReader | None = None,
    now: Callable[[], float] = time.time,
) -> None:
    """On the core's loop: one page's transcript, live events and mode changes into `relay`, until
    the page ends (the chat closed, or the page fell behind) or this is cancelled.

    When private mode ends, the page gets normal mode's transcript at once (`at_end`, read outside
    the conversation's lane): by its own time (its expiry, or the idle timeout, at `ChatMode.ends_at`
    on the `now` clock) the pump wakes for it, even while an answer the end cut off still runs in
    the lane; ended by a command (/normal, /forget private), it follows that command's answer."""
    try:
        async with chat.open_page() as page:
            mode = page.transcript.state
            relay.put(page.transcript)
            while True:
                try:
                    event = await asyncio.wait_for(anext(page), _until_end(mode, now))
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    mode = await _ended(page, mode, relay, at_end, modes)
                    continue
                if event.kind != "mode":
                    relay.put(event)
                if event.kind in (PARTIAL, RETRACTION):
                    continue  # a reply being written (or withdrawn) changes no mode
                if not (mode.is_private or may_change_the_mode(event)):
                    continue  # a stored answer in normal mode: the mode is as it was
                try:
                    current = await asyncio.wait_for(modes(), _until_end(mode, now))
                except TimeoutError:  # its lane is busy, and private mode's time is up meanwhile
                    mode = await _ended(page, mode, relay, at_end, modes)
                    continue
                if current == mode:
                    continue
                if mode.is_private and not current.is_private:
                    mode = await _ended(page, mode, relay, at_end, modes)
                else:
                    mode = current
                    relay.put(current)
    except WebChatError as exc:
        relay.put(Refused(str(exc)))
    finally:
        relay.close()


def _until_end(mode: ChatMode, now: Callable[[], float]) -> float | None:
    """Seconds until private mode ends by itself (a little after, so it has); None: no end to wait for."""
    if not mode.is_private or mode.ends_at is None:
        return None
    return max(mode.ends_at - now(), 0.0) + END_MARGIN


async def _ended(page: Page, mode: ChatMode, relay: Relay, at_end: EndReader | None, modes: ModeReader) -> ChatMode:
    """Private mode may have ended: normal mode's transcript to the page if it has (drawn at once,
    in place of everything private), else the mode it is still in. Returns the page's mode now."""
    if at_end is None:
        current = await modes()
        if current != mode:
            relay.put(current)
        return current
    after = await at_end()
    if isinstance(after, ChatMode):  # still private: activity moved its idle end
        if after != mode:
            relay.put(after)
        return after
    page.begin(after)  # from now on, live events leave out what this transcript shows
    relay.put(after)
    return after.state


def may_change_the_mode(event: WebEvent) -> bool:
    """Whether the mode may have changed by the time `event` arrives: a command's answer (no stored
    message: /private, /normal, /forget private), or the chat said so (`mode`). A stored reply,
    reminder or nudge of normal mode leaves it as it was (nothing automatic enters private mode). In
    private mode the pump reads the mode after every event: each message moves when it ends."""
    return event.kind == "mode" or event.message_id is None


def frame(kind: str, data: dict[str, object]) -> bytes:
    """One server-sent event; its JSON is one line (json escapes every newline)."""
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


# What a page draws formatted: what the companion says (never what the owner typed, nor a file's name).
FORMATTED = frozenset({"reply", "reminder", "nudge", "mirror", "answer", "post"})


def history_data(transcript: Transcript) -> dict[str, object]:
    items: list[dict[str, object]] = []
    for item in transcript.items:
        if item.is_placeholder:
            items.append({"placeholder": True})
            continue
        entry: dict[str, object] = {"role": item.role or "", "text": item.text or ""}
        if item.role == "assistant" and (shown := formatted(item.text or "")) is not None:
            entry["format"] = shown
        items.append(entry)
    return {"mode": transcript.state.mode.value, "segment": transcript.state.segment_id, "items": items}


def partial_data(event: WebEvent) -> dict[str, object]:
    """A reply being written: its bubble and its text so far (drawn as written)."""
    return {"stream": event.stream[0], "text": event.text}


def event_data(event: WebEvent) -> dict[str, object]:
    data: dict[str, object] = {"kind": event.kind, "text": event.text}
    if event.kind in FORMATTED and (shown := formatted(event.text)) is not None:
        data["format"] = shown
    if event.stream:
        data["stream"] = list(event.stream)  # the bubbles it was shown in while written: the first takes it
    if event.confirm is not None:
        data["confirm"] = {"label": event.confirm.label, "command": event.confirm.command}
    if event.attachment is not None:
        data["file"] = {
            "name": event.attachment.filename,
            "type": event.attachment.mime_type,
            "data": base64.b64encode(event.attachment.data).decode("ascii"),
        }
    return data
