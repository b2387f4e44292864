"""Chat commands, the same on every platform: parsing and the table of what exists."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_COMMAND = re.compile(r"^/([A-Za-z][A-Za-z0-9_]{0,31})(?:@[A-Za-z0-9_]+)?(?:\s+(.*))?$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    name: str
    args: str


# Invisible characters a paste or a keyboard slips in (BOM, zero-width space/joiners, word
# joiner, soft hyphen): `\ufeff/private x` must still be a command, never a chat line.
_INVISIBLE = dict.fromkeys(map(ord, "\ufeff\u200b\u200c\u200d\u2060\u00ad\u180e"))


def normalize_command_text(text: str) -> str:
    """The text command parsing sees: invisible characters removed, the first word NFKC
    (a full-width `／ｐｒｉｖａｔｅ` is `/private`). The arguments keep their characters
    otherwise, so a passphrase still matches the hash `companion passphrase` printed."""
    text = text.translate(_INVISIBLE).strip()
    match = re.match(r"\S+", text)
    if match is None:
        return text
    head, rest = text[: match.end()], text[match.end() :]
    return unicodedata.normalize("NFKC", head) + rest


def parse_command(text: str) -> ParsedCommand | None:
    """`/name args`, also `/name@botname args` as Telegram writes it in groups; the text is
    normalised first (`normalize_command_text`)."""
    match = _COMMAND.match(normalize_command_text(text))
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
    CommandInfo(
        "forget", "/forget N|TEXT|private", "Remove a memory, or delete every private interval now", lasting=True
    ),
    CommandInfo("goals", "/goals", "List your active goals", lasting=True),
    CommandInfo("goal", "/goal TITLE | done N | drop N", "Set or close a goal", lasting=True),
    CommandInfo("followups", "/followups", "List scheduled follow-ups", lasting=True),
    CommandInfo("followup", "/followup WHEN TEXT | pause N | cancel N", "Schedule or change a follow-up", lasting=True),
    CommandInfo("watch", "/watch EVENT", "Ask me to follow up on an upcoming event", lasting=True),
    CommandInfo("export", "/export", "A file of our normal conversation (private intervals masked)"),
)

MEMORY_COMMANDS = frozenset(
    {"memory", "remember", "recall", "forget", "goals", "goal", "followups", "followup", "watch"}
)

# Telegram sends /start when a person first opens the chat.
ALIASES = {"start": "help"}


def command_info(name: str) -> CommandInfo | None:
    name = ALIASES.get(name, name)
    return next((c for c in COMMANDS if c.name == name), None)


# Letters that look Latin but are not (Cyrillic, Greek), and slashes that look like `/`:
# `/рrivate` with a Cyrillic `р` is a mistyped /private, and may carry the passphrase.
_LOOKALIKES = str.maketrans(
    {
        "а": "a",
        "в": "b",
        "с": "c",
        "ԁ": "d",
        "е": "e",
        "ё": "e",
        "һ": "h",
        "і": "i",
        "ї": "i",
        "ј": "j",
        "к": "k",
        "ӏ": "l",
        "м": "m",
        "н": "h",
        "о": "o",
        "р": "p",
        "ԛ": "q",
        "г": "r",
        "ѕ": "s",
        "т": "t",
        "и": "u",
        "ѵ": "v",
        "ԝ": "w",
        "х": "x",
        "у": "y",
        "з": "z",
        "α": "a",
        "β": "b",
        "ε": "e",
        "η": "n",
        "ι": "i",
        "κ": "k",
        "ν": "v",
        "ο": "o",
        "ρ": "p",
        "τ": "t",
        "υ": "u",
        "χ": "x",
        "γ": "y",
        "ζ": "z",
        "∕": "/",
        "⁄": "/",
        "⧸": "/",
        "\\": "/",
    }
)


def looks_like_secret_command(name: str) -> bool:
    """A mistyped secret command (`/privte PASS`, `/рrivate PASS` with a Cyrillic letter,
    `/privateSECRET` after a zero-width space was removed) may carry the secret too: treat it as one."""
    import difflib

    name = name.lower().translate(_LOOKALIKES)
    for secret in (c.name for c in COMMANDS if c.secret):
        if name.startswith(secret) or _within_one_edit(name, secret):
            return True
        if difflib.SequenceMatcher(None, name, secret).ratio() >= 0.7:
            return True
    return False


def mistyped_secret_command(text: str) -> bool:
    """Whether a message opens with a look-alike of a secret command that is not the command
    itself: nothing of it may be stored, sent to a model or indexed."""
    head = normalize_command_text(text).split(maxsplit=1)
    if not head:
        return False
    word = head[0].lower().translate(_LOOKALIKES)
    if not word.startswith("/"):
        return False
    name = word[1:].partition("@")[0]
    info = command_info(name) if word == head[0].lower() else None
    if info is not None:
        return False  # the command itself, spelled right: handled as that command
    return bool(name) and looks_like_secret_command(name)


def _within_one_edit(a: str, b: str) -> bool:
    """Levenshtein distance at most one (one letter added, dropped, changed, or two swapped)."""
    if a == b:
        return True
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diffs = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if len(diffs) == 1:
            return True
        return (
            len(diffs) == 2 and diffs[1] == diffs[0] + 1 and a[diffs[0]] == b[diffs[1]] and a[diffs[1]] == b[diffs[0]]
        )
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def carries_secret(text: str) -> bool:
    """Whether a message may hold a secret (a passphrase): a secret command with arguments, or a
    look-alike of one. Adapters use it to delete the message when the core could not answer."""
    command = parse_command(text)
    info = command_info(command.name) if command else None
    return bool(info and info.secret and command.args) or mistyped_secret_command(text)
