"""Running one chat command inside its conversation's lane: stored (a secret redacted), refused in
private mode when it would outlive the interval, answered by its handler with the command services,
and its answer written with the interval it belongs to."""

from __future__ import annotations

import logging

from core.commands.call import Command, CommandCall
from core.commands.services import CommandServices
from core.turn.responder import Responder
from core.values import copy
from core.values.model import Reply, Turn
from core.values.modes import ModeState

log = logging.getLogger(__name__)


class CommandRunner:
    def __init__(self, services: CommandServices, responder: Responder) -> None:
        self._services = services
        self._responder = responder

    async def answer(self, turn: Turn, info: Command, args: str, state: ModeState) -> Reply:
        """What the command answers in `state`, nothing stored: the one place that refuses a command
        when the mode is unreadable or when it would outlive a private interval, and otherwise runs
        its handler with the command services. `run` (a typed command) and the owner's web pages
        (core/turn/controls.py) both answer through it."""
        if state.unreadable and not info.runs_when_unreadable:
            return Reply(copy.MODE_UNREADABLE)
        if state.is_private and info.refused_while_private(args):
            return Reply(copy.PRIVATE_REFUSES.format(command=info.name))
        return await info.handler(CommandCall(self._services, turn, info.name, args, state))

    async def run(self, turn: Turn, info: Command, args: str, state: ModeState) -> Reply | None:
        """The command's reply; None when the command is a redelivery that ran already. `state`: the
        mode the command was made in, as the gate decided it."""
        services = self._services
        carries_secret = info.secret and bool(args)
        stored = f"/{info.name} [redacted]" if carries_secret else turn.message.text
        if state.unreadable and not info.runs_when_unreadable:
            return await self._responder.finish(turn, copy.MODE_UNREADABLE, delete_inbound=carries_secret, queued=False)
        try:
            stored_id = await services.log.add_message(
                turn.conversation.id,
                "user",
                stored,
                services.clock.now(),
                segment_id=state.segment_id,
                kind="command",
                account_id=turn.account.id,
                platform_message_id=turn.message.message_id,
            )
        except Exception as exc:  # noqa: BLE001 - /normal must work even when storage misbehaves
            log.warning("storing a /%s command failed (%s)", info.name, type(exc).__name__)
        else:
            if stored_id is None:
                return None  # a redelivered command ran already
        reply = await self.answer(turn, info, args, state)
        try:
            # The answer belongs to the interval open once the command ran: the one it was made in,
            # unless the command itself changed the mode (/private opened one, /normal or /forget
            # private closed it).
            delivers = self._responder.delivers(turn.message.platform)
            segment = await services.segments.open_segment_of(turn.conversation.id) if delivers else None
            final = await self._responder.finish(
                turn, reply.text, segment_id=segment.id if segment else None, delete_inbound=carries_secret
            )
        except Exception as exc:  # noqa: BLE001 - the answer is sent directly, without an outbox row
            log.warning("writing the delivery of a /%s answer failed (%s)", info.name, type(exc).__name__)
            text = f"{copy.RESTART_ENDED_PRIVATE}\n\n{reply.text}" if turn.restart_notice else reply.text
            final = Reply(text, delete_inbound=carries_secret)
        final.attachments = reply.attachments
        final.confirm = reply.confirm
        return final
