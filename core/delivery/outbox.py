"""The outbox: outbound messages are delivery rows first; this service sends them and marks them.

Every reply and mirror (and later every reminder and nudge) is written as a pending delivery
in the transaction that stores what it carries. Deliveries go out in order per lane: one
conversation's deliveries to one (platform, chat), so a mirror target that is down never
holds back the replies. `deliver` sends a lane right after the turn; `dispatch_due`
(scheduled) sends what is due again, with exponential backoff and jitter, across outages
of any length and across restarts, and never runs the model again. Only a permanent
refusal (blocked, chat not found) ends a delivery unsent, recorded by kind; on a mirror it
also disables the binding and tells the source conversation once.

A reply shown while the model writes it (core/delivery/streams.py) is shown in the same lane:
`open_stream` writes its row (status 'streaming') once its first text is due and shows it there
until the turn closes the stream; the reply's delivery, written later with the final text, then
goes out in that lane as the final edit of the messages shown. An answer finished before its
first text was due writes no such row: it goes out whole, as any reply.

Nothing of a private interval goes out after it ended. The store never picks a delivery of an
ended interval, and the transaction that ends one turns the rows that showed messages into their
retraction (a constant line that edits them once). A send of an interval's delivery already running
is bounded by the interval's expiry and cancelled when the interval ends otherwise
(`interval_ended`, called by the valve); a stream or send the end cut off makes its own row the
retraction and sends it in the same lane.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable

from core.delivery.ends import IntervalOver, IntervalSends
from core.delivery.streams import ReplyStream, StreamPacing, StreamShow
from core.ports.chat import BaseSender, BaseStreamer
from core.ports.clock import Clock
from core.ports.metrics import NO_METRICS, Metrics
from core.ports.store.outbox import OutboxStore
from core.values import copy
from core.values.errors import DeliveryFailed, IntervalEnded
from core.values.locks import KeyedLocks
from core.values.model import DeliveryTarget, OutboundDelivery
from core.values.retry import Sleep, backoff_delay

log = logging.getLogger(__name__)

# A new delivery is sent by its adapter right after the turn; the dispatcher leaves it alone this
# long, so under load it does not queue behind the adapters for rows they are sending anyway.
UNTRIED_GRACE = 10.0
# Replies are shown while written as shipped (COMPANION_STREAM_EDIT_SECONDS=1.0).
SHIPPED_PACING = StreamPacing()


class Outbox:
    """Sends pending deliveries through the registered senders (one per platform), in order
    per conversation; a delivery that fails transiently holds back the later ones of its
    conversation until it went out."""

    def __init__(
        self,
        store: OutboxStore,
        clock: Clock,
        *,
        base_delay: float = 2.0,
        max_delay: float = 300.0,
        rand: Callable[[], float] = random.random,
        platforms: frozenset[str] | None = None,
        metrics: Metrics = NO_METRICS,
        pacing: StreamPacing | None = SHIPPED_PACING,
        sleep: Sleep = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        holds: Callable[[int], bool] | None = None,
    ) -> None:
        self._metrics = metrics
        # A shared database (issue 33): the conversations this process holds (core/ports/store/claims.py); the
        # dispatcher sends only theirs, so each delivery goes out from the one process holding its conversation.
        self._holds = holds
        # Replies shown while written (None: COMPANION_STREAM_EDIT_SECONDS=off), and the streaming
        # half of each platform that has one.
        self._pacing = pacing
        self._streamers: dict[str, BaseStreamer] = {}
        self._sleep = sleep
        self._monotonic = monotonic
        self._store = store
        # The platforms configured in this process: what may be delivered to, whether or not its
        # sender is registered at this instant (None: the registered ones).
        self._configured = platforms
        # Lanes handed over to be sent in the background (`hand_over`), awaited by `flush`.
        self._handed: set[asyncio.Task[None]] = set()
        self._clock = clock
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._rand = rand
        self._senders: dict[str, BaseSender] = {}
        self._locks: KeyedLocks[tuple[int, str, str]] = KeyedLocks()
        # Sends of private intervals' deliveries, each no longer than its interval lives.
        self._interval_sends = IntervalSends(clock)

    # --- senders ------------------------------------------------------------

    def register(self, sender: BaseSender) -> None:
        self._senders[sender.name] = sender

    def unregister(self, sender: BaseSender) -> None:
        if self._senders.get(sender.name) is sender:
            del self._senders[sender.name]

    def serves(self, platform: str) -> bool:
        return platform in self._senders

    def register_streamer(self, streamer: BaseStreamer) -> None:
        self._streamers[streamer.name] = streamer

    def unregister_streamer(self, streamer: BaseStreamer) -> None:
        if self._streamers.get(streamer.name) is streamer:
            del self._streamers[streamer.name]

    def streams(self, platform: str) -> bool:
        """Whether a reply on `platform` is shown while the model writes it: streaming is on and the
        platform's streaming half is registered now (a reply otherwise simply goes out whole)."""
        return self._pacing is not None and platform in self._streamers

    @property
    def platforms(self) -> frozenset[str]:
        """The platforms deliveries are written for: the configured ones (a delivery whose sender is
        not registered right now waits as a pending row), else those with a registered sender."""
        return self._configured if self._configured is not None else frozenset(self._senders)

    # --- sending --------------------------------------------------------------

    async def append_text(self, delivery_id: int, suffix: str) -> None:
        await self._store.append_text(delivery_id, suffix)

    async def send_text(self, platform: str, chat_id: str, text: str) -> str:
        """Post `text` to a chat now, without a row: the test post that verifies a binding.

        Returns:
            The platform's id of the first message.
        Raises:
            DeliveryFailed: no sender for `platform` in this process (kind "not configured"), or
                the platform did not take it.
        """
        sender = self._senders.get(platform)
        if sender is None:
            raise DeliveryFailed("not configured", permanent=True, parts_sent=0)
        return await sender.send_text(chat_id, text)

    async def deliver(self, conversation_id: int, delivery_id: int, *, written: OutboundDelivery | None = None) -> bool:
        """Send the pending deliveries of the lane of `delivery_id` (its conversation, platform and
        chat) up to it, oldest first. Returns whether they all went out (False: the rest waits
        for `dispatch_due`). `written`: that row as the store wrote it, a normal reply with nothing
        earlier waiting in its lane (RecordedReply.delivery): sent without reading the lane again."""
        if written is not None and written.segment_id is not None:
            written = None  # a private interval's row is picked with the clock, at its send, as below
        lane = (written.target.platform, written.target.chat_id) if written else await self._store.lane_of(delivery_id)
        if lane is None:
            return True  # sent and pruned long ago
        async with self._locks.of((conversation_id, *lane)):
            ends = self._interval_sends.ends(conversation_id)
            # Picked with the clock: nothing of an interval that has ended (or was forgotten) goes out.
            picked = (
                [written] if written else await self._store.pending_of(conversation_id, delivery_id, self._clock.now())
            )
            for delivery in picked:
                sender = self._senders.get(delivery.target.platform)
                if sender is None:
                    return False
                if not await self._send_one(sender, delivery, ends):
                    return False
            return True

    async def deliver_all(self, conversation_id: int, delivery_ids: tuple[int, ...]) -> None:
        """Send several lanes one after another (a turn's mirror rows, one per binding)."""
        for delivery_id in delivery_ids:
            await self.deliver(conversation_id, delivery_id)

    def hand_over(self, conversation_id: int, *delivery_ids: int) -> None:
        """Send these deliveries' lanes in the background, so that whoever wrote them (a conversation's
        lane, an adapter) never waits on a platform. What does not go out now stays pending for
        `dispatch_due`; a stop waits for these sends (`flush`)."""
        task = asyncio.get_running_loop().create_task(self.deliver_all(conversation_id, delivery_ids))
        self._handed.add(task)
        task.add_done_callback(self._sent)

    def hand_over_written(self, delivery: OutboundDelivery) -> None:
        """`hand_over` of a normal reply just written with nothing earlier waiting in its lane (the store
        read that in the transaction that wrote it, RecordedReply.delivery): sent as written, without
        reading its lane again."""
        task = asyncio.get_running_loop().create_task(self._deliver_written(delivery))
        self._handed.add(task)
        task.add_done_callback(self._sent)

    async def _deliver_written(self, delivery: OutboundDelivery) -> None:
        await self.deliver(delivery.conversation_id, delivery.id, written=delivery)

    def dispatch_in_background(self) -> None:
        """What the last process left, sent once the adapters can send (`dispatch_due(at_start=True)`)
        without holding up the start; a stop waits for it like any send handed over, so a send is
        never cut off between the platform taking it and its mark."""
        task = asyncio.get_running_loop().create_task(self._dispatch_left())
        self._handed.add(task)
        task.add_done_callback(self._sent)

    async def _dispatch_left(self) -> None:
        await self.dispatch_due(at_start=True)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._handed.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("sending deliveries failed (%s); the dispatcher tries again", type(task.exception()).__name__)

    async def settle(self, grace: float) -> bool:
        """Wait up to `grace` seconds for the sends handed over; whether they all finished."""
        if self._handed:
            await asyncio.wait(set(self._handed), timeout=max(grace, 0.0))
        return not self._handed

    async def flush(self, grace: float) -> int:
        """The stop's last step before connections close: wait for the sends handed over, then send
        what is still pending on the registered platforms, for at most `grace` seconds. A send cut
        off leaves its row pending: the next start sends it. Returns how many sends were cut off."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(grace, 0.0)
        if self._handed:
            await asyncio.wait(set(self._handed), timeout=max(deadline - loop.time(), 0.0))
        if self._senders and deadline - loop.time() > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    await self.dispatch_due(at_start=True)
        late = list(self._handed)
        for task in late:
            task.cancel()
        if late:
            await asyncio.gather(*late, return_exceptions=True)
            log.warning("%d sends were cut off by the stop; their rows stay pending for the next start", len(late))
        return len(late)

    async def dispatch_due(self, *, at_start: bool = False) -> int:
        """Scheduled: send what is due, per conversation in order. A delivery never tried is left
        to the adapter sending it for `UNTRIED_GRACE` seconds, except `at_start` (what the last
        process left). Returns how many conversations were fully flushed."""
        due = await self._store.due(
            frozenset(self._senders), self._clock.now(), untried_after=0.0 if at_start else UNTRIED_GRACE
        )
        flushed = 0
        for conversation_id, newest in due:
            if self._holds is not None and not self._holds(conversation_id):
                continue  # another process's to send (or, its holder dead, the one taking it over)
            if await self.deliver(conversation_id, newest):
                flushed += 1
        return flushed

    # --- the end of an interval ----------------------------------------------------------------

    def interval_ended(self, conversation_id: int | None = None) -> None:
        """A private interval ended: of `conversation_id` (/normal, /forget private, the idle timeout,
        an expiry met at a read), or some by expiry (None: the sweep). A send of that conversation's
        interval still running is cancelled (one past an expiry stops by itself), and the
        retractions the end wrote are sent now, in the background."""
        if conversation_id is not None:
            self._interval_sends.end(conversation_id)
        task = asyncio.get_running_loop().create_task(self._send_retractions(conversation_id))
        self._handed.add(task)
        task.add_done_callback(self._sent)

    async def _send_retractions(self, conversation_id: int | None) -> None:
        for conversation, delivery_id in await self._store.retractions(conversation_id):
            if self._holds is None or self._holds(conversation):
                await self.deliver(conversation, delivery_id)

    async def _retract(
        self,
        delivery_id: int,
        conversation_id: int,
        target: DeliveryTarget,
        shown: tuple[str, ...],
        ends_at: float | None,
    ) -> None:
        """Inside the lane: the reply `delivery_id` was cut off by the end of its interval after it
        showed `shown`: its row becomes their retraction (the store refuses while the interval is
        open), sent now. `ends_at`: the expiry waited for (the end has come, whatever a clock says
        a moment later)."""
        now = self._clock.now() if ends_at is None else max(self._clock.now(), ends_at)
        retraction = await self._store.retract(delivery_id, conversation_id, target, shown, now)
        if retraction is None:
            return
        log.info(
            "delivery %s (conversation %s): its interval ended; what it showed is withdrawn",
            delivery_id,
            conversation_id,
        )
        sender = self._senders.get(target.platform)
        if sender is not None:
            await self._send_one(sender, retraction)

    # --- replies shown while written ----------------------------------------------------------

    def open_stream(self, conversation_id: int, target: DeliveryTarget, segment_id: int | None) -> ReplyStream:
        """A reply about to be shown while written, shown in its lane in the background. Its row
        (status 'streaming', no text: `record_reply` gives it the final text later) is written when
        its first text is due, before anything of it is posted; an answer finished sooner goes out
        whole, as any reply, and no row of a stream is written for it. The caller (a turn) only
        publishes to the stream, closes it and then asks for its row (`ReplyStream.row`); it never
        waits on the platform."""
        stream = ReplyStream()
        task = asyncio.get_running_loop().create_task(self._show(stream, conversation_id, target, segment_id))
        self._handed.add(task)
        task.add_done_callback(self._sent)
        return stream

    async def _show(
        self, stream: ReplyStream, conversation_id: int, target: DeliveryTarget, segment_id: int | None
    ) -> None:
        pacing = self._pacing
        if pacing is None or not await stream.pause(pacing.first_seconds, self._sleep):
            return  # written before its first text was due: it goes out whole, as any reply
        written = stream.writing()
        try:
            reply = stream.reply = await self._store.open_stream(
                conversation_id, target, self._clock.now(), segment_id=segment_id
            )
        except IntervalEnded:
            # Nothing was shown: the turn stops at its next text, as when the interval ends while shown.
            stream.end()
            return
        finally:
            written.set_result(None)
        streamer = self._streamers.get(target.platform)
        if streamer is None:
            return
        async with self._locks.of((reply.conversation_id, target.platform, target.chat_id)):
            # An earlier delivery of this lane still pending goes first: this reply then goes whole.
            if stream.closed or not await self._store.may_stream(reply.delivery_id, self._clock.now()):
                return
            show = StreamShow(
                streamer, self._store, pacing, sleep=self._sleep, monotonic=self._monotonic, now=self._clock.now
            )
            await show.run(stream, reply)
            if show.ended:
                # Its interval ended while it was shown: the turn stops at its next text, and what was
                # shown becomes the constant line, here in its lane, before anything else of it.
                stream.end()
                await self._retract(reply.delivery_id, reply.conversation_id, target, tuple(show.ids), reply.ends_at)
            log.info(
                "delivery %s (conversation %s) shown while written: %d messages, %d requests",
                reply.delivery_id,
                reply.conversation_id,
                len(show.ids),
                show.requests,
            )

    async def left_stream(self, conversation_id: int, before: float) -> int | None:
        """The streaming row a process stopped before `before` left in the conversation: the answer
        of its cut-off turn takes it over (its send edits the messages the stream showed)."""
        return await self._store.left_stream(conversation_id, before)

    async def cut_off_streams(self, before: float) -> int:
        """Streaming rows left before `before` that no answer took over: each message they showed is
        edited into `copy.STREAM_CUT_OFF` (the partial words do not stay); sent in their lanes."""
        pending = await self._store.cut_off_streams(before, copy.STREAM_CUT_OFF, self._clock.now())
        for conversation_id, delivery_id in pending:
            self.hand_over(conversation_id, delivery_id)
        return len(pending)

    async def prune(self, keep_seconds: float = 7 * 86400.0) -> int:
        return await self._store.prune_settled(self._clock.now() - keep_seconds)

    async def _send_one(self, sender: BaseSender, delivery: OutboundDelivery, ends: int | None = None) -> bool:
        try:
            parts = await self._interval_sends.send(sender, delivery, ends)
        except IntervalOver as over:
            # Nothing more of it goes out; what it showed while written becomes the constant line.
            log.info(
                "delivery %s (conversation %s): its interval ended; not sent", delivery.id, delivery.conversation_id
            )
            ends_at = delivery.ends_at if over.expired else None
            await self._retract(delivery.id, delivery.conversation_id, delivery.target, delivery.streamed, ends_at)
            return True
        except DeliveryFailed as exc:
            return await self._failed(delivery, exc.kind, exc.permanent, max(exc.parts_sent, delivery.parts_sent))
        except Exception as exc:  # noqa: BLE001 - an unknown failure is retried, never lost
            return await self._failed(delivery, type(exc).__name__, False, delivery.parts_sent)
        await self._store.mark_sent(delivery.id, parts, self._clock.now())
        self._count(delivery, "sent")
        log.info(
            "delivery %s (%s, conversation %s) sent in %d parts after %d retries",
            delivery.id,
            delivery.kind,
            delivery.conversation_id,
            parts,
            delivery.attempts,
        )
        return True

    async def _failed(self, delivery: OutboundDelivery, kind: str, permanent: bool, parts_sent: int) -> bool:
        """Record a failure. A permanent one settles the delivery and lets the next go, except on a
        mirror: that ends the lane (its binding is disabled, its other copies settled)."""
        now = self._clock.now()
        self._count(delivery, "failed" if permanent else "retried", kind)
        if permanent and delivery.kind == "mirror":
            # The target refused for good (blocked, chat not found): the binding is disabled rather
            # than retried forever, and the source is told once.
            notice = await self._store.give_up_mirror(delivery.id, parts_sent, kind, now, copy.MIRROR_DISABLED)
            log.warning(
                "mirror %s (conversation %s) refused for good (%s); its binding is disabled",
                delivery.id,
                delivery.conversation_id,
                kind,
            )
            if notice is not None:
                await self.deliver(delivery.conversation_id, notice)
            return False  # the binding's later copies were settled with it: none of them may go out
        if permanent:
            await self._store.mark_failed(delivery.id, parts_sent, kind, now)
            log.warning("delivery %s (conversation %s) given up: %s", delivery.id, delivery.conversation_id, kind)
            return True
        delay = self.backoff(delivery.attempts + 1)
        await self._store.mark_retry(delivery.id, parts_sent, kind, now + delay)
        log.info(
            "delivery %s (conversation %s) failed (%s), attempt %d; next try in %.0f s",
            delivery.id,
            delivery.conversation_id,
            kind,
            delivery.attempts + 1,
            delay,
        )
        return False

    def _count(self, delivery: OutboundDelivery, state: str, reason: str | None = None) -> None:
        """The operator's counters; a reply inside a private thread is counted nowhere."""
        if delivery.in_segment:
            return
        if delivery.retracts:  # what a private answer showed, withdrawn: as private as the answer
            return
        self._metrics.delivery_settled(delivery.kind, state)
        if reason is not None:
            self._metrics.send_error(reason)

    def backoff(self, attempt: int) -> float:
        """Exponential, capped, with jitter: between half and all of base * 2^(attempt-1)."""
        return backoff_delay(attempt, base=self._base_delay, cap=self._max_delay, jitter=0.5, rand=self._rand)
