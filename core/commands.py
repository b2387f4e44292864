"""Chat commands, the same on every platform: parsing and the table of what exists."""

from __future__ import annotations

import re
from dataclasses import dataclass

_COMMAND = re.compile(r"^/([A-Za-z][A-Za-z0-9_]{0,31})(?:@[A-Za-z0-9_]+)?(?:\s+(.*))?$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    name: str
    args: str


def parse_command(text: str) -> ParsedCommand | None:
    """`/name args`, also `/name@botname args` as Telegram writes it in groups."""
    match = _COMMAND.match(text.strip())
    if not match:
        return None
    return ParsedCommand(match.group(1).lower(), (match.group(2) or "").strip())


@dataclass(frozen=True, slots=True)
class CommandInfo:
    name: str
    usage: str
    description: str  # short: Telegram's setMyCommands allows 256 characters
    secret: bool = False  # the arguments carry a secret: never stored, message deleted
    lasting: bool = False  # reads or writes lasting memory: refused in private mode


COMMANDS: tuple[CommandInfo, ...] = (
    CommandInfo("help", "/help", "What I can do and what each mode means"),
    CommandInfo("mode", "/mode", "Which mode this conversation is in, and until when"),
    CommandInfo("private", "/private PASSPHRASE [EXPIRY]", "Enter private mode (one-to-one chats only)", secret=True),
    CommandInfo("normal", "/normal", "Leave private mode"),
    CommandInfo("memory", "/memory", "What I keep about you: memories, goals, follow-ups"),
    CommandInfo("remember", "/remember TEXT", "Keep a fact about you", lasting=True),
    CommandInfo("recall", "/recall WORDS", "Search our earlier conversations and notes", lasting=True),
    CommandInfo("forget", "/forget N|TEXT|private", "Remove a memory, or delete every private interval now",
                lasting=True),
    CommandInfo("goals", "/goals", "List your active goals", lasting=True),
    CommandInfo("goal", "/goal TITLE | done N | drop N", "Set or close a goal", lasting=True),
    CommandInfo("followups", "/followups", "List scheduled follow-ups", lasting=True),
    CommandInfo("followup", "/followup WHEN TEXT | pause N | cancel N", "Schedule or change a follow-up",
                lasting=True),
    CommandInfo("watch", "/watch EVENT", "Ask me to follow up on an upcoming event", lasting=True),
    CommandInfo("export", "/export", "A file of our normal conversation (private intervals masked)"),
)

MEMORY_COMMANDS = frozenset({"memory", "remember", "recall", "forget", "goals", "goal", "followups", "followup", "watch"})

# Telegram sends /start when a person first opens the chat.
ALIASES = {"start": "help"}


def command_info(name: str) -> CommandInfo | None:
    name = ALIASES.get(name, name)
    return next((c for c in COMMANDS if c.name == name), None)


def looks_like_secret_command(name: str) -> bool:
    """A mistyped secret command (`/privte PASS`) may carry the secret too: treat it as one."""
    import difflib

    secret = [c.name for c in COMMANDS if c.secret]
    return bool(difflib.get_close_matches(name, secret, n=1, cutoff=0.7))
