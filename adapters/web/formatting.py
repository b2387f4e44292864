"""A reply's Markdown as the pages draw it: rendered as on Telegram (adapters/rendering/markdown.py),
into plain text and entities (bold, italic, strikethrough, spoiler, code, pre with its language,
links, blockquotes; headings bold, lists with text markers). The page's script turns them into
elements around text nodes (a live reply, the history it draws); `formatted_html` does the same on
the server for the page as first sent. Never the model's HTML: every character is escaped text,
and a link gets its address only when that is http(s) or mailto."""

from __future__ import annotations

import html
import re

from adapters.rendering.markdown import RenderedEntity, render

_TAGS = {
    "bold": "strong",
    "italic": "em",
    "strikethrough": "s",
    "spoiler": "span",
    "code": "code",
    "pre": "pre",
    "text_link": "a",
    "blockquote": "blockquote",
    "expandable_blockquote": "blockquote",
}
_LINKABLE = re.compile(r"^(https?:|mailto:)", re.IGNORECASE)


def formatted(markdown: str) -> dict[str, object] | None:
    """What a page draws for `markdown` ({"text", "entities"}, offsets and lengths in UTF-16 code
    units, as JavaScript counts them); None when that is `markdown` itself, unformatted."""
    shown = _rendered(markdown)
    if shown is None:
        return None
    text, entities = shown
    return {"text": text, "entities": [entity.as_dict() for entity in entities]}


def formatted_html(markdown: str) -> str:
    """`markdown` as escaped HTML with its formatting's elements (what the script draws from
    `formatted`, nested the same way: the outer entity first, an inner one cut at its parent's end)."""
    shown = _rendered(markdown)
    if shown is None:
        return html.escape(markdown, quote=True)
    text, entities = shown
    units = text.encode("utf-16-le")
    out: list[str] = []
    stack: list[tuple[str, int]] = [("", len(units) // 2)]
    at = 0

    def up_to(end: int) -> None:
        nonlocal at
        if end > at:
            out.append(html.escape(units[2 * at : 2 * end].decode("utf-16-le", errors="replace"), quote=True))
            at = end

    for entity in sorted(entities, key=lambda e: (e.offset, -e.length)):  # the outer one first
        start = max(entity.offset, at)
        while len(stack) > 1 and stack[-1][1] <= start:
            up_to(stack[-1][1])
            out.append(f"</{stack.pop()[0]}>")
        up_to(start)
        end = min(entity.end, stack[-1][1])
        if end <= start:
            continue
        tag, opening = _opening(entity)
        out.append(opening)
        stack.append((tag, end))
    while stack:
        up_to(stack[-1][1])
        tag = stack.pop()[0]
        if tag:
            out.append(f"</{tag}>")
    return "".join(out)


def _rendered(markdown: str) -> tuple[str, tuple[RenderedEntity, ...]] | None:
    text, entities = render(markdown)
    if not text or (text == markdown and not entities):
        return None
    return text, entities


def _opening(entity: RenderedEntity) -> tuple[str, str]:
    tag = _TAGS.get(entity.type, "span")
    if entity.type == "spoiler":
        return tag, '<span class="spoiler">'
    if entity.type == "pre" and entity.language:
        return tag, f'<pre data-language="{html.escape(entity.language, quote=True)}">'
    if tag == "a":
        url = entity.url or ""
        if not _LINKABLE.match(url):
            return "span", "<span>"
        return tag, f'<a href="{html.escape(url, quote=True)}" rel="noopener noreferrer" target="_blank">'
    return tag, f"<{tag}>"
