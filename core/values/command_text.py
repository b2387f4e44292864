"""The text of a chat command: normalising, parsing, and telling a look-alike of a command from chat."""

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


def looks_like(name: str, command: str) -> bool:
    """Whether a command name is a mistyped or look-alike `command` (`privte`, `рrivate` with a
    Cyrillic letter, `privateSECRET` after a zero-width space was removed)."""
    name = name.lower().translate(_LOOKALIKES)
    if name.startswith(command) or _within_one_edit(name, command):
        return True
    import difflib  # here: an idle gateway need not hold it

    return difflib.SequenceMatcher(None, name, command).ratio() >= 0.7


def first_word(text: str) -> tuple[str, str] | None:
    """The normalised first word of a message, as written (lowercased) and with look-alike letters
    read as Latin; None for an empty message."""
    head = normalize_command_text(text).split(maxsplit=1)
    if not head:
        return None
    written = head[0].lower()
    return written, written.translate(_LOOKALIKES)


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
