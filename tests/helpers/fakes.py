"""Named fakes at the port level for core tests (the wire-level fakes live beside this file)."""

from __future__ import annotations

import asyncio

from core.copy import PLACEHOLDER
from core.errors import ProviderUnavailable
from core.model import Completion, CompletionRequest


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class FakeProvider:
    """Records every request; answers from a script, else a deterministic line."""

    name = "fake"

    def __init__(self) -> None:
        self.requests: list[CompletionRequest] = []
        self.script: list[Completion | Exception] = []
        self.fail_all = False
        self.delay = 0.0

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail_all:
            raise ProviderUnavailable("fake provider is down")
        if self.script:
            item = self.script.pop(0)
            if isinstance(item, Exception):
                raise item
            return item
        if request.purpose == "summary":
            return Completion("SUMMARY:\nfolded\nFACTS:\n- none")
        return Completion(f"reply {len(self.requests)}")

    async def aclose(self) -> None:
        return None

    def replies(self) -> list[CompletionRequest]:
        return [r for r in self.requests if r.purpose == "reply"]

    def last_reply_request(self) -> CompletionRequest:
        return self.replies()[-1]


def request_text(request: CompletionRequest) -> str:
    """Everything a request carries, as one string, for leak checks."""
    parts = [m.content or "" for m in request.messages]
    parts += [c.arguments for m in request.messages for c in m.tool_calls]
    parts += [t.name + t.description for t in request.tools]
    return "\n".join(parts)


def placeholders(request: CompletionRequest) -> int:
    return sum(1 for m in request.messages if m.content == PLACEHOLDER)
