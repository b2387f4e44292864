"""The model's ports: a language model behind a chat-completions interface, speech to text, and the
sink a streamed completion goes to."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from core.values.model import Completion, CompletionRequest, Partial

# Where a streamed completion goes while the model writes it (core/turn/streaming.py): awaited with
# each new state of the answer. It never waits on a platform.
PartialSink = Callable[[Partial], Awaitable[None]]


class BaseProvider(Protocol):
    """A language model behind a chat-completions interface."""

    name: str

    async def complete(self, request: CompletionRequest, *, partial: PartialSink | None = None) -> Completion:
        """Return one completion for `request`.

        Args:
            partial: where the answer goes while the model writes it (its text so far, and whether
                a tool call began), when the server streams; a provider that cannot stream never
                calls it. The returned completion is the whole answer either way.
        Raises:
            core.values.errors.ProviderError: any failure, already translated by the adapter.
        """
        ...

    async def request_body(self, request: CompletionRequest, *, streamed: bool = False) -> bytes | None:
        """What `complete(request)` (with a `partial` sink when `streamed`) would send for it now,
        built by the same code and sending nothing (the `/context` page shows it: what normal mode sees).

        Returns:
            The exact bytes of the request body `complete` would send now (each retry sends the
            same), given what the provider has learnt of its server so far (tools or images it
            refused are left out); None when nothing would leave the process (the offline
            responder reads the request in memory).
        """
        ...

    async def aclose(self) -> None:
        """Release connections; safe to call twice."""
        ...


class Transcriber(Protocol):
    """Speech to text (an OpenAI-compatible `/audio/transcriptions` server)."""

    name: str

    async def transcribe(self, audio: bytes, *, filename: str, mime_type: str) -> str:
        """Return the words spoken in `audio` (held in memory only; nothing stores it).

        Raises:
            core.values.errors.TranscriptionFailed: any failure, already translated by the adapter.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; safe to call twice."""
        ...
