"""The chat commands, the same on every platform: one table, each command with its handler,
description and flags. The turn looks a command up here and calls its handler with a CommandCall;
nothing dispatches on a command's name anywhere else."""

from __future__ import annotations

from core.commands.call import Command, CommandCall
from core.commands.export import export_command
from core.commands.links import link_command, unlink_command, whoami_command
from core.commands.memory import forget_command, memory_handler
from core.commands.mirrors import mirror_command, unmirror_command
from core.commands.modes import mode_command, normal_command, private_command
from core.commands.nudges import cooldown_command, nudges_command, quiet_command, timezone_command
from core.commands.tools import tools_command
from core.memory import operations as memory
from core.values import copy
from core.values.command_text import first_word, looks_like, parse_command
from core.values.edge import COMMAND, PREFIX, CommandSpec
from core.values.model import Reply


async def _help(call: CommandCall) -> Reply:
    services = call.services
    lines = ["I'm your companion. Talk to me in plain words; these commands work everywhere:"]
    lines += [f"{c.usage} - {c.description}" for c in COMMANDS]
    lines += ["", copy.NORMAL_MODE_MEANS, copy.PRIVATE_MODE_MEANS]
    lines.append(copy.TRANSITION_GENERATED_NOTE if services.transition.generated else copy.TRANSITION_CONSTANT_NOTE)
    if not services.tools.enabled:
        lines.append(copy.TOOLS_OFF_NOTE)
    if not services.valve.available:
        lines.append(f"Private mode is unavailable here: {services.valve.unavailable_reason}.")
    return Reply("\n".join(lines))


# --- the table ------------------------------------------------------------------------------

COMMANDS: tuple[Command, ...] = (
    Command("help", "/help", "What I can do and what each mode means", _help),
    Command("mode", "/mode", "Which mode this conversation is in, and until when", mode_command),
    Command("tools", "/tools", "Tools I can use here", tools_command),
    Command(
        "private",
        "/private PASSPHRASE [EXPIRY]",
        "Enter private mode (one-to-one chats only)",
        private_command,
        secret=True,
    ),
    Command("normal", "/normal", "Leave private mode", normal_command, runs_when_unreadable=True),
    Command(
        "memory", "/memory", "What I keep about you: memories, goals, follow-ups", memory_handler(memory.memory_command)
    ),
    Command(
        "remember", "/remember TEXT", "Keep a fact about you", memory_handler(memory.remember_command), lasting=True
    ),
    Command(
        "recall",
        "/recall WORDS",
        "Search our earlier conversations and notes",
        memory_handler(memory.recall_command),
        lasting=True,
    ),
    Command(
        "forget",
        "/forget N|TEXT|private",
        "Remove a memory, or delete every private interval now",
        forget_command,
        lasting=True,
        private_ok_args=frozenset({"private"}),
    ),
    Command("goals", "/goals", "List your active goals", memory_handler(memory.goals_command), lasting=True),
    Command(
        "goal",
        "/goal TITLE | done N | drop N",
        "Set or close a goal",
        memory_handler(memory.goal_command),
        lasting=True,
    ),
    Command(
        "followups", "/followups", "List scheduled follow-ups", memory_handler(memory.followups_command), lasting=True
    ),
    Command(
        "followup",
        "/followup WHEN TEXT | pause N | cancel N",
        "Schedule or change a follow-up",
        memory_handler(memory.followup_command),
        lasting=True,
    ),
    Command(
        "watch",
        "/watch EVENT",
        "Ask me to follow up on an upcoming event",
        memory_handler(memory.watch_command),
        lasting=True,
    ),
    Command("export", "/export", "A file of our normal conversation (private intervals masked)", export_command),
    # A binding outlives the turn: refused in private mode here, and by the store's INSERT itself.
    Command(
        "mirror",
        "/mirror [PLATFORM:CHAT_ID]",
        "Copy each normal exchange to another chat, or list them",
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
        "One person across apps: get a code or send one",
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


def command_specs() -> tuple[CommandSpec, ...]:
    """The commands as a platform shows them (a command menu, slash commands), in the table's order."""
    return tuple(CommandSpec(c.name, c.usage, c.description, c.secret) for c in COMMANDS)


def command_of(data: str | None) -> str | None:
    """The command a pressed button sends (its data, core.values.edge.button_data), or None when the
    data is not one of ours: only a known command without a secret may come out of a button."""
    if not data or not data.startswith(PREFIX):
        return None
    text = data[len(PREFIX) :]
    if not COMMAND.fullmatch(text) or carries_secret(text):
        return None
    command = parse_command(text)
    if command is None or command_info(command.name) is None:
        return None
    return text


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
