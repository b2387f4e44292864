"""The typing indicator, written once for every platform: shown while an event's turn runs, ended by its answer.

The core's entry begins it when an event is handed to its lane (shown only once the answer takes
longer than `EdgeSettings.typing_delay`), and ends it at the outcome; a message held for the rest
of its burst keeps it (`hold`, at most `typing_hold` seconds), until the burst's answer is handed
over, its row is sent or a reply shown while written posts its first message. One indicator per
chat; each request is courtesy: never retried, never fatal.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from core.ports.chat import BaseStreamer, ChatSender
from core.values.edge import EdgeSettings
from core.values.model import DeliveryTarget, StreamedReply
from core.values.retry import Sleep

log = logging.getLogger(__name__)

ChatKey = tuple[str, str]  # (platform, chat id)


class TypingService:
    """The typing indicator of each chat of the attached senders (those with `typing_every`)."""

    def __init__(
        self,
        edge: EdgeSettings,
        *,
        sleep: Sleep = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._edge = edge
        self._sleep = sleep
        self._monotonic = monotonic
        self._senders: dict[str, ChatSender] = {}
        # Each chat's indicator: its timer while the delay runs, then the task that renews it.
        self._tasks: dict[ChatKey, asyncio.TimerHandle | asyncio.Task[None]] = {}
        # When a held chat's indicator stops at the latest (absent: while its event's turn runs).
        self._until: dict[ChatKey, float] = {}

    def attach(self, sender: ChatSender) -> None:
        self._senders[sender.name] = sender

    def detach(self, sender: ChatSender) -> None:
        if self._senders.get(sender.name) is sender:
            del self._senders[sender.name]
            for platform, chat_id in list(self._tasks):
                if platform == sender.name:
                    self.done(platform, chat_id)

    def begin(self, target: DeliveryTarget) -> None:
        """An event of this chat went to its lane: show typing until its outcome (one indicator per chat)."""
        sender = self._senders.get(target.platform)
        if sender is None or sender.typing_every is None:
            return
        key = (target.platform, target.chat_id)
        self._until.pop(key, None)
        shown = self._tasks.get(key)
        if shown is None or (isinstance(shown, asyncio.Task) and shown.done()):
            # Not for a quick answer: the indicator would only cost a request before the reply. A
            # timer, not a task, waits for the delay: most answers come first, and cancel it.
            self._tasks[key] = asyncio.get_running_loop().call_later(
                self._edge.typing_delay, self._start, key, target, sender
            )

    def hold(self, target: DeliveryTarget, seconds: float) -> None:
        """The event was held for the rest of its burst: its answer comes later, in its lane; the
        indicator goes on meanwhile, `seconds` at most."""
        key = (target.platform, target.chat_id)
        if key in self._tasks:
            self._until[key] = self._monotonic() + seconds

    def done(self, platform: str, chat_id: str) -> None:
        """The answer is here (or none comes): the chat's indicator is not renewed any more."""
        key = (platform, chat_id)
        self._until.pop(key, None)
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()

    def showing(self, platform: str, chat_id: str) -> bool:
        """Whether the chat's indicator is kept up now (waiting for its delay, or renewed)."""
        shown = self._tasks.get((platform, chat_id))
        return shown is not None and not (isinstance(shown, asyncio.Task) and shown.done())

    def shown(self, streamer: BaseStreamer) -> BaseStreamer:
        """`streamer`, ending its chat's indicator as a reply shown while written posts its first message."""
        return _Shown(streamer, self)

    async def aclose(self) -> None:
        """Stop every indicator; safe to call twice."""
        shown = list(self._tasks.values())
        self._tasks.clear()
        self._until.clear()
        for each in shown:
            each.cancel()
        await asyncio.gather(*(t for t in shown if isinstance(t, asyncio.Task)), return_exceptions=True)

    def _start(self, key: ChatKey, target: DeliveryTarget, sender: ChatSender) -> None:
        # The delay is over and the answer is not here (its outcome would have cancelled the timer).
        self._tasks[key] = asyncio.get_running_loop().create_task(
            self._keep(key, target, sender), name=f"typing-{target.platform}"
        )

    async def _keep(self, key: ChatKey, target: DeliveryTarget, sender: ChatSender) -> None:
        every = sender.typing_every or 1.0
        try:
            while (until := self._until.get(key)) is None or self._monotonic() < until:
                try:
                    await sender.show_typing(target)
                except Exception as exc:  # noqa: BLE001 - typing is courtesy: never retried, never fatal
                    log.debug("%s: showing typing failed (%s)", target.platform, type(exc).__name__)
                await self._sleep(every)
        finally:
            if self._tasks.get(key) is asyncio.current_task():
                del self._tasks[key]
                self._until.pop(key, None)


class _Shown:
    """A streamer whose first posted message ends its chat's typing indicator."""

    def __init__(self, streamer: BaseStreamer, typing: TypingService) -> None:
        self.name = streamer.name
        self._streamer = streamer
        self._typing = typing

    def pieces(self, text: str, *, final: bool = False) -> list[str]:
        return self._streamer.pieces(text, final=final)

    async def post(self, reply: StreamedReply, text: str, index: int) -> str:
        if index == 0:
            self._typing.done(reply.target.platform, reply.target.chat_id)
        return await self._streamer.post(reply, text, index)

    async def edit(self, reply: StreamedReply, message_id: str, text: str) -> None:
        await self._streamer.edit(reply, message_id, text)
