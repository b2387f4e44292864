"""The line said on leaving private mode: a fixed intent, built from a constant input that holds no
conversation content (seed 000: metadata generated from protected content is a leakage channel)."""

from __future__ import annotations

import asyncio
import logging

from core.ports.model import BaseProvider
from core.values import copy
from core.values.errors import ProviderError
from core.values.model import ChatMessage, CompletionRequest

log = logging.getLogger(__name__)

TRANSITION_MAX_CHARS = 400


class TransitionLine:
    """`constant` (copy.TRANSITION_FALLBACK, no model call) or `generated` (variable wording from
    copy.TRANSITION_INSTRUCTION, capped; the constant when the provider fails or runs on)."""

    def __init__(self, provider: BaseProvider, kind: str = "constant", *, timeout: float = 30.0) -> None:
        self._provider = provider
        self.generated = kind == "generated"
        self._timeout = timeout

    async def __call__(self) -> str:
        if not self.generated:
            return copy.TRANSITION_FALLBACK
        request = CompletionRequest(
            messages=(ChatMessage("system", copy.TRANSITION_INSTRUCTION), ChatMessage("user", "I'm back.")),
            purpose="transition",
            temperature=1.0,
            max_tokens=120,
        )
        try:
            completion = await asyncio.wait_for(self._provider.complete(request), self._timeout)
        except (TimeoutError, ProviderError) as exc:
            log.info("transition line fell back to the constant (%s)", type(exc).__name__)
            return copy.TRANSITION_FALLBACK
        text = completion.text.strip()
        # A small model may run on and off its instruction: a long answer is not used.
        return text if text and len(text) <= TRANSITION_MAX_CHARS else copy.TRANSITION_FALLBACK
