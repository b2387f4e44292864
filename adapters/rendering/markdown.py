"""Model Markdown as plain text and message entities (Telegram's kinds and nesting rules), which
Telegram sends as they are and the web chat's pages draw as elements."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from adapters.rendering.text import sendable

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


def render(markdown: str) -> tuple[str, tuple[RenderedEntity, ...]]:
    """Markdown to plain text and entities as Telegram accepts them (bold, italic, strikethrough, spoiler, code, pre with
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
        log.warning("Markdown rendering failed (%s); it goes as written", type(exc).__name__)
        return source, ()
    if not text.strip():
        return source, ()
    return text, _allowed(found)


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
