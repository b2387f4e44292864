"""Model Markdown as Telegram messages: rendered (adapters/rendering/markdown.py), split into parts without
breaking an entity or a grapheme."""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from typing import Any

from adapters.rendering.markdown import RenderedEntity, render
from adapters.rendering.pieces import stream_pieces
from adapters.rendering.text import _best_cut, sendable
from adapters.telegram.text import MAX_MESSAGE_LENGTH


@functools.cache
def _graphemes() -> Any:
    """The grapheme-cluster pattern; `regex` (1.4 MiB resident) loads at the first reply, not
    when the idle gateway starts."""
    import regex

    return regex.compile(r"\X", regex.DOTALL)


@dataclass(frozen=True, slots=True)
class TelegramPart:
    """One message: plain text and the entities that format it."""

    text: str
    entities: tuple[RenderedEntity, ...] = ()


def telegram_parts(markdown: str, limit: int = MAX_MESSAGE_LENGTH) -> tuple[TelegramPart, ...]:
    """The messages that carry `markdown` on Telegram, formatted, in order; none for blank text."""
    text, entities = render(markdown)
    return split_rendered(text, entities, limit)


def streamed_parts(markdown: str, limit: int = MAX_MESSAGE_LENGTH) -> tuple[TelegramPart, ...]:
    """The messages of a reply shown while written, as its final text formats them: cut where the
    stream cut it (adapters/rendering/pieces.py `stream_pieces(final=True)`, the cuts the streamed messages
    already have), each piece rendered on its own, so message i of the stream becomes part i and
    the entities of every message are whole. A piece whose rendering is longer than a message
    (Markdown hardly ever grows when rendered) continues in the next part."""
    pieces = stream_pieces(sendable(markdown), limit, final=True)
    return tuple(part for piece in pieces for part in telegram_parts(piece, limit))


def split_rendered(
    text: str, entities: tuple[RenderedEntity, ...], limit: int = MAX_MESSAGE_LENGTH
) -> tuple[TelegramPart, ...]:
    """Split rendered text into parts of at most `limit` UTF-16 code units, in order.

    A part ends on a paragraph boundary if one fits, else a line break, a sentence end, a
    word boundary, else between two grapheme clusters: an emoji with joiners, a flag or a
    skin tone stays whole (only a single cluster longer than `limit` is cut between code
    points). Whitespace at a split and at the ends is dropped. An entity crossing a split
    becomes one entity in each part (a pre block becomes two, each with the language).

    Args:
        text: the rendered text.
        entities: its entities, offsets in UTF-16 code units of `text`.
        limit: Telegram's limit, 4096; at least 2, so any character fits.
    """
    if limit < 2:
        raise ValueError("limit must be at least 2")
    if text and not text[0].isspace() and not text[-1].isspace() and (units := _units(text)) <= limit:
        # Most replies: one part, as `_split_clusters` makes it (nothing to trim, nothing to cut),
        # without finding its grapheme clusters (a tenth of a millisecond for a paragraph).
        return (_part(text, 0, units, entities),)
    return _split_clusters(text, entities, limit)


def _split_clusters(text: str, entities: tuple[RenderedEntity, ...], limit: int) -> tuple[TelegramPart, ...]:
    """`split_rendered`, cutting between grapheme clusters."""
    clusters: list[str] = []
    for cluster in _graphemes().findall(text):
        clusters.extend(cluster if _units(cluster) > limit else [cluster])
    # One stand-in character per cluster, so the boundary patterns of adapters.rendering.text can only
    # cut between clusters.
    skeleton = "".join(_stand_in(cluster) for cluster in clusters)
    units, chars = [0], [0]
    for cluster in clusters:
        units.append(units[-1] + _units(cluster))
        chars.append(chars[-1] + len(cluster))
    parts: list[TelegramPart] = []
    start, stop = 0, len(clusters)
    while stop > start and skeleton[stop - 1].isspace():
        stop -= 1
    while start < stop:
        if skeleton[start].isspace():
            start += 1
            continue
        fits = bisect.bisect_right(units, units[start] + limit) - 1
        if fits >= stop:
            cut = resume = stop
        else:
            cut, resume = (start + offset for offset in _best_cut(skeleton[start:stop], fits - start))
        end = cut
        while skeleton[end - 1].isspace():
            end -= 1
        parts.append(_part(text[chars[start] : chars[end]], units[start], units[end], entities))
        start = resume
    return tuple(parts)


def _part(text: str, begin: int, end: int, entities: tuple[RenderedEntity, ...]) -> TelegramPart:
    """The part of the text between UTF-16 offsets begin and end, with its entities clipped to it."""
    clipped = []
    for entity in entities:
        low, high = max(entity.offset, begin), min(entity.end, end)
        if high > low:
            clipped.append(
                RenderedEntity(entity.type, low - begin, high - low, url=entity.url, language=entity.language)
            )
    return TelegramPart(text, tuple(clipped))


def _stand_in(cluster: str) -> str:
    if cluster.isspace():
        return "\n" if "\n" in cluster or "\r" in cluster else " "
    return cluster if len(cluster) == 1 else "x"


def _units(text: str) -> int:
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)
