"""Fixtures of the adapter tests: the fake model server (`server` for the model-link tests, `model`
for the platform tests), a provider over `server`, a sleep that only records, and `platform`: a test
asking for it runs once for each chat app that has what it `needs`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from bot.bootstrap import build_companion
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.platforms import HAS, PLATFORMS, ChatDriver
from tests.helpers.platforms.discord import DiscordDriver
from tests.helpers.platforms.telegram import TelegramDriver
from tests.helpers.platforms.web import WebDriver

DRIVERS = {"telegram": TelegramDriver, "discord": DiscordDriver, "web": WebDriver}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`platform` over the chat apps having every feature of the test's `needs` marks: the others
    get no case (not a skipped one). A test parametrizing `platform` itself is left as it is."""
    if "platform" not in metafunc.fixturenames or any(
        "platform" in _names(mark.args[0]) for mark in metafunc.definition.iter_markers("parametrize")
    ):
        return
    needed = {feature for mark in metafunc.definition.iter_markers("needs") for feature in mark.args}
    metafunc.parametrize("platform", [name for name in PLATFORMS if needed <= HAS[name]], indirect=True)


def _names(argnames: str | tuple[str, ...] | list[str]) -> list[str]:
    return [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) else list(argnames)


@pytest.fixture
async def platform(request: pytest.FixtureRequest) -> AsyncIterator[ChatDriver]:
    """The chat app of the case (parametrized by `pytest_generate_tests`), its fake server serving."""
    async with DRIVERS[request.param]() as driver:
        yield driver


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
async def linked(stores, clock, passphrase_hash, provider) -> AsyncIterator[Companion]:
    """A real Companion whose provider talks to the module's `server` (strict where a module says so)."""
    companion = build_companion(stores, provider, CompanionConfig(passphrase_hash=passphrase_hash), clock=clock)
    await companion.start()
    try:
        yield companion
    finally:
        await companion.drain()
