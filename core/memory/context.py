"""Context assembly: persona, pads, the rolling summary up to its watermark, then the newest
items after the watermark that fit the budget; and folding older items into the summary.

Each mode has its own view, summary and pad:
- normal mode sees normal messages and one placeholder per private segment; its
  summary (keyed by conversation) folds exactly that masked view;
- private mode (living in segment S) sees normal messages and S, other segments
  as placeholders; its summary is keyed by S, starts as a copy of the normal
  summary (incognito: existing memory is read) and then advances on its own.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable
from dataclasses import dataclass

from core.ports.clock import Clock
from core.ports.model import BaseProvider
from core.ports.store.timeline import ContextStore
from core.values import copy
from core.values.errors import ProviderError
from core.values.model import (
    ChatMessage,
    CompletionRequest,
    ContextReads,
    Conversation,
    Summary,
    TimelineItem,
)
from core.values.modes import ModeState
from core.values.names import speaker

log = logging.getLogger(__name__)

EMPTY_SUMMARY = Summary("", 0)
# Where a message not stored yet stands in a view: after every stored item (SQLite's largest id).
UPCOMING_POSITION = 2**63 - 1


# Tokens per UTF-8 byte before the server has told us better: English runs near 0.25, but
# other scripts, code and random strings run far higher, and a byte is never less than a
# token's worth of risk, so start at a cautious half.
INITIAL_TOKENS_PER_BYTE = 0.5


def utf8_size(text: str) -> int:
    """The UTF-8 size of `text` (a lone surrogate counted as its replacement): its length when it
    is ASCII, which Python knows without reading it, so the common case copies nothing."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "replace"))


def estimate_tokens(text: str, tokens_per_byte: float = INITIAL_TOKENS_PER_BYTE) -> int:
    """A tokenizer-free estimate from the UTF-8 size (a character count undercounts every
    script but English), plus framing."""
    return int(utf8_size(text) * tokens_per_byte) + 4


class TokenRatio:
    """Tokens per byte, learned from the prompt_tokens the server reports: it rises at once
    when a prompt costs more than assumed, and falls back slowly."""

    def __init__(self, initial: float = INITIAL_TOKENS_PER_BYTE) -> None:
        self.value = initial

    def observe(self, prompt_bytes: int, prompt_tokens: int | None) -> None:
        if not prompt_tokens or prompt_bytes < 200:  # too small to say anything
            return
        seen = min(max(prompt_tokens / prompt_bytes * 1.15, 0.15), 1.2)  # a margin over what was seen
        self.value = seen if seen > self.value else 0.9 * self.value + 0.1 * seen


@dataclass(frozen=True, slots=True)
class ContextBudget:
    total_tokens: int = 3000
    max_items: int = 80  # newest items fetched per turn; bounds work whatever the history length
    fold_min: int = 16  # fold once at least this many messages lie before the window
    fold_batch: int = 64


@dataclass(frozen=True, slots=True)
class ReadAhead:
    """A turn's context reads (`ContextAssembler.read_ahead`), taken while its user message was being stored,
    and that message: its id and the text stored."""

    reads: Awaitable[ContextReads]
    message_id: int
    text: str


@dataclass(frozen=True, slots=True)
class Persona:
    normal: str = copy.DEFAULT_PERSONA
    private_additions: str = ""


@dataclass(frozen=True, slots=True)
class AssembledContext:
    messages: tuple[ChatMessage, ...]
    window: tuple[TimelineItem, ...]
    summary: Summary
    needs_fold: bool
    tokens_per_byte: float = INITIAL_TOKENS_PER_BYTE  # the ratio the window was fitted with


def _with_stored(items: list[TimelineItem], ahead: ReadAhead, limit: int) -> list[TimelineItem]:
    """The newest `limit` items of the view once the turn's message is stored, from a read taken beside its
    commit: as read when the read saw the message; else the newest `limit - 1` read and the message as the
    upcoming item, uncounted like the preview's (the read's count of messages left it out as well)."""
    if any(item.position == ahead.message_id and item.masked_segment_id is None for item in items):
        return items
    kept = items[max(0, len(items) - (limit - 1)) :]
    kept.append(TimelineItem(UPCOMING_POSITION, "user", ahead.text))
    return kept


class ContextAssembler:
    def __init__(self, store: ContextStore, persona: Persona, budget: ContextBudget, clock: Clock) -> None:
        self._store = store
        self._persona = persona
        self._budget = budget
        self._clock = clock
        self.ratio = TokenRatio()

    async def read_ahead(self, conversation: Conversation, state: ModeState) -> ContextReads:
        """What `assemble` reads for a turn in `state`'s mode, read while the turn's user message is being stored
        (its commit and this read overlap: one wait instead of two); `assemble(ahead=...)` then gives the context
        a read after that commit would, whichever of the two the read saw (docs/architecture.md)."""
        return await self._read(conversation, state, self._budget.max_items)

    async def _read(self, conversation: Conversation, state: ModeState, limit: int) -> ContextReads:
        # Summaries, pads, the view and the count that decides a fold: one read, one snapshot.
        return await self._store.context_reads(
            conversation.id,
            person_id=conversation.person_id,
            segment_id=state.segment_id,
            limit=limit,
            count_up_to=limit + self._budget.fold_min,
        )

    async def assemble(
        self,
        conversation: Conversation,
        state: ModeState,
        *,
        shrink: int = 1,
        upcoming: str | None = None,
        ahead: ReadAhead | None = None,
    ) -> AssembledContext:
        """The request's messages for this mode; `shrink` divides the budget (a retry after the
        server found the request too long). `upcoming`: a user message not stored yet, standing where
        the next stored message will (the newest), so that the window is fitted as it will be once
        that message is stored (the `/context` preview; a turn stores its message first). `ahead`: the
        reads `read_ahead` took beside the storing of the turn's message, instead of a read now."""
        visible = state.segment_id
        if ahead is not None:
            reads = await ahead.reads
            fetched = _with_stored(reads.items, ahead, self._budget.max_items)
        else:
            limit = self._budget.max_items if upcoming is None else self._budget.max_items - 1
            reads = await self._read(conversation, state, limit)
            fetched = reads.items
        normal = reads.normal_summary or EMPTY_SUMMARY
        # A new private summary starts where the normal one stands (normal content only).
        summary = normal if visible is None else (reads.private_summary or normal)
        system = self._system_text(conversation, state, summary, reads)
        if upcoming is not None:
            fetched.append(TimelineItem(UPCOMING_POSITION, "user", upcoming))
        ratio = self.ratio.value  # read once, after the reads: the budget and the window use the same
        remaining = self._budget.total_tokens // shrink - estimate_tokens(system, ratio)
        window = _fit(fetched, remaining, ratio)
        needs_fold = False
        messages = [ChatMessage("system", system)]
        if window:
            # The view's messages between the watermark and the window: all of them after the watermark
            # but those from the window's first on (every one of those was fetched: the newest items).
            # One pass over the window makes its chat messages and counts them: the window is the
            # newest items, so no item before it stands at or after its first position.
            newer = 0
            for item in window:
                if item.masked_segment_id is not None:  # a placeholder
                    messages.append(ChatMessage("system", copy.PLACEHOLDER))
                    continue
                messages.append(ChatMessage(item.role or "user", item.text or ""))
                newer += item.position != UPCOMING_POSITION
            needs_fold = reads.messages_after - newer >= self._budget.fold_min
        return AssembledContext(tuple(messages), tuple(window), summary, needs_fold, ratio)

    def _system_text(self, conversation: Conversation, state: ModeState, summary: Summary, reads: ContextReads) -> str:
        parts = [self._persona.normal]
        if state.is_private:
            if self._persona.private_additions:
                parts.append(self._persona.private_additions)
            parts.append(copy.PRIVATE_SYSTEM_LINE)
        if conversation.person_id is not None:  # pads are personal: never loaded in a group
            pad = [e.text for e in reads.normal_pad]
            if pad:
                parts.append(copy.MEMORY_HEADER + "\n" + "\n".join(f"- {t}" for t in pad))
            if state.is_private:
                private_pad = [e.text for e in reads.private_pad]
                if private_pad:
                    parts.append(copy.PRIVATE_MEMORY_HEADER + "\n" + "\n".join(f"- {t}" for t in private_pad))
        if summary.text:
            parts.append(copy.SUMMARY_HEADER + "\n" + summary.text)
        return "\n\n".join(parts)

    async def fold(self, conversation: Conversation, state: ModeState, provider: BaseProvider) -> bool:
        """Fold the oldest items before the window into the mode's summary; advance its watermark.
        Returns whether the watermark moved. A provider failure leaves everything as it was."""
        context = await self.assemble(conversation, state)
        if not context.needs_fold or not context.window:
            return False
        visible = state.segment_id
        first = context.window[0]
        upto = first.position if first.is_placeholder else first.position - 1
        batch = await self._store.view(
            conversation.id,
            visible_segment=visible,
            after=context.summary.watermark,
            upto=upto,
            limit=self._budget.fold_batch,
            newest_first=False,
        )
        while batch and batch[-1].is_placeholder:  # the watermark is always a message id
            batch.pop()
        if not batch:
            return False
        request = summary_request(context.summary.text, batch, private=state.is_private)
        try:
            completion = await provider.complete(request)
        except ProviderError as exc:
            log.warning(
                "summary fold for conversation %s failed (%s); will retry later", conversation.id, type(exc).__name__
            )
            return False
        text, facts = split_facts(completion.text, "SUMMARY")
        new = Summary(text or context.summary.text, batch[-1].position)
        if state.segment_id is not None:
            await self._store.save_summary(
                conversation.id,
                new,
                self._clock.now(),
                segment_id=state.segment_id,
                pad_person_id=conversation.person_id,
                pad_facts=facts,
            )
        else:
            await self._store.save_summary(conversation.id, new, self._clock.now())
        log.info(
            "folded %d items of conversation %s (%s); watermark %d -> %d",
            len(batch),
            conversation.id,
            state.mode.value,
            context.summary.watermark,
            new.watermark,
        )
        return True


def summary_request(previous: str, items: list[TimelineItem], *, private: bool = False) -> CompletionRequest:
    lines = [
        copy.PLACEHOLDER if item.is_placeholder else f"{speaker(item.role, person='Person')}: {item.text}"
        for item in items
    ]
    body = f"Running summary:\n{previous or '(none yet)'}\n\nConversation to fold in:\n" + "\n".join(lines)
    return CompletionRequest(
        messages=(ChatMessage("system", copy.SUMMARY_INSTRUCTION), ChatMessage("user", body)),
        purpose="summary",
        temperature=0.2,
        max_tokens=700,  # twelve sentences and a few facts; its own cap, not the reply's
        private=private,  # a private summary's fold: the provider keeps what it learns from it apart
    )


_FACT_LINE = re.compile(r"^\s*[-*]\s+(.+?)\s*$")


def split_facts(text: str, label: str, limit: int = 4000) -> tuple[str, tuple[str, ...]]:
    """Split a `LABEL:` ... `FACTS:` answer; a model that ignores the form gives a body only."""
    body_part, _, facts_part = text.partition("FACTS:")
    body = body_part.replace(f"{label}:", "", 1).strip()
    facts = []
    for line in facts_part.splitlines():
        match = _FACT_LINE.match(line)
        if match and match.group(1).lower() not in {"none", "(none)", "n/a"}:
            facts.append(match.group(1)[:300])
    return body[:limit], tuple(facts[:10])


def _fit(
    items: list[TimelineItem], budget_tokens: int, tokens_per_byte: float = INITIAL_TOKENS_PER_BYTE
) -> list[TimelineItem]:
    """The newest items that fit the budget. Never empty when items exist: the newest one is
    always kept, shortened with a visible marker if it alone is over budget (the stored
    message stays whole), so no single message can lock a conversation. Older messages over
    budget are left out. The watermark was already applied by the query; nothing here
    subtracts covered material again (seed 000, incident two)."""
    kept: list[TimelineItem] = []
    used = 0
    placeholder_cost = estimate_tokens(copy.PLACEHOLDER, tokens_per_byte)
    for item in reversed(items):
        placeholder = item.masked_segment_id is not None  # `is_placeholder`, read once
        cost = placeholder_cost if placeholder else estimate_tokens(item.text or "", tokens_per_byte)
        if kept and used + cost > budget_tokens:
            break
        if not kept and cost > max(budget_tokens, 64) and not placeholder:
            text = _shorten(item.text or "", max(budget_tokens, 64), tokens_per_byte)
            item = TimelineItem(item.position, item.role, text, None)
            cost = estimate_tokens(text, tokens_per_byte)
        kept.append(item)
        used += cost
    kept.reverse()
    return kept


def _shorten(text: str, budget_tokens: int, tokens_per_byte: float) -> str:
    """The start of `text` within `budget_tokens`, cut at a character, with the marker."""
    room = max(int((budget_tokens - 4) / tokens_per_byte) - len(copy.SHORTENED_MARKER.encode()) - 1, 16)
    head = text.encode("utf-8", "replace")[:room].decode("utf-8", "ignore")
    return f"{head} {copy.SHORTENED_MARKER}"
