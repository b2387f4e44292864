"""Model Markdown reaches Telegram as message entities, split without breaking an entity or a grapheme
(issue 15, point 2), against the fake Bot API server, which checks entities as Telegram does."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
import regex
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.storage.stores import Stores
from adapters.telegram.formatting import _split_clusters, render, split_rendered
from bot.bootstrap import build_companion, core_entry
from core.delivery.outbox import Outbox
from core.ports.clock import SystemClock
from core.turn.config import CompanionConfig
from tests.helpers.adapters import AttachedPlatform, telegram_adapter
from tests.helpers.chat import all_rows
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer, SentMessage, check_message

USER = 111
FAMILY = "👨\u200d👩\u200d👧\u200d👦"  # one grapheme, seven code points, eleven UTF-16 code units
GRAPHEME = regex.compile(r"\X", regex.DOTALL)


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer() as server:
        yield server


@pytest.fixture
async def adapter(
    telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> AsyncIterator[AttachedPlatform]:
    """The real adapter and core; replies go out through the outbox, as in the gateway."""
    provider = OpenAICompatibleProvider(model.base_url, "sk-test", "test-model", timeout=5.0)
    companion = build_companion(
        stores,
        provider,
        CompanionConfig(allowed_accounts=frozenset({f"telegram:{USER}"})),
        # Streaming off: these tests are about how a reply sent whole is cut and formatted, and a
        # long fake answer (thousands of one-word chunks) may take longer than the 0.4 s that sends
        # an answer whole on a loaded machine. The streamed cut and formatting are tested with
        # streaming on in test_telegram_streaming.py (the same 4096 limit, entities in each part).
        outbox=Outbox(stores.outbox, SystemClock(), pacing=None),
    )
    await companion.start()
    adapter = telegram_adapter(telegram, core_entry(companion))
    await adapter.start()
    try:
        yield adapter
    finally:
        await adapter.aclose()
        await companion.drain()
        await provider.aclose()


async def replies(telegram: FakeTelegramServer, text: str, count: int = 1) -> list[SentMessage]:
    """Send `text` as the user and return the `count` messages of its reply."""
    before = len(telegram.sent)
    telegram.send_text(USER, USER, text)
    sent = await telegram.wait_for_sent(before + count)
    return sent[before : before + count]


async def after_a_later_turn(telegram: FakeTelegramServer) -> list[SentMessage]:
    """Everything sent once a /mode sent now is answered (one chat's turns run in order): the
    window of a negative check, instead of a fixed sleep."""
    before = len(telegram.sent)
    telegram.send_text(USER, USER, "/mode")
    await telegram.wait_for(lambda: any(m.text.startswith("You are in ") for m in telegram.sent[before:]))
    return list(telegram.sent)


def spans(message: SentMessage) -> set[tuple[str, str, str | None]]:
    """Each entity as (type, the text it covers, its url or language)."""
    units = message.text.encode("utf-16-le")
    return {
        (
            e["type"],
            units[2 * e["offset"] : 2 * (e["offset"] + e["length"])].decode("utf-16-le"),
            e.get("url") or e.get("language"),
        )
        for e in message.entities
    }


def units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


EVERY_FEATURE = """## Plan for today

Some **bold**, *italic*, ~~struck~~, `inline code` and a [link](https://example.com/a?b=1).
A [`linked code`](https://example.com/code) and press <Enter> to go.

```python
print("hi")
```

- first **item**
- second
  - nested

1. one
2. two

> a quote with *style*
> > and a quote inside it
"""


async def test_a_reply_with_every_markdown_feature_arrives_as_entities_and_is_stored_as_markdown(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    model.reply_text(EVERY_FEATURE)
    [message] = await replies(telegram, "plan my day")
    assert message.text == (
        "Plan for today\n\n"
        "Some bold, italic, struck, inline code and a link.\n"
        "A linked code and press <Enter> to go.\n\n"  # raw HTML-looking text stays text
        'print("hi")\n\n'
        "⦁ first item\n⦁ second\n  ⦁ nested\n\n"
        "1. one\n2. two\n\n"
        "a quote with style\nand a quote inside it"
    )
    assert spans(message) == {
        ("bold", "Plan for today", None),  # a heading is bold
        ("bold", "bold", None),
        ("italic", "italic", None),
        ("strikethrough", "struck", None),
        ("code", "inline code", None),
        ("text_link", "link", "https://example.com/a?b=1"),
        ("text_link", "linked code", "https://example.com/code"),  # a link may not hold code: the link stays
        ("pre", 'print("hi")', "python"),
        ("bold", "item", None),
        ("blockquote", "a quote with style\nand a quote inside it", None),  # no blockquote in a blockquote
        ("italic", "style", None),
    }
    assert all("parse_mode" not in params for params in telegram.calls_of("sendMessage"))
    stored = await all_rows(stores, "SELECT text FROM messages WHERE role = 'assistant'")
    assert stored == [(EVERY_FEATURE.strip(),)]  # the model's Markdown (the core strips the ends)


async def test_a_long_reply_splits_at_4096_with_an_emoji_family_whole_and_every_entity_inside_its_part(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    # One bold run with no space to split on, the family straddling code unit 4096.
    model.reply_text("**" + "a" * 4090 + FAMILY + "b" * 100 + "**")
    first, second = await replies(telegram, "a long one", count=2)
    assert first.text == "a" * 4090 and second.text == FAMILY + "b" * 100
    assert spans(first) == {("bold", "a" * 4090, None)}  # the entity is cut in two, one per part
    assert spans(second) == {("bold", FAMILY + "b" * 100, None)}
    assert len(await after_a_later_turn(telegram)) == 3  # two parts and the /mode answer: none sent twice


async def test_a_code_block_longer_than_a_message_arrives_as_two_pre_blocks_with_its_language(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    lines = [f"value_{n} = {n} * 2" for n in range(400)]  # about 7600 code units
    model.reply_text("Here:\n\n```python\n" + "\n".join(lines) + "\n```")
    intro, *parts = await replies(telegram, "some code", count=3)  # a paragraph's end is the first choice
    assert intro.text == "Here:" and "\n".join(m.text for m in parts) == "\n".join(lines)
    assert all(units(m.text) <= 4096 for m in parts)
    for message in parts:
        [pre] = [e for e in message.entities if e["type"] == "pre"]
        assert pre["language"] == "python"
        assert message.text.encode("utf-16-le")[2 * pre["offset"] :].decode("utf-16-le").startswith("value_")


async def test_entities_telegram_refuses_send_the_part_once_more_as_plain_text_and_the_log_has_no_text(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    refusal = "Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 3"
    telegram.fail_next("sendMessage", 400, description=refusal)
    model.reply_text("Some **secret-ish words** here")
    with caplog.at_level(logging.INFO):
        [message] = await replies(telegram, "hello")
    assert message.text == "Some secret-ish words here" and message.entities == ()  # the rendered text, plain
    calls = [p for p in telegram.calls_of("sendMessage") if "secret-ish" in p["text"]]
    assert len(calls) == 2 and "entities" in calls[0] and "entities" not in calls[1]
    assert len([m for m in await after_a_later_turn(telegram) if "secret-ish" in m.text]) == 1
    assert any("entities" in r.getMessage() and "refused" in r.getMessage() for r in caplog.records)
    assert not any("secret-ish" in r.getMessage() for r in caplog.records)


async def test_a_400_that_is_not_about_entities_is_not_sent_again_plain(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    telegram.fail_next("sendMessage", 400, description="Bad Request: chat not found")
    model.reply_text("Some **bold** words")
    telegram.send_text(USER, USER, "hello")
    await after_a_later_turn(telegram)
    assert len([p for p in telegram.calls_of("sendMessage") if "bold" in p["text"]]) == 1


# --- the fake refuses what Telegram refuses ----------------------------------------


@pytest.mark.parametrize(
    "entities",
    [
        [{"type": "bold", "offset": 0, "length": 6}],  # ends after the end of the text
        [{"type": "bold", "offset": 1, "length": 0}],
        [{"type": "shiny", "offset": 0, "length": 2}],
        [{"type": "text_link", "offset": 0, "length": 2}],  # no url
        [{"type": "bold", "offset": 0, "length": 3}, {"type": "italic", "offset": 2, "length": 3}],  # overlap
        [{"type": "code", "offset": 0, "length": 4}, {"type": "bold", "offset": 1, "length": 2}],
        [{"type": "blockquote", "offset": 0, "length": 5}, {"type": "blockquote", "offset": 1, "length": 2}],
        [
            {"type": "text_link", "offset": 0, "length": 5, "url": "https://a.b"},
            {"type": "code", "offset": 0, "length": 2},
        ],
    ],
)
def test_the_fake_refuses_entities_telegram_refuses(entities: list[dict]) -> None:
    _, refusal = check_message("😀abc", entities)  # five UTF-16 code units
    assert refusal is not None and refusal.startswith("can't parse entities")


def test_the_fake_accepts_nesting_telegram_allows_and_counts_utf16_units() -> None:
    nested = [
        {"type": "blockquote", "offset": 0, "length": 5},
        {"type": "text_link", "offset": 0, "length": 3, "url": "https://a.b"},
        {"type": "bold", "offset": 1, "length": 2},
        {"type": "code", "offset": 3, "length": 2},
        {"type": "italic", "offset": 3, "length": 2},
    ]
    assert check_message("😀abc", nested) == (nested, None)
    assert check_message("😀" * 2048, None)[1] is None
    assert check_message("😀" * 2048 + "a", None)[1] == "message is too long"


# --- properties -------------------------------------------------------------------

PIECES = st.sampled_from(
    [
        "word", "more", " ", " ", "\n", "\n\n", ". ", "**", "*", "_", "`", "```\n", "~~", "# ", "> ", "- ", "1. ",
        "[a link](https://example.com)", "<b>", FAMILY, "🇺🇦", "👍🏽", "e\u0301", "😀", "é", "\u200d", "字。",
    ]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(PIECES | st.text(max_size=3), max_size=80), limit=st.integers(min_value=12, max_value=120))
def test_splitting_never_breaks_a_grapheme_and_every_entity_lies_valid_inside_its_part(
    pieces: list[str], limit: int
) -> None:
    text, entities = render("".join(pieces))
    clusters = GRAPHEME.findall(text)
    assume(all(units(c) <= limit for c in clusters))
    parts = split_rendered(text, entities, limit)
    boundaries = {0}
    for cluster in clusters:
        boundaries.add(max(boundaries) + len(cluster))
    position = 0
    for part in parts:
        assert units(part.text) <= limit
        start = text.find(part.text, position)
        assert start >= 0 and text[position:start].strip() == ""  # only whitespace is dropped, in order
        assert start in boundaries and start + len(part.text) in boundaries  # whole graphemes only
        position = start + len(part.text)
        _, refusal = check_message(part.text, [e.as_dict() for e in part.entities])
        assert refusal is None, refusal
    assert text[position:].strip() == ""


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(PIECES | st.text(max_size=3), max_size=40),
    limit=st.integers(min_value=2, max_value=200),
    rendered=st.booleans(),
)
def test_a_text_that_fits_one_message_is_the_part_its_grapheme_clusters_make(
    pieces: list[str], limit: int, rendered: bool
) -> None:
    """The shortcut for a text that fits (most replies) gives what the cut between grapheme clusters gives."""
    text, entities = render("".join(pieces)) if rendered else ("".join(pieces), ())
    assert split_rendered(text, entities, limit) == _split_clusters(text, entities, limit)


async def test_a_mirror_to_a_telegram_chat_is_rendered_too(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    group = -100500
    telegram.send_text(USER, USER, f"/mirror telegram:{group}")
    await telegram.wait_for(lambda: any(t.startswith("Mirror 1 is on") for t in telegram.texts_to(USER)))
    model.reply_text("A **bold** answer")
    telegram.send_text(USER, USER, "hi")
    await telegram.wait_for(lambda: sum("bold" in m.text for m in telegram.sent) == 2)
    [reply] = [m for m in telegram.sent if m.chat_id == USER and "bold" in m.text]
    [mirror] = [m for m in telegram.sent if m.chat_id == group and "bold" in m.text]
    assert reply.text == "A bold answer" and spans(reply) == {("bold", "bold", None)}
    assert mirror.text == "[telegram DM] you: hi\ncompanion: A bold answer"
    assert spans(mirror) == {("bold", "bold", None)}


# --- rendering edge cases ---------------------------------------------------------


def test_a_link_telegram_cannot_open_stays_as_its_text() -> None:
    text, entities = render("[here](/relative/path) and [there](https://example.com)")
    assert text == "here and there"
    assert [(e.type, e.url) for e in entities] == [("text_link", "https://example.com")]


def test_text_the_renderer_cannot_take_goes_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    import adapters.rendering.markdown as formatting

    def broken(source: str) -> None:
        raise RuntimeError("renderer bug")

    monkeypatch.setattr(formatting, "_convert", broken)
    assert render("**as written**") == ("**as written**", ())


def test_blank_or_broken_text_never_fails_and_never_sends_an_empty_part() -> None:
    assert split_rendered(*render(" \n ")) == ()
    assert render("```\n```") == ("```\n```", ())  # rendered to nothing: sent as written, not empty
    text, _ = render("lone \ud800 surrogate")
    assert text == "lone ? surrogate"
