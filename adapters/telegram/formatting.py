"""Model Markdown as Telegram message entities, split into parts without breaking an entity or a grapheme."""

from __future__ import annotations

import bisect
import functools
import logging
from dataclasses import dataclass
from typing import Any

from adapters.pieces import stream_pieces
from adapters.telegram.text import MAX_MESSAGE_LENGTH, sendable
from adapters.text import _best_cut

log = logging.getLogger(__name__)

# Telegram's nesting rules (Bot API "Formatting options"): these may contain and be part of any
# entity but pre and code; a blockquote holds no blockquote; all other entities hold no other.
_FORMATTING = frozenset({"bold", "italic", "underline", "strikethrough", "spoiler"})
_QUOTES = frozenset({"blockquote", "expandable_blockquote"})
# Markdown has no underline: the renderer underlines H1-H2 on top of bold, and headings are bold here.
_KEPT = (_FORMATTING - {"underline"}) | _QUOTES | {"code", "pre", "text_link"}
# A custom emoji needs a bot with a Fragment username; other link targets (relative paths,
# anchors) are not URLs Telegram opens. Their text stays, unlinked.
_LINK_SCHEMES = ("http://", "https://", "tg://", "mailto:")
_PRECEDENCE = {"text_link": 0, "blockquote": 1, "expandable_blockquote": 1, "pre": 2, "code": 3}


@functools.cache
def _graphemes() -> Any:
    """The grapheme-cluster pattern; `regex` (1.4 MiB resident) loads at the first reply, not
    when the idle gateway starts."""
    import regex

    return regex.compile(r"\X", regex.DOTALL)


@dataclass(frozen=True, slots=True)
class RenderedEntity:
    """A MessageEntity to send; offset and length in UTF-16 code units of its part's text."""

    type: str
    offset: int
    length: int
    url: str | None = None
    language: str | None = None

    @property
    def end(self) -> int:
        return self.offset + self.length

    def as_dict(self) -> dict[str, Any]:
        """The entity as the Bot API's JSON object."""
        found: dict[str, Any] = {"type": self.type, "offset": self.offset, "length": self.length}
        if self.url is not None:
            found["url"] = self.url
        if self.language is not None:
            found["language"] = self.language
        return found


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
    stream cut it (adapters/pieces.py `stream_pieces(final=True)`, the cuts the streamed messages
    already have), each piece rendered on its own, so message i of the stream becomes part i and
    the entities of every message are whole. A piece whose rendering is longer than a message
    (Markdown hardly ever grows when rendered) continues in the next part."""
    pieces = stream_pieces(sendable(markdown), limit, final=True)
    return tuple(part for piece in pieces for part in telegram_parts(piece, limit))


def render(markdown: str) -> tuple[str, tuple[RenderedEntity, ...]]:
    """Markdown to plain text and entities (bold, italic, strikethrough, spoiler, code, pre with
    its language, links, blockquotes; headings bold, the two smallest italic; lists as text markers).

    Raw HTML stays as the text it was written as (the renderer would drop it). Should the
    renderer fail or lose every character, the text goes as written, without entities.
    """
    source = sendable(markdown)
    if not source.strip():
        return "", ()
    try:
        text, found = _convert(_literal_html(source))
    except Exception as exc:  # noqa: BLE001 - a reply goes out unformatted rather than not at all
        log.warning("telegram: Markdown rendering failed (%s); it goes as written", type(exc).__name__)
        return source, ()
    if not text.strip():
        return source, ()
    return text, _allowed(found)


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
    clusters: list[str] = []
    for cluster in _graphemes().findall(text):
        clusters.extend(cluster if _units(cluster) > limit else [cluster])
    # One stand-in character per cluster, so the boundary patterns of adapters.text can only
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


def _convert(source: str) -> tuple[str, list[Any]]:
    import telegramify_markdown  # here: only a Telegram send needs it

    config = telegramify_markdown.RenderConfig.isolated()
    symbols = config.markdown_symbol
    # Headings without emoji the model did not write.
    for level in range(1, 7):
        setattr(symbols, f"heading_level_{level}", "")
    return telegramify_markdown.convert(source, config=config)


def _literal_html(source: str) -> str:
    """`source` with the `<` of every raw HTML tag or block backslash-escaped, so that
    "press <Enter>" or a pasted <div> stays text instead of vanishing."""
    if "<" not in source:
        return source
    import pyromark
    from telegramify_markdown.converter import STANDARD_OPTIONS

    for _ in range(source.count("<")):  # each round escapes at least one `<`, never one already escaped
        data = source.encode("utf-8")
        offsets = []
        for payload, span in pyromark.events_with_range(source, options=STANDARD_OPTIONS):
            if isinstance(payload, dict) and ("InlineHtml" in payload or payload.get("Start") == "HtmlBlock"):
                at = data.find(b"<", span["start"], span["end"])
                if at >= 0:
                    offsets.append(at)
        if not offsets:
            break
        pieces, last = [], 0
        for at in sorted(set(offsets)):
            pieces += [data[last:at], b"\\"]
            last = at
        source = b"".join([*pieces, data[last:]]).decode("utf-8")
    return source


def _allowed(found: list[Any]) -> tuple[RenderedEntity, ...]:
    """The rendered entities Telegram accepts: kept types, linkable URLs, and nesting by its rules
    (an entity that would break them is left out; its text stays)."""
    candidates = []
    for entity in found:
        if entity.type not in _KEPT or entity.length <= 0:
            continue
        if entity.type == "text_link" and not str(entity.url or "").lower().startswith(_LINK_SCHEMES):
            continue
        language = entity.language if entity.type == "pre" and entity.language else None
        url = entity.url if entity.type == "text_link" else None
        candidates.append(RenderedEntity(entity.type, entity.offset, entity.length, url=url, language=language))
    kept: list[RenderedEntity] = []
    # Outer ones first; of two over the same text, the one that says more (a link over its code).
    for entity in sorted(candidates, key=lambda e: (e.offset, -e.length, _PRECEDENCE.get(e.type, 9))):
        if all(_may_share(other, entity) for other in kept):
            kept.append(entity)
    return tuple(kept)


def _may_share(a: RenderedEntity, b: RenderedEntity) -> bool:
    """Whether Telegram accepts entities a and b together."""
    if a.end <= b.offset or b.end <= a.offset:
        return True
    if a.offset <= b.offset and b.end <= a.end and _may_contain(a.type, b.type):
        return True
    return b.offset <= a.offset and a.end <= b.end and _may_contain(b.type, a.type)


def _may_contain(outer: str, inner: str) -> bool:
    if inner in _FORMATTING:
        return outer not in ("pre", "code")
    if outer in _FORMATTING:
        return True
    return outer in _QUOTES and inner not in _QUOTES


def _stand_in(cluster: str) -> str:
    if cluster.isspace():
        return "\n" if "\n" in cluster or "\r" in cluster else " "
    return cluster if len(cluster) == 1 else "x"


def _units(text: str) -> int:
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)
