"""The chat commands, the same on every platform: one table, each command with its handler,
description and flags. The companion looks a command up here and calls its handler; nothing
dispatches on a command's name anywhere else."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.commands.links import link_command, unlink_command, whoami_command
from core.commands.nudges import cooldown_command, nudges_command, quiet_command, timezone_command
from core.delivery.mirrors import mirror_command, unmirror_command
from core.memory import operations as memory
from core.memory.tools import ToolContext
from core.values import copy
from core.values.command_text import first_word, looks_like, parse_command
from core.values.errors import PrivateWriteRefused
from core.values.model import Reply
from core.values.modes import ModeState, PrivateState

if TYPE_CHECKING:
    from core.turn.companion import Companion, Turn


@dataclass(frozen=True, slots=True)
class CommandCall:
    """One command as the companion runs it: who asked, where, in which mode, with which arguments."""

    companion: Companion
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


# --- handlers -------------------------------------------------------------------------------


async def _help(call: CommandCall) -> Reply:
    companion = call.companion
    lines = ["I'm your companion. Talk to me in plain words; these commands work everywhere:"]
    lines += [f"{c.usage} - {c.description}" for c in COMMANDS]
    lines += ["", copy.NORMAL_MODE_MEANS, copy.PRIVATE_MODE_MEANS]
    generated = companion.config.transition == "generated"
    lines.append(copy.TRANSITION_GENERATED_NOTE if generated else copy.TRANSITION_CONSTANT_NOTE)
    if not companion.valve.available:
        lines.append(f"Private mode is unavailable here: {companion.valve.unavailable_reason}.")
    return Reply("\n".join(lines))


async def _mode(call: CommandCall) -> Reply:
    state = call.state
    if not isinstance(state, PrivateState):
        return Reply(with_notice(state, f"You are in normal mode. {copy.NORMAL_MODE_MEANS}"))
    ends = call.companion.valve.ends_at(state.segment)
    when = "It lasts until you send /normal."
    if ends is not None:
        when = f"It ends at {call.companion.format_time(ends)} at the latest, or earlier when you send /normal."
    return Reply(f"You are in private mode. {when} {copy.PRIVATE_MODE_MEANS}")


def _is_expiry(word: str) -> bool:
    from core.values.durations import parse_expiry

    try:
        parse_expiry(word)
    except ValueError:
        return False
    return True


async def _private(call: CommandCall) -> Reply:
    # No answer quotes a word of the arguments: any of them may be the passphrase.
    words = call.args.split()
    if len(words) > 2:
        return Reply("Usage: /private PASSPHRASE [EXPIRY] (the passphrase is one word). Nothing changed.")
    if len(words) == 2 and _is_expiry(words[0]) and not _is_expiry(words[1]):
        return Reply(
            "Usage: /private PASSPHRASE [EXPIRY]: the passphrase comes first, the expiry second. Nothing changed."
        )
    passphrase = words[0] if words else ""
    expiry = words[1] if len(words) == 2 else None
    result = await call.companion.valve.enter(call.turn.conversation, call.turn.account, passphrase, expiry)
    return Reply(result.text)


async def _normal(call: CommandCall) -> Reply:
    companion = call.companion
    was_private = await companion.valve.leave(call.turn.conversation)
    if not was_private:
        return Reply(with_notice(call.state, "You are in normal mode already."))
    return Reply(await companion.say_transition_line(call.turn.conversation))


async def _export(call: CommandCall) -> Reply:
    from core.commands.export import export_reply

    return await export_reply(call.companion, call.turn.conversation, call.state, call.args)


async def _forget(call: CommandCall) -> Reply:
    if call.args.strip().lower() == "private":
        return await _forget_private(call)
    return await _memory(memory.forget_command)(call)


async def _forget_private(call: CommandCall) -> Reply:
    conversation = call.turn.conversation
    await call.companion.valve.leave(conversation, reason="forget")
    deleted = await call.companion.store.delete_segments_of(conversation.id)
    one = deleted == 1
    return Reply(
        f"Private mode is off, and {deleted} private interval{'' if one else 's'} "
        f"of this conversation {'was' if one else 'were'} deleted now, "
        f"with everything derived from {'it' if one else 'them'}."
    )


MemoryOperation = Callable[[ToolContext, str], Awaitable[str]]


def _memory(operation: MemoryOperation) -> CommandHandler:
    """A memory command: the same operation the model's tools run, with the same checks."""

    async def handler(call: CommandCall) -> Reply:
        companion = call.companion
        conversation = call.turn.conversation
        timezone = await companion.timezone_of(conversation)
        context = ToolContext(conversation, call.state, companion.clock.now(), timezone, companion.store)
        try:
            return Reply(await operation(context, call.args))
        except PrivateWriteRefused:
            return Reply(copy.PRIVATE_REFUSES.format(command=call.name))
        except ValueError as exc:
            text = str(exc)
            return Reply(text if text.startswith("Usage") else f"{text[0].upper()}{text[1:]}. Nothing changed.")

    return handler


def with_notice(state: ModeState, text: str) -> str:
    return f"{state.notice}\n\n{text}" if state.notice else text


# --- the table ------------------------------------------------------------------------------

COMMANDS: tuple[Command, ...] = (
    Command("help", "/help", "What I can do and what each mode means", _help),
    Command("mode", "/mode", "Which mode this conversation is in, and until when", _mode),
    Command(
        "private", "/private PASSPHRASE [EXPIRY]", "Enter private mode (one-to-one chats only)", _private, secret=True
    ),
    Command("normal", "/normal", "Leave private mode", _normal, runs_when_unreadable=True),
    Command("memory", "/memory", "What I keep about you: memories, goals, follow-ups", _memory(memory.memory_command)),
    Command("remember", "/remember TEXT", "Keep a fact about you", _memory(memory.remember_command), lasting=True),
    Command(
        "recall",
        "/recall WORDS",
        "Search our earlier conversations and notes",
        _memory(memory.recall_command),
        lasting=True,
    ),
    Command(
        "forget",
        "/forget N|TEXT|private",
        "Remove a memory, or delete every private interval now",
        _forget,
        lasting=True,
        private_ok_args=frozenset({"private"}),
    ),
    Command("goals", "/goals", "List your active goals", _memory(memory.goals_command), lasting=True),
    Command("goal", "/goal TITLE | done N | drop N", "Set or close a goal", _memory(memory.goal_command), lasting=True),
    Command("followups", "/followups", "List scheduled follow-ups", _memory(memory.followups_command), lasting=True),
    Command(
        "followup",
        "/followup WHEN TEXT | pause N | cancel N",
        "Schedule or change a follow-up",
        _memory(memory.followup_command),
        lasting=True,
    ),
    Command(
        "watch", "/watch EVENT", "Ask me to follow up on an upcoming event", _memory(memory.watch_command), lasting=True
    ),
    Command("export", "/export", "A file of our normal conversation (private intervals masked)", _export),
    # A binding outlives the turn: refused in private mode here, and by the store's INSERT itself.
    Command(
        "mirror",
        "/mirror [PLATFORM:CHAT_ID]",
        "Copy each normal exchange to another chat, or list the copies",
        mirror_command,
        lasting=True,
    ),
    # Proactive manners outlive the turn: refused in private mode here, and by the store's guard.
    Command(
        "nudges",
        "/nudges [N|off|on|here]",
        "How many nudges a day I may send, and where; reminders always come",
        nudges_command,
        lasting=True,
    ),
    Command("quiet", "/quiet [HH:MM-HH:MM|off]", "Your quiet hours: no nudges then", quiet_command, lasting=True),
    Command(
        "timezone",
        "/timezone [Area/City]",
        "Your time zone, for quiet hours and reminders",
        timezone_command,
        lasting=True,
    ),
    # Short: /help must stay one Discord message (2,000 characters); `/cooldown default` is in /nudges.
    Command("cooldown", "/cooldown [4h|off]", "Gap between nudges", cooldown_command, lasting=True),
    # Linking changes whose memory a chat reads: refused in private mode here, and by the store's
    # write while any conversation of either person is private. A code is a secret like a passphrase.
    Command(
        "link",
        "/link [CODE]",
        "One person across apps: get a code, or send it from your other account",
        link_command,
        secret=True,
        lasting=True,
    ),
    Command("whoami", "/whoami", "Which accounts are you, across apps", whoami_command),
    Command(
        "unlink", "/unlink PLATFORM", "Separate an account again (it keeps no memory)", unlink_command, lasting=True
    ),
    # Removing a binding only closes a path out, so it works in private mode too.
    Command("unmirror", "/unmirror N", "Stop mirroring to a chat", unmirror_command),
)

_BY_NAME = {c.name: c for c in COMMANDS}
# Telegram sends /start when a person first opens the chat.
_BY_NAME["start"] = _BY_NAME["help"]
_SECRET_NAMES = tuple(c.name for c in COMMANDS if c.secret)


def command_info(name: str) -> Command | None:
    return _BY_NAME.get(name)


# --- what may carry a secret ----------------------------------------------------------------


def looks_like_secret_command(name: str) -> bool:
    """A mistyped secret command (`/privte PASS`, a look-alike letter, `/privateSECRET` after a
    zero-width space was removed) may carry the secret too: treat it as one."""
    return any(looks_like(name, secret) for secret in _SECRET_NAMES)


def mistyped_secret_command(text: str) -> bool:
    """Whether a message opens with a look-alike of a secret command that is not the command
    itself: nothing of it may be stored, sent to a model or indexed."""
    words = first_word(text)
    if words is None:
        return False
    written, read = words
    if not read.startswith("/"):
        return False
    name = read[1:].partition("@")[0]
    if written == read and command_info(name) is not None:
        return False  # the command itself, spelled right: handled as that command
    return bool(name) and looks_like_secret_command(name)


def carries_secret(text: str) -> bool:
    """Whether a message may hold a secret (a passphrase, a link code): a secret command with arguments, or a
    look-alike of one. Adapters use it to delete the message when the core could not answer."""
    command = parse_command(text)
    if command is not None:
        info = command_info(command.name)
        if info is not None and info.secret and command.args:
            return True
    return mistyped_secret_command(text)
