"""The core's entry for every platform: an inbound event in, its typed outcome out, never an exception.

`receive` decides at once, before it returns, what needs no lane (a press that is not ours, someone
not allowed) and queues every other event on its conversation's lane, so the order of the calls is
the order of the conversation. The rest runs in a task of its own: the turn's result, the typing
indicator, and the one hand-off of its answer (core/delivery/handoff.py). A turn that fails gets the
one failure fallback, which never carries the secret its message may have held: that message is
deleted (or the person asked to delete it) like the answer to any secret.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable

from core.commands.registry import carries_secret, command_of, command_specs
from core.delivery.handoff import HandOff
from core.delivery.typing import TypingService
from core.ports.chat import AdapterStateStore, Platform
from core.ports.metrics import NO_METRICS, Metrics
from core.turn.companion import Companion, flush_share
from core.turn.lanes import LanesClosed
from core.values import copy
from core.values.edge import PREFIX, Answered, CommandSpec, EdgeSettings, Held, Outcome, Silence, Silent
from core.values.model import DeliveryTarget, InboundMessage, Reply

log = logging.getLogger(__name__)


class CoreEntry:
    """What every platform's intake hands events to (core.ports.ChatCore); bot/bootstrap.py builds
    it and attaches each platform's sender and streamer."""

    def __init__(
        self,
        companion: Companion,
        handoff: HandOff,
        typing: TypingService,
        *,
        metrics: Metrics = NO_METRICS,
        edge: EdgeSettings | None = None,
        state: AdapterStateStore | None = None,
    ) -> None:
        self.commands: tuple[CommandSpec, ...] = command_specs()
        self.state = state
        self._companion = companion
        self._handoff = handoff
        self._typing = typing
        self._metrics = metrics
        self._edge = edge or EdgeSettings(stop_grace=companion.config.stop_grace)
        self._waiting: set[asyncio.Task[Outcome]] = set()

    # --- platforms ----------------------------------------------------------------

    def attach(self, platform: Platform) -> None:
        """The platform's sender (and streamer) take answers, typing and the outbox's rows from now on."""
        self._handoff.attach(platform.sender, platform.streamer)

    def detach(self, platform: Platform) -> None:
        """The platform is closing: its rows wait for the next start."""
        self._handoff.detach(platform.sender, platform.streamer)

    # --- events ---------------------------------------------------------------------

    def receive(self, event: InboundMessage) -> Awaitable[Outcome]:
        """core.ports.ChatCore.receive: queue `event` in its conversation's order; the awaitable gives
        its outcome (cancelling the wait stops neither the turn nor the hand-off of its answer)."""
        # Every event is counted alike at intake, before anything knows its mode.
        self._metrics.update_received(event.platform)
        if event.pressed:  # a button's data: the command it carries, as the presser typing it
            command = command_of(event.text)
            if command is None:
                return _now(Silent(Silence.NO_ANSWER))
            event = dataclasses.replace(event, text=command, pressed=False)
        if not self._companion.is_allowed(event):
            if event.caught_up:  # read from history after a restart: a stranger is not answered late
                return _now(Silent(Silence.NO_ANSWER))
            refusal = self._companion.refusal(event)
            if refusal is None:
                return _now(Silent(Silence.REFUSED_BEFORE))
            return self._waited(self._hand_off(event, refusal))
        # Whether the event carries a secret, decided once here: its fallback and its silence keep to it.
        secret = carries_secret(event.text)
        try:
            turn = self._companion.submit(event)
        except LanesClosed:
            return _now(Silent(Silence.CUT_OFF, secret=secret))
        self._typing.begin(DeliveryTarget(event.platform, event.chat_id, thread_id=event.thread_id))
        return self._waited(self._outcome(event, turn, secret))

    async def chat_moved(self, platform: str, old_chat_id: str, new_chat_id: str) -> None:
        """core.ports.ChatCore.chat_moved (Companion.chat_moved)."""
        await self._companion.chat_moved(platform, old_chat_id, new_chat_id)

    async def _outcome(
        self, event: InboundMessage, turn: asyncio.Future[Reply | Held | Silent], secret: bool
    ) -> Outcome:
        await asyncio.wait({turn})  # the lane's cancel (a stop) is an outcome here, not a failure
        result: Reply | Held | Silent
        if turn.cancelled():
            result = Silent(Silence.CUT_OFF)
        elif (failure := turn.exception()) is not None:
            # The one fallback for a turn that failed: constant words, and the secret's message
            # leaves the chat as for any answer to a secret. The log gets the kind only.
            log.error("%s: an event failed in the core (%s)", event.platform, type(failure).__name__)
            result = Reply(copy.HANDLER_FAILED, delete_inbound=secret)
        else:
            result = turn.result()
        if isinstance(result, Held):
            # Answered later with its burst: the hand-off of that answer (or this bound) ends the indicator.
            target = DeliveryTarget(event.platform, event.chat_id, thread_id=event.thread_id)
            self._typing.hold(target, self._edge.typing_hold)
            return result
        self._typing.done(event.platform, event.chat_id)
        if isinstance(result, Silent):
            return Silent(result.reason, secret=secret)
        reply = result
        if reply.confirm is not None and command_of(PREFIX + reply.confirm.command) is None:
            # A button never sends a secret or an unknown command: the answer goes without it.
            log.error("%s: a confirmation that is no known command without a secret was left out", event.platform)
            reply = dataclasses.replace(reply, confirm=None)
        return await self._hand_off(event, reply)

    async def _hand_off(self, event: InboundMessage, reply: Reply) -> Answered:
        try:
            return await self._handoff.deliver(event, reply)
        except Exception as exc:  # noqa: BLE001 - receive never raises: a row stays for the dispatcher
            log.error("%s: handing off an answer failed (%s)", event.platform, type(exc).__name__)
            return Answered(reply.delivery_id, secret=reply.delete_inbound)

    def _waited(self, work: Awaitable[Outcome]) -> Awaitable[Outcome]:
        """Run `work` in a task of its own (a stop waits for it); the caller gets a shield of it."""
        task: asyncio.Task[Outcome] = asyncio.ensure_future(work)
        self._waiting.add(task)
        task.add_done_callback(self._waiting.discard)
        return asyncio.shield(task)

    # --- the stop ----------------------------------------------------------------------

    async def stop(self, grace: float) -> None:
        """The core's part of a stop, after every intake stopped and before connections close, within
        `grace` seconds: the turns finish (or are cut off), their answers are handed off, the outbox
        sends what they wrote, and the typing indicators end."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        await self._companion.finish_turns(grace - flush_share(grace))
        if self._waiting:  # the outcomes the last turns gave, handed to the outbox before its flush
            await asyncio.wait(set(self._waiting), timeout=max(deadline - loop.time(), 0.0))
        await self._companion.flush(deadline - loop.time())
        await self._typing.aclose()


def _now(outcome: Outcome) -> Awaitable[Outcome]:
    """An outcome decided without a lane, as an awaitable like the others."""
    done: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
    done.set_result(outcome)
    return done
