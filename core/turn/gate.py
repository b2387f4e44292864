"""The gate: each inbound event's kind and mode, decided once, as it enters its conversation's lane.

Whatever the event is (a message with its media, quote or forward; an edit; a known, unknown or
mistyped command; a button press, which arrives as the command it carries; a DM caught up after a
restart), its mode is read here once, for the moment it was made, and carried down as a typed
value (`Event`): nothing downstream asks the valve again which mode the event belongs to, and
everything the event writes (its row, its answer, the answer's delivery) belongs to that mode's
interval. A lane handles its events one at a time, so the mode read here is the mode the event
was made in; an event made before a restart that closed its interval is the one exception, and
the gate names that interval (`Event.restarted`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from core.commands.call import Command
from core.commands.registry import command_info, mistyped_secret_command
from core.privacy.valve import ModeValve
from core.turn.recovery import ClosedByRestart, Recovery
from core.values.command_text import ParsedCommand, parse_command
from core.values.model import Turn
from core.values.modes import ASSUMED_NORMAL, ModeState


class EventKind(enum.StrEnum):
    MESSAGE = "message"  # words, media, a quote or a forward: stored, and answered by the model
    EDIT = "edit"  # a new version of a message stored earlier
    COMMAND = "command"  # a known command, typed or pressed as a button
    UNKNOWN_COMMAND = "unknown command"
    MISTYPED = "mistyped secret command"  # may carry a passphrase or code: never stored


@dataclass(frozen=True, slots=True)
class Event:
    """One inbound event as the gate decided it: what it is, and the mode it was made in.

    `state` is the conversation's mode when the event entered the lane (settled once); everything
    the event writes belongs to `state.segment_id`. `restarted`: the event was made before this
    process started, inside a private interval the restart closed; it belongs to that interval and
    is kept there unread, whatever its kind.
    """

    kind: EventKind
    state: ModeState
    command: ParsedCommand | None = None
    info: Command | None = None  # the registry's command, for EventKind.COMMAND
    restarted: ClosedByRestart | None = None


class Gate:
    """Decides each event's kind and mode (`admit`), once."""

    def __init__(self, valve: ModeValve, recovery: Recovery) -> None:
        self._valve = valve
        self._recovery = recovery

    async def admit(self, turn: Turn, *, assume: bool = True) -> Event:
        """The event's kind and mode. A message without media, of a conversation whose mode was last read
        normal here (`ModeValve.assumes_normal`), is given normal mode assumed, not read: the write that
        stores it proves it (refused whole while a segment is open), a trip fewer a turn. `assume` False:
        read it (the companion's second admit, after such a write was refused)."""
        message = turn.message
        command = parse_command(message.text)
        info = command_info(command.name) if command is not None else None
        if message.edited:
            kind = EventKind.EDIT
        elif command is not None and info is not None:
            kind = EventKind.COMMAND
        elif mistyped_secret_command(message.text):
            # `/privte`, a Cyrillic er for the p: a look-alike of /private or /link may carry the secret.
            kind = EventKind.MISTYPED
        elif command is not None:
            kind = EventKind.UNKNOWN_COMMAND
        else:
            kind = EventKind.MESSAGE
        restarted = await self._recovery.closed_by_restart(turn.conversation, message)
        if assume and kind is EventKind.MESSAGE and restarted is None and not message.media:
            assumed = self._valve.assumes_normal(turn.conversation)
        else:
            assumed = False
        state = ASSUMED_NORMAL if assumed else await self._valve.settle(turn.conversation)
        return Event(kind, state, command, info if kind is EventKind.COMMAND else None, restarted)
