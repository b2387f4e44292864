from __future__ import annotations

import pytest

from adapters.storage.sqlite import SqliteStore
from bot.bootstrap import build_companion
from core.privacy.secrets import hash_passphrase
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from tests.helpers.fakes import FakeClock, FakeProvider

PASSPHRASE = "sesame-open"

# `store_backend` (SQLite, and PostgreSQL for tests marked `engines`) and the PostgreSQL cluster of a worker.
pytest_plugins = ["tests.helpers.engine_fixtures"]


@pytest.fixture(scope="session")
def passphrase_hash() -> str:
    return hash_passphrase(PASSPHRASE)


@pytest.fixture
async def store(tmp_path):
    store = SqliteStore(tmp_path / "companion.db")
    await store.start()
    yield store
    await store.aclose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def provider() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def make_companion(store, provider, clock, passphrase_hash):
    made: list[Companion] = []

    async def make(**config) -> Companion:
        config.setdefault("passphrase_hash", passphrase_hash)
        companion = build_companion(store, provider, CompanionConfig(**config), clock=clock)
        await companion.start()
        made.append(companion)
        return companion

    return make


@pytest.fixture
async def companion(make_companion) -> Companion:
    return await make_companion()
