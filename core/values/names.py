"""Names, once: who said a stored line, a speaker's display name, and an account as a person reads it."""

from __future__ import annotations

import unicodedata

from core.values.model import Account, InboundMessage

NAME_MAX_CHARS = 64
PLATFORM_NAMES = {"telegram": "Telegram", "discord": "Discord", "terminal": "the terminal"}


def speaker(role: str | None, *, person: str) -> str:
    """Who said a stored line, in words: the companion, or the person (named as the reader needs:
    "You" in an export, "Person" for the summariser and capture)."""
    return "Companion" if role == "assistant" else person


def speaker_name(message: InboundMessage) -> str:
    """Who wrote an inbound message, as a group line is headed: their display name, else their id."""
    return clean_name(message.user_name or "") or f"User {message.user_id}"


def clean_name(name: str) -> str:
    """A display name on one line, without control characters, at most NAME_MAX_CHARS."""
    cleaned = "".join(" " if unicodedata.category(ch).startswith("C") else ch for ch in name)
    cleaned = " ".join(cleaned.split())
    return cleaned[:NAME_MAX_CHARS]


def describe_account(account: Account) -> str:
    """An account as the person reads it: `Telegram 123456`, `the terminal`."""
    if account.platform == "terminal":
        return "the terminal"
    return f"{PLATFORM_NAMES.get(account.platform, account.platform)} {account.platform_user_id}"
