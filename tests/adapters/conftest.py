"""Fixtures of the adapter tests: the fake model server (`server` for the model-link tests, `model`
for the platform tests), a provider over `server`, and a sleep that only records."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from bot.bootstrap import build_companion
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from tests.helpers.fake_openai import FakeOpenAIServer


class RecordingSleep:
    """Stands in for asyncio.sleep: records each delay and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAIServer]:
    """The fake model server of the adapter tests (a module needing a strict one defines its own)."""
    async with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
async def provider(server: FakeOpenAIServer, sleep: RecordingSleep) -> AsyncIterator[OpenAICompatibleProvider]:
    provider = OpenAICompatibleProvider(server.base_url, api_key="sk-test", model="test-model", timeout=10.0)
    provider._sleep = sleep
    try:
        yield provider
    finally:
        await provider.aclose()


@pytest.fixture
async def linked(store, clock, passphrase_hash, provider) -> AsyncIterator[Companion]:
    """A real Companion whose provider talks to the module's `server` (strict where a module says so)."""
    companion = build_companion(store, provider, CompanionConfig(passphrase_hash=passphrase_hash), clock=clock)
    await companion.start()
    try:
        yield companion
    finally:
        await companion.drain()
