"""The hand-off, written once for every platform: an answer goes to the outbox, or to the platform's sender.

An answer the core wrote as an outbox row goes out through the outbox's lanes (sent and marked
there, never twice); any other answer (a refusal, a command's answer where the mode could not be
read, the failure fallback, the terminal's) is sent directly by the platform's `ChatSender`. A
message that carried a secret leaves the chat first: the sender deletes it, and where it cannot,
the answer asks the person to delete it; the row carries that note before it is sent. A button
under an answer and the interaction it answers are given to the first send of its row only.
Answers of one chat are handed off in the order their outcomes came.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict

from core.delivery.outbox import Outbox
from core.delivery.typing import TypingService
from core.ports.chat import BaseStreamer, ChatSender
from core.values.copy import DELETE_SECRET_NOTE
from core.values.edge import REMEMBERED, Answered
from core.values.errors import DeliveryFailed
from core.values.locks import KeyedLocks
from core.values.model import Confirmation, DeliveryTarget, InboundMessage, OutboundDelivery, Reply

log = logging.getLogger(__name__)


class HandOff:
    """Hands answers to the outbox or the attached senders; registers each platform's parts with the outbox."""

    def __init__(self, outbox: Outbox | None, typing: TypingService) -> None:
        self.outbox = outbox
        self.typing = typing
        self._senders: dict[str, ChatSender] = {}
        self._handed: dict[str, _Handed] = {}
        self._shown: dict[str, BaseStreamer] = {}
        self._extras = _Extras()
        self._chats: KeyedLocks[tuple[str, str]] = KeyedLocks()

    def attach(self, sender: ChatSender, streamer: BaseStreamer | None = None) -> None:
        """A platform's sender (and streamer) takes answers now: the hand-off's, the typing
        indicator's, and the outbox's (wrapped, so a row's first send gets its button and route)."""
        name = sender.name
        self._senders[name] = sender
        self.typing.attach(sender)
        if self.outbox is None:
            return
        handed = _Handed(sender, self._extras, self.typing)
        self._handed[name] = handed
        self.outbox.register(handed)
        if streamer is not None:
            shown = self.typing.shown(streamer)
            self._shown[name] = shown
            self.outbox.register_streamer(shown)

    def detach(self, sender: ChatSender, streamer: BaseStreamer | None = None) -> None:
        """The platform is closing: nothing is handed to it any more (its rows wait for the next start)."""
        name = sender.name
        if self._senders.get(name) is not sender:
            return
        del self._senders[name]
        self.typing.detach(sender)
        handed = self._handed.pop(name, None)
        shown = self._shown.pop(name, None)
        if self.outbox is not None:
            if handed is not None:
                self.outbox.unregister(handed)
            if shown is not None:
                self.outbox.unregister_streamer(shown)

    async def deliver(self, event: InboundMessage, reply: Reply) -> Answered:
        """Hand off the answer to `event` (an intake waits for it): the secret's message first, then
        the row to the outbox, or the answer to the platform's sender.

        Returns:
            `Answered` with its row (None: sent directly) and whether the event carried a secret.
        Raises:
            Exception: only what no sender promised to translate (the core's entry logs it); a
                platform's refusal (DeliveryFailed) is logged here: a row stays pending for the
                dispatcher, a direct answer is lost.
        """
        platform = event.platform
        row = reply.delivery_id if self.outbox is not None else None
        # In a group the answer quotes the message it answers; a deleted one cannot be quoted.
        quoted = None if (event.is_direct or reply.delete_inbound) else event.message_id
        target = DeliveryTarget(platform, event.chat_id, quoted, event.thread_id, route=event.route)
        async with self._chats.of((platform, event.chat_id)):  # one chat's answers, in the order they came
            sender = self._senders.get(platform)
            text = reply.text
            try:
                # Right after the verification attempt, before the answer: the secret leaves the chat first.
                if reply.delete_inbound and not await _deleted(sender, target, event.message_id):
                    note = f"\n\n{DELETE_SECRET_NOTE}"
                    text += note
                    if row is not None and self.outbox is not None:
                        await self.outbox.append_text(row, note)  # in the row before the row is sent
                if row is not None and self.outbox is not None:
                    conversation = reply.conversation_id
                    if conversation is None:  # the dispatcher sends it (a row always names one)
                        log.error("%s: delivery %s names no conversation; left to the dispatcher", platform, row)
                        return Answered(row, secret=reply.delete_inbound)
                    self._extras.expect(row, reply.confirm, target.route)
                    if reply.attachments or target.route is not None:
                        # The files follow its words; an interaction waits for its answer.
                        await self.outbox.deliver(conversation, row)
                        if reply.attachments and sender is not None:
                            await sender.send_answer(target, "", files=reply.attachments)
                    elif reply.delivery is not None and reply.delivery.id == row and text == reply.text:
                        # Nothing earlier waits in its lane (the store said so as it wrote it): sent as written.
                        self.outbox.hand_over_written(reply.delivery)
                    else:  # sent in the outbox's lane: the chat's next event need not wait for it
                        self.outbox.hand_over(conversation, row)
                elif sender is not None:
                    await sender.send_answer(target, text, confirm=reply.confirm, files=reply.attachments)
                else:
                    log.warning("%s: no sender is attached; an answer of %d chars was not sent", platform, len(text))
            except DeliveryFailed as exc:
                log.error("%s: an answer could not be sent (%s)", platform, exc.kind)
        return Answered(row, secret=reply.delete_inbound)

    def later(self, platform: str, chat_id: str, reply: Reply) -> None:
        """An answer nobody waits for (a burst's end, a cut-off turn): its row goes to the outbox's
        lanes, and the chat's typing indicator ends."""
        self.typing.done(platform, chat_id)
        if reply.delivery_id is not None and reply.conversation_id is not None and self.outbox is not None:
            self.outbox.hand_over(reply.conversation_id, reply.delivery_id)


async def _deleted(sender: ChatSender | None, target: DeliveryTarget, message_id: str | None) -> bool:
    """Whether the message that carried a secret left the chat."""
    if sender is None:
        return False
    try:
        return await sender.delete(target, message_id)
    except Exception as exc:  # noqa: BLE001 - a failed delete asks the person to delete it instead
        log.warning("%s: deleting a message that carried a secret failed (%s)", target.platform, type(exc).__name__)
        return False


class _Extras:
    """Which row carries which button and answers which interaction, until its first send: taken
    once (a retry or a restart sends without them, and the typed command still works); only the
    newest REMEMBERED are kept, so rows this process never sends do not pile up."""

    def __init__(self, limit: int = REMEMBERED) -> None:
        self._limit = limit
        self._pending: OrderedDict[int, tuple[Confirmation | None, str | None]] = OrderedDict()

    def expect(self, delivery_id: int, confirm: Confirmation | None, route: str | None) -> None:
        if confirm is None and route is None:
            return
        self._pending[delivery_id] = (confirm, route)
        while len(self._pending) > self._limit:
            self._pending.popitem(last=False)

    def take(self, delivery_id: int) -> tuple[Confirmation | None, str | None] | None:
        return self._pending.pop(delivery_id, None)


class _Handed:
    """A platform's sender as the outbox sees it: a row's first send gets its button and route
    (every other field passes through, a retraction's and an expiry's included), and a row sent to a
    chat ends its typing indicator."""

    def __init__(self, sender: ChatSender, extras: _Extras, typing: TypingService) -> None:
        self.name = sender.name
        self._sender = sender
        self._extras = extras
        self._typing = typing

    async def send_delivery(self, delivery: OutboundDelivery) -> int:
        self._typing.done(delivery.target.platform, delivery.target.chat_id)
        taken = self._extras.take(delivery.id)
        if taken is not None:
            confirm, route = taken
            delivery = dataclasses.replace(
                delivery, confirm=confirm, target=dataclasses.replace(delivery.target, route=route)
            )
        return await self._sender.send_delivery(delivery)

    async def send_text(self, chat_id: str, text: str) -> str:
        return await self._sender.send_text(chat_id, text)
