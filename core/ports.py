"""Ports the core depends on; adapters implement them, tests pass fakes of the same shape."""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

from core.model import Completion, CompletionRequest, InboundMessage, Reply


@runtime_checkable
class BaseProvider(Protocol):
    """A language model behind a chat-completions interface."""

    name: str

    async def complete(self, request: CompletionRequest) -> Completion:
        """Return one completion for `request`.

        Raises:
            core.errors.ProviderError: any failure, already translated by the adapter.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; safe to call twice."""
        ...


class BaseChatAdapter(Protocol):
    """A platform the companion talks through (Telegram, Discord, terminal, web)."""

    name: str

    async def start(self) -> None:
        """Connect and begin delivering inbound messages to the handler."""
        ...

    async def aclose(self) -> None:
        """Stop receiving, flush what is being sent, disconnect; safe to call twice."""
        ...


class MessageHandler(Protocol):
    async def __call__(self, message: InboundMessage) -> Reply | None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class AdapterStateStore(Protocol):
    """Durable key/value state for adapters (offsets, cursors); never message content."""

    async def get_adapter_state(self, name: str) -> str | None: ...

    async def set_adapter_state(self, name: str, value: str, now: float) -> None: ...
