"""Where a reply shown while written is cut into messages: the same cuts while it streams and when final.

A streamed reply fills a message, then continues into the next one. Each cut is chosen as
adapters/rendering/text.py chooses them (a paragraph, a line, a sentence, a word, in that order), only
between grapheme clusters (an emoji with joiners, a flag, a letter with its accents stays whole)
and only outside a code fence, unless one fence is longer than a whole message: then the piece
closes the fence and the next one opens it again with its language. A cut depends only on the
text before it and a character past the limit, so the cuts made while the reply streamed are
the cuts of its final text: the final edit changes each message, it moves nothing between them.
While the reply is still written, its last grapheme cluster is held back (a flag or a family
emoji arrives in pieces) and trailing whitespace is not shown.
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass
from typing import Any

from adapters.rendering.text import _BOUNDARIES, _separator

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})([^`\n]*)$")


@functools.cache
def _graphemes() -> Any:
    import regex  # loaded with the first streamed reply, not when the idle gateway starts

    return regex.compile(r"\X", regex.DOTALL)


@dataclass(frozen=True, slots=True)
class _Fence:
    start: int  # the opening line's first character
    end: int  # just after the closing line (the text's end when never closed)
    marker: str
    language: str


def stream_pieces(text: str, limit: int, *, final: bool) -> list[str]:
    """`text` as the messages it shows in, each at most `limit` UTF-16 code units, in order.

    Args:
        text: the reply (its Markdown as written).
        limit: the platform's message limit in UTF-16 code units (at least 16).
        final: the whole reply; otherwise the text so far, whose last grapheme cluster and
            trailing whitespace are held back.
    """
    if limit < 16:
        raise ValueError("limit must be at least 16")
    if _units(text) <= limit and _clean_start(text):
        # One message, no cut to choose (the common case, and called at every edit of a reply).
        shown = (text if final else _without_last_cluster(text)).strip()
        return [shown] if shown else []
    clusters = _graphemes().findall(text)
    if not final and clusters:
        clusters.pop()  # it may still grow (a skin tone, a joiner and the next emoji ...)
    text = "".join(clusters)
    chars, units = [0], [0]
    for cluster in clusters:
        chars.append(chars[-1] + len(cluster))
        units.append(units[-1] + len(cluster) + sum(1 for ch in cluster if ord(ch) > 0xFFFF))
    skeleton = "".join(_stand_in(cluster) for cluster in clusters)
    fences = _fences(text)
    pieces: list[str] = []
    start, stop = 0, len(clusters)
    while stop > start and skeleton[stop - 1].isspace():
        stop -= 1
    reopen = ""  # a fence the previous piece closed, opened again at the start of this one
    while start < stop:
        if skeleton[start].isspace() and not reopen:
            start += 1
            continue
        room = limit - _units(reopen)
        fits = max(bisect.bisect_right(units, units[start] + room) - 1, start + 1)
        if fits >= stop:
            pieces.append(reopen + text[chars[start] : chars[stop]])
            break
        cut, resume = _cut(skeleton, start, stop, fits, chars, fences)
        closing = ""
        if cut is None:
            # One fence longer than a message: cut inside it at a line, close it here, open it again next.
            fits = max(bisect.bisect_right(units, units[start] + room - 4) - 1, start + 1)
            cut, resume = _line_cut(skeleton, start, fits)
            fence = _fence_at(fences, chars[cut])
            closing = "\n" + fence.marker if fence is not None else ""
            next_reopen = f"{fence.marker}{fence.language}\n" if fence is not None else ""
        else:
            next_reopen = ""
        end = cut
        while end > start and skeleton[end - 1].isspace():
            end -= 1
        pieces.append(reopen + text[chars[start] : chars[end]] + closing)
        start, reopen = resume, next_reopen
    return [piece for piece in pieces if piece.strip()]


def _cut(
    skeleton: str, start: int, stop: int, fits: int, chars: list[int], fences: list[_Fence]
) -> tuple[int | None, int]:
    """The best cut of skeleton[start:stop] within `fits` outside every fence: (cut, resume) in
    cluster positions; (None, 0) when every boundary in reach is inside a fence."""
    window = fits - start
    span = skeleton[start : fits + 1]
    for pattern in _BOUNDARIES:
        best = None
        for match in pattern.finditer(span):
            at, _ = _separator(match)
            if 0 < at <= window and _fence_at(fences, chars[start + at]) is None:
                best = match
        if best is not None:
            full = pattern.match(skeleton[:stop], start + best.start()) or best
            at, after = _separator(full)
            offset = 0 if full is not best else start
            return offset + at, offset + after
    if not any(_fence_at(fences, chars[start + at]) is not None for at in range(1, window + 1)):
        return fits, fits  # one unbroken run longer than a message: cut between two clusters
    return None, 0


def _line_cut(skeleton: str, start: int, fits: int) -> tuple[int, int]:
    """Inside a fence: after the last whole line that fits, else between two clusters."""
    at = skeleton.rfind("\n", start + 1, fits + 1)
    if at <= start:
        return fits, fits
    return at, at + 1


def _fences(text: str) -> list[_Fence]:
    fences: list[_Fence] = []
    opened: tuple[int, str, str] | None = None
    offset = 0
    for line in text.splitlines(keepends=True):
        match = _FENCE.match(line.rstrip("\r\n"))
        if opened is None and match is not None:
            opened = (offset, match.group(1), match.group(2).strip())
        elif opened is not None and match is not None and not match.group(2).strip():
            marker = match.group(1)
            if marker[0] == opened[1][0] and len(marker) >= len(opened[1]):
                fences.append(_Fence(opened[0], offset + len(line.rstrip("\r\n")), opened[1], opened[2]))
                opened = None
        offset += len(line)
    if opened is not None:
        fences.append(_Fence(opened[0], len(text), opened[1], opened[2]))
    return fences


def _fence_at(fences: list[_Fence], position: int) -> _Fence | None:
    """The fence a cut at character `position` would fall inside (its edges are outside)."""
    for fence in fences:
        if fence.start < position < fence.end:
            return fence
    return None


def _clean_start(text: str) -> bool:
    """Whether the whitespace `text` begins with is whitespace clusters only (nothing joins its
    last character to the first word), so that `str.strip` drops what the cuts would skip."""
    start = len(text) - len(text.lstrip())
    return start == 0 or len(_graphemes().match(text, start - 1).group()) == 1


def _without_last_cluster(text: str) -> str:
    """`text` without its last grapheme cluster (found in its last 256 characters)."""
    tail = _graphemes().findall(text[-256:])
    return text[: len(text) - len(tail[-1])] if tail else text


def _stand_in(cluster: str) -> str:
    if cluster.isspace():
        return "\n" if "\n" in cluster or "\r" in cluster else " "
    return cluster if len(cluster) == 1 else "x"


def _units(text: str) -> int:
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)
