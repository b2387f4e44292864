"""One command as a handler receives it, and the shape of a command in the registry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from core.commands.services import CommandServices
from core.values.model import Reply, Turn
from core.values.modes import ModeState


@dataclass(frozen=True, slots=True)
class CommandCall:
    """Who asked, where, in which mode, with which arguments, and the services a handler may use."""

    services: CommandServices
    turn: Turn
    name: str
    args: str
    state: ModeState


CommandHandler = Callable[[CommandCall], Awaitable[Reply]]


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    usage: str
    description: str  # short: Telegram's setMyCommands allows 256 characters
    handler: CommandHandler
    secret: bool = False  # the arguments carry a secret: never stored, message deleted
    lasting: bool = False  # reads or writes lasting memory: refused in private mode...
    # ...except with these arguments (`/forget private` deletes private intervals, from anywhere).
    private_ok_args: frozenset[str] = frozenset()
    # Runs even when the mode could not be read (leaving private mode is never refused).
    runs_when_unreadable: bool = False

    def refused_while_private(self, args: str) -> bool:
        return self.lasting and args.strip().lower() not in self.private_ok_args
