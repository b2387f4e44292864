"""A reply's Markdown as the pages draw it: rendered as on Telegram (adapters/telegram/formatting.py),
into plain text and entities (bold, italic, strikethrough, spoiler, code, pre with its language,
links, blockquotes; headings bold, lists with text markers), which the page's script turns into
elements. Never HTML: the text is only ever drawn as text, and a link only where its address is
http(s) or mailto (the script checks again)."""

from __future__ import annotations

from adapters.telegram.formatting import render


def formatted(markdown: str) -> dict[str, object] | None:
    """What a page draws for `markdown` ({"text", "entities"}, offsets and lengths in UTF-16 code
    units, as JavaScript counts them); None when that is `markdown` itself, unformatted."""
    text, entities = render(markdown)
    if not text or (text == markdown and not entities):
        return None
    return {"text": text, "entities": [entity.as_dict() for entity in entities]}
