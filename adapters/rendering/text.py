"""Splitting a reply into platform-sized messages, in order, on the most natural boundary."""

from __future__ import annotations

import re

# Where a chunk may end, best first: a paragraph, a line, a sentence, a word. In each
# pattern the last group is the separator: the chunk ends where it starts, the next one
# begins where it ends, so the separating whitespace is all a split drops.
_BOUNDARIES = (
    re.compile(r"(\n[^\S\n]*\n\s*)"),  # a blank line (spaces, tabs or \r may sit on it)
    re.compile(r"(\n\s*)"),  # a line break
    # A sentence's end (with its closing quotes): before whitespace, or anywhere after CJK punctuation.
    re.compile(r"(?:[.!?…][\"'”’)\]]*(\s+)|[。！？][\"'”’」』)\]]*(\s*))"),
    re.compile(r"(\s+)"),  # between words
)


def sendable(text: str) -> str:
    """Plain text a platform accepts: with no parse mode, only unencodable lone surrogates need replacing."""
    return text.encode("utf-8", "replace").decode("utf-8")


def text_length(text: str) -> int:
    """Length in UTF-16 code units: what Telegram counts, and never less than what Discord counts."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def split_message(text: str, limit: int) -> list[str]:
    """Split `text` into chunks of at most `limit` UTF-16 code units, in order.

    Chunks end on a paragraph boundary if one fits, else a line break, else a
    sentence end, else a word boundary, else (one unbroken run longer than the
    limit) exactly at the limit. Only the whitespace at a split point and at the
    ends of `text` is dropped; every other character is kept, in order. Empty or
    whitespace-only text gives no chunks.

    Args:
        text: the reply.
        limit: the platform's maximum message length (Discord 2000, Telegram 4096); at least 2,
            so that any single character fits.

    Returns:
        The chunks, each non-empty, without leading or trailing whitespace.
    """
    if limit < 2:
        raise ValueError("limit must be at least 2")
    rest = text.strip()
    chunks: list[str] = []
    while rest:
        window = _fitting_prefix(rest, limit)
        if window == len(rest):
            chunks.append(rest)
            break
        cut, resume = _best_cut(rest, window)
        chunks.append(rest[:cut].rstrip())
        rest = rest[resume:].lstrip()
    return chunks


def _fitting_prefix(text: str, limit: int) -> int:
    """The largest n such that text[:n] fits in `limit` code units."""
    if len(text) * 2 <= limit:  # fast path: fits even if every character were astral
        return len(text)
    used = 0
    for index, ch in enumerate(text):
        used += 2 if ord(ch) > 0xFFFF else 1
        if used > limit:
            return index
    return len(text)


def _best_cut(text: str, window: int) -> tuple[int, int]:
    """Where the chunk ends and where the next one starts, for a chunk of at most `window` characters.

    A separator may start right at the window's end (the chunk still fits). A cut
    at position 0 would make an empty chunk, so it does not count.
    """
    span = text[: window + 1]
    for pattern in _BOUNDARIES:
        best = None
        for match in pattern.finditer(span):
            if 0 < _separator(match)[0] <= window:
                best = match
        if best is not None:
            # Match again on the whole text, so a separator running past the window is dropped whole.
            full = pattern.match(text, best.start()) or best
            return _separator(full)
    return window, window


def _separator(match: re.Match[str]) -> tuple[int, int]:
    """Where the match's separator (its last group that took part) starts and ends."""
    group = match.lastindex
    if group is None:  # every alternative of every boundary pattern has a group
        raise ValueError(f"boundary pattern {match.re.pattern!r} matched without its separator group")
    return match.start(group), match.end(group)
