"""Replies shown while the model writes them: the turn offers the newest text, an outbox lane shows it.

A `ReplyStream` hands a reply over from its turn to the outbox. The turn, in its conversation's
lane, only replaces the newest text and wakes the consumer: it never waits on a platform. The
consumer, `StreamShow`, runs in the outbox's lane of the reply's chat (`Outbox.open_stream`):
it posts the text and edits it at most every `edit_seconds`, always with the newest text, so
the states in between are dropped and the buffer is one string. A slow or throttled platform
costs edits, never the lane's time. The reply's final text is not shown here: it is the
reply's delivery row, sent (an edit of these messages) by the outbox once this let go.

A private reply carries its interval's expiry (`StreamedReply.ends_at`): nothing is posted or edited
at or after it. A request still running then is cancelled, and the reply's stream ends (`ended`):
the outbox makes what it showed the constant line, and the turn stops at its next text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from core.ports.chat import BaseStreamer
from core.ports.store.outbox import StreamMarks
from core.values.errors import DeliveryFailed, DeliveryThrottled
from core.values.model import StreamedReply
from core.values.retry import Sleep

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StreamPacing:
    """How a streamed reply is shown.

    Attributes:
        edit_seconds: at most one post or edit this often (COMPANION_STREAM_EDIT_SECONDS).
        first_seconds: the first text is shown once the answer has run this long past its first
            useful text; an answer finished by then goes out whole, as one message, not as a post
            and an edit a moment apart.
        max_seconds: after the platform asked to wait, or took longer than `edit_seconds` for one
            edit, the rest of the reply edits half as often, but at least this often.
    """

    edit_seconds: float = 1.0
    first_seconds: float = 0.4
    max_seconds: float = 8.0

    def slower(self, interval: float) -> float:
        return min(max(interval * 2, self.edit_seconds), max(self.max_seconds, self.edit_seconds))


class ReplyStream:
    """One reply while the model writes it: its newest text, and its delivery row (status
    'streaming') once the outbox wrote it, when its first text was due.

    The producer (the turn) calls `publish` and `close`, which never suspend, and `row` once it
    closed it; the consumer (one `StreamShow`) reads `text` and `version` and waits with
    `wait_change` and `pause`."""

    def __init__(self) -> None:
        # Its row, once written: when its first text is due (the outbox's `_show`), never sooner.
        self.reply: StreamedReply | None = None
        self._writing: asyncio.Future[None] | None = None
        self._text = ""
        self._settled = False
        self._version = 0
        self._changed = asyncio.Event()
        self._closed = asyncio.Event()
        self._ended = False
        self._pausing: asyncio.Future[None] | None = None  # resolved by `close` (see `pause`)

    # --- the turn's side ------------------------------------------------------------------

    def publish(self, text: str, *, settled: bool = False) -> None:
        """The newest text of the reply (the one before it is dropped if it was not shown yet).
        `settled`: its end is ours (a constant line), not a model's that may still grow, so it is
        shown whole."""
        if (text, settled) != (self._text, self._settled) and not self._closed.is_set():
            self._text = text
            self._settled = settled
            self._version += 1
            self._changed.set()

    def close(self) -> None:
        """The model is done (or the turn ended): nothing more is shown; the final text is the delivery."""
        self._closed.set()
        self._changed.set()
        _wake(self._pausing)

    async def row(self) -> int | None:
        """The reply's delivery row, once no write of it is in flight (the turn, once it closed the
        stream, takes that row over); None: none was written, as for an answer closed before its
        first text was due."""
        if self._writing is not None:
            await asyncio.shield(self._writing)  # the write goes on if the turn is cut off meanwhile
        return self.reply.delivery_id if self.reply is not None else None

    @property
    def ended(self) -> bool:
        """Its interval ended while it was shown: nothing more of the reply may be shown or written."""
        return self._ended

    # --- the outbox's side ----------------------------------------------------------------

    def end(self) -> None:
        """The reply's interval ended: the showing is over for good (see `ended`)."""
        self._ended = True
        self.close()

    def writing(self) -> asyncio.Future[None]:
        """Called by the outbox just before it writes the row; it resolves the future once the
        write is over, written or not (`row` waits for it)."""
        self._writing = asyncio.get_running_loop().create_future()
        return self._writing

    @property
    def text(self) -> str:
        return self._text

    @property
    def settled(self) -> bool:
        return self._settled

    @property
    def version(self) -> int:
        return self._version

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_change(self, version: int) -> None:
        """Until the text is newer than `version`, or the stream closed."""
        while self._version == version and not self._closed.is_set():
            self._changed.clear()
            await self._changed.wait()

    async def pause(self, seconds: float, sleep: Sleep) -> bool:
        """Wait `seconds` (by `sleep`) unless the stream closes first; whether it is still open."""
        if self._closed.is_set():
            return False
        if seconds <= 0:
            return True
        if sleep is asyncio.sleep:
            # The loop's own timer and one future `close` resolves: no task for either (a turn's
            # answer done before its first text was due ends this pause at once).
            loop = asyncio.get_running_loop()
            self._pausing = woken = loop.create_future()
            timer = loop.call_later(seconds, _wake, woken)
            try:
                await woken
            finally:
                timer.cancel()
                self._pausing = None
            return not self._closed.is_set()
        sleeping = asyncio.ensure_future(sleep(seconds))
        closing = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait({sleeping, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeping, closing):
                task.cancel()
            await asyncio.gather(sleeping, closing, return_exceptions=True)
        return not self._closed.is_set()


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class StreamShow:
    """Shows one `ReplyStream` through a platform's streamer, paced; runs inside the outbox lane of
    the reply's chat, so the reply's final send (the same lane) comes after its last edit."""

    def __init__(
        self,
        streamer: BaseStreamer,
        store: StreamMarks,
        pacing: StreamPacing,
        *,
        sleep: Sleep,
        monotonic: Callable[[], float],
        now: Callable[[], float],
    ) -> None:
        self._streamer = streamer
        self._store = store
        self._pacing = pacing
        self._sleep = sleep
        self._monotonic = monotonic
        self._now = now  # the clock the interval's expiry is on (core.ports.Clock.now)
        self.ids: list[str] = []  # the messages shown, in order
        self._shown: list[str] = []  # what each of them shows now
        self.requests = 0  # posts and edits sent
        self.ended = False  # stopped by the end of the reply's interval

    async def run(self, stream: ReplyStream, reply: StreamedReply) -> None:
        """Show the stream's newest text (`reply`: its row) until it closes; then keep the pace once
        more, so the final edit that follows is no sooner than the next one would have been. A
        private reply stops at its interval's expiry (`ended`): no request is sent at or after it,
        and one running then is cancelled."""
        interval = self._pacing.edit_seconds
        last: float | None = None
        version = -1
        while not stream.closed:
            left = self._left(reply)
            if left is not None and left <= 0:
                self.ended = True
                break
            if stream.version == version:
                with contextlib.suppress(TimeoutError):  # woken at the end: it is looked at first
                    async with asyncio.timeout(left):
                        await stream.wait_change(version)
                continue
            if last is not None:
                wait = last + interval - self._monotonic()
                if wait > 0:
                    if not await stream.pause(_until(wait, left), self._sleep):
                        break
                    if left is not None and wait > left:
                        continue  # paused until the end
            left = self._left(reply)
            if left is not None and left <= 0:  # the end came while it waited: nothing more is sent
                self.ended = True
                break
            version = stream.version
            began = self._monotonic()
            bound = asyncio.timeout(left)
            try:
                async with bound:
                    await self._show(reply, self._streamer.pieces(stream.text, final=stream.settled))
            except TimeoutError:
                if not bound.expired():
                    raise
                log.info("delivery %s: its interval ended while it was shown", reply.delivery_id)
                self.ended = True
                break
            except DeliveryThrottled as exc:
                # The platform said how long to wait: waited here (this lane holds nothing of the
                # turn's), and the rest of this reply edits more slowly.
                interval = self._pacing.slower(interval)
                log.info(
                    "delivery %s: the platform asked to wait %.1f s; editing every %.1f s now",
                    reply.delivery_id,
                    exc.retry_after,
                    interval,
                )
                if not await stream.pause(_until(exc.retry_after, self._left(reply)), self._sleep):
                    break
            except DeliveryFailed as exc:
                log.info("delivery %s: showing it while written stopped (%s)", reply.delivery_id, exc.kind)
                break
            else:
                if self._monotonic() - began > interval:  # a slow platform: fewer edits
                    interval = self._pacing.slower(interval)
            last = self._monotonic()
        if last is not None and not self.ended:
            wait = _until(last + interval - self._monotonic(), self._left(reply))
            if wait > 0:
                await self._sleep(min(wait, interval))

    def _left(self, reply: StreamedReply) -> float | None:
        """Seconds until the reply's interval ends (None: it has no end set)."""
        return None if reply.ends_at is None else reply.ends_at - self._now()

    async def _show(self, reply: StreamedReply, pieces: list[str]) -> None:
        for index, piece in enumerate(pieces):
            if index < len(self.ids):
                if self._shown[index] != piece:
                    await self._streamer.edit(reply, self.ids[index], piece)
                    self._shown[index] = piece
                    self.requests += 1
                continue
            message_id = await self._streamer.post(reply, piece, index)
            self.ids.append(message_id)
            self._shown.append(piece)
            self.requests += 1
            # Before any further edit: after a crash from here on, the final send edits this message.
            await self._store.record_streamed(reply.delivery_id, tuple(self.ids))


def _until(seconds: float, left: float | None) -> float:
    """`seconds`, but no later than the end `left` seconds away (if one is set)."""
    return seconds if left is None else min(seconds, max(left, 0.0))
