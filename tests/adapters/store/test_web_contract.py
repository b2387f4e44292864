"""WebQueries' contract (adapters/storage/web.py) on SQLite and PostgreSQL: a sign-in code opens one session at
most, expired codes and sessions open nothing and are dropped, the readiness probe writes."""

from __future__ import annotations

import asyncio

import pytest

from adapters.storage.engine import Database
from adapters.storage.web import WebQueries
from tests.adapters.store.seed import count

pytestmark = pytest.mark.engines


async def test_a_sign_in_code_opens_one_session_at_most(engine: Database) -> None:
    web = WebQueries(engine)
    await web.save_login_code("code-hash", 1.0, 301.0)

    first = await web.exchange_login_code("code-hash", "token-1", 2.0, 1000.0)
    second = await web.exchange_login_code("code-hash", "token-2", 3.0, 1000.0)

    assert first is not None and second is None
    assert await web.session("token-1", 4.0) == first
    assert await web.session("token-2", 4.0) is None
    assert await count(engine, "SELECT count(*) FROM web_sessions") == 1


async def test_expired_codes_and_sessions_open_nothing_and_are_dropped(engine: Database) -> None:
    web = WebQueries(engine)
    await web.save_login_code("old", 1.0, 10.0)
    assert await web.exchange_login_code("old", "token", 10.0, 100.0) is None  # expired at 10
    await web.save_login_code("fresh", 5.0, 50.0)
    session = await web.exchange_login_code("fresh", "token", 6.0, 100.0)
    assert session is not None and await web.session("token", 100.0) is None

    await web.save_login_code("later", 100.0, 400.0)  # drops the expired code and session

    assert await count(engine, "SELECT count(*) FROM web_login_codes") == 1
    assert await count(engine, "SELECT count(*) FROM web_sessions") == 0


async def test_an_ended_session_is_gone_and_the_probe_writes(engine: Database) -> None:
    web = WebQueries(engine)
    await web.save_login_code("code", 1.0, 100.0)
    session = await web.exchange_login_code("code", "token", 2.0, 100.0)
    assert session is not None

    await web.end_session(session.id)
    await web.probe_write(3.0)
    await web.probe_write(4.0)

    assert await web.session("token", 5.0) is None
    assert await count(engine, "SELECT count(*) FROM health_probe WHERE probed_at = 4.0") == 1


async def test_two_exchanges_of_one_code_at_once_open_one_session(engine: Database) -> None:
    web = WebQueries(engine)
    await web.save_login_code("code-hash", 1.0, 301.0)

    opened = await asyncio.gather(*(web.exchange_login_code("code-hash", f"t{n}", 2.0, 900.0) for n in range(2)))

    assert sum(session is not None for session in opened) == 1
    assert await count(engine, "SELECT count(*) FROM web_sessions") == 1
