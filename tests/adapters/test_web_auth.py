"""Sign-in over real HTTP: one-time codes (hashed, 10 minutes, single use), rate-limited attempts, sessions."""

from __future__ import annotations

import logging
import sqlite3

import httpx
import pytest

from adapters.web.auth import CODE_SECONDS, LOGIN_SCRIPT, SESSION_COOKIE, SESSION_SECONDS
from core.privacy.lockout import ATTEMPTS, DURATION
from tests.helpers import engines
from tests.helpers.fakes import FakeClock
from tests.helpers.reader import files_holding
from tests.helpers.web import csrf_of, login_csrf, served, sign_in


def db_files(stores) -> list:
    return sorted(engines.sqlite_file(stores).parent.glob(engines.sqlite_file(stores).name + "*"))


async def test_a_sign_in_code_opens_one_session_and_works_only_once(stores):
    async with served(stores, FakeClock()) as web:
        code = await web.new_code()
        first = await sign_in(web.client, code)
        assert first.status_code == 200 and first.json() == {"next": "/"}
        assert (await web.client.get("/")).status_code == 200  # signed in
        web.client.cookies.clear()
        again = await sign_in(web.client, code)
        assert again.status_code == 401 and "companion web-login" in again.json()["error"]
        assert (await web.client.get("/")).status_code == 303  # not signed in: sent to /login


async def test_a_sign_in_code_expires_after_ten_minutes(stores):
    clock = FakeClock()
    async with served(stores, clock) as web:
        code = await web.new_code()
        clock.advance(CODE_SECONDS + 1)
        assert (await sign_in(web.client, code)).status_code == 401
        assert SESSION_COOKIE not in web.client.cookies


async def test_sign_in_codes_and_session_cookies_are_stored_only_as_hashes(stores):
    async with served(stores, FakeClock()) as web:
        code = await web.new_code()
        assert files_holding(db_files(stores), code.encode()) == []
        assert (await sign_in(web.client, code)).status_code == 200
        token = web.client.cookies[SESSION_COOKIE]
        await stores.database.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert files_holding(db_files(stores), token.encode()) == []
        ((stored,),) = await engines.rows(stores, "SELECT token_hash FROM web_sessions")
        assert len(stored) == 64 and token not in stored


async def test_wrong_codes_lock_sign_in_from_that_address_for_fifteen_minutes(stores):
    clock = FakeClock()
    async with served(stores, clock) as web:
        code = await web.new_code()
        for _ in range(ATTEMPTS):
            assert (await sign_in(web.client, "not-the-code")).status_code == 401
        locked = await sign_in(web.client, code)  # even the right code, while locked
        assert locked.status_code == 429 and "try again in 15 minutes" in locked.json()["error"]
        assert int(locked.headers["Retry-After"]) > 0
        clock.advance(DURATION + 1)  # the lock is over (and the first code expired meanwhile)
        fresh = await web.new_code()
        assert (await sign_in(web.client, fresh)).status_code == 200


async def test_the_session_cookie_is_httponly_samesite_strict_and_expiring_and_secure_over_https(stores):
    async with served(stores, FakeClock()) as web:
        response = await sign_in(web.client, await web.new_code())
        cookie = response.headers["set-cookie"]
        assert f"{SESSION_COOKIE}=" in cookie
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and f"Max-Age={int(SESSION_SECONDS)}" in cookie
        assert "Secure" not in cookie  # plain HTTP on loopback: a Secure cookie would never come back
        web.client.cookies.clear()
        token = await login_csrf(web.client)
        behind_tls = await web.client.post(
            "/login",
            json={"code": await web.new_code()},
            headers={"X-CSRF-Token": token, "X-Forwarded-Proto": "https"},
        )
        assert behind_tls.status_code == 200 and "Secure" in behind_tls.headers["set-cookie"]


async def test_a_session_ends_when_it_expires_and_when_it_signs_out(stores):
    clock = FakeClock()
    async with served(stores, clock) as web:
        await sign_in(web.client, await web.new_code())
        page = await web.client.get("/")
        out = await web.client.post("/logout", data={"csrf_token": csrf_of(page.text)})
        assert out.status_code == 303 and out.headers["location"] == "/login"
        assert await engines.rows(stores, "SELECT id FROM web_sessions") == []
        await sign_in(web.client, await web.new_code())
        clock.advance(SESSION_SECONDS + 1)
        assert (await web.client.get("/")).status_code == 303


async def test_a_signed_out_cookie_is_refused_at_once_though_it_was_just_used(stores):
    async with served(stores, FakeClock()) as web:
        await sign_in(web.client, await web.new_code())
        cookie = web.client.cookies[SESSION_COOKIE]
        page = await web.client.get("/")  # the session is known now
        await web.client.post("/logout", data={"csrf_token": csrf_of(page.text)})
        async with httpx.AsyncClient(base_url=web.service.url, cookies={SESSION_COOKIE: cookie}) as kept:
            assert (await kept.get("/")).status_code == 303


async def test_a_session_used_a_moment_before_it_expires_is_refused_once_it_expired(stores):
    clock = FakeClock()
    async with served(stores, clock) as web:
        await sign_in(web.client, await web.new_code())
        clock.advance(SESSION_SECONDS - 1)
        assert (await web.client.get("/")).status_code == 200
        clock.advance(2)
        assert (await web.client.get("/")).status_code == 303


async def test_the_login_page_sends_the_code_by_post_and_clears_it_from_the_address_bar():
    # The link carries the code after `#` (never sent to a server); the script takes it from there.
    assert "window.location.hash" in LOGIN_SCRIPT and "history.replaceState" in LOGIN_SCRIPT
    assert LOGIN_SCRIPT.index("replaceState") < LOGIN_SCRIPT.index("fetch(")
    assert 'method: "POST"' in LOGIN_SCRIPT and "X-CSRF-Token" in LOGIN_SCRIPT


async def test_no_code_session_cookie_or_login_secret_reaches_a_log_line_or_a_page(stores, caplog):
    caplog.set_level(logging.DEBUG)
    async with served(stores, FakeClock()) as web:
        code = await web.new_code()
        pages = [(await web.client.get("/login")).text]
        await web.client.get(f"/login?code={code}")  # a link mangled into a query string
        assert (await sign_in(web.client, code)).status_code == 200
        pages.append((await web.client.get("/")).text)
        pages.append((await web.client.get("/login")).text)
        secrets = [code, web.client.cookies[SESSION_COOKIE]]
    # Every line of the server side, at DEBUG and before any floor (httpx and httpcore log this test's client).
    server_side = [r for r in caplog.records if r.name.split(".")[0] not in ("httpx", "httpcore")]
    logged = "\n".join(f"{r.getMessage()} {r.args!r} {r.exc_text or ''}" for r in server_side)
    for secret in secrets:
        assert secret not in logged
        assert all(secret not in page for page in pages)
    assert "GET /login 200" in logged  # the access log did record the requests


async def test_the_access_log_never_records_a_query_string(stores, caplog):
    caplog.set_level(logging.INFO, logger="adapters.web.access")
    async with served(stores, FakeClock()) as web:
        await web.client.get("/livez?token=QUERY-CANARY")
    lines = [r.getMessage() for r in caplog.records if r.name == "adapters.web.access"]
    assert any(line.startswith("GET /livez 200") for line in lines)
    assert "QUERY-CANARY" not in caplog.text and "?" not in "".join(lines)


@pytest.mark.parametrize("body", [b"not json", b'{"code": 42}', b'{"code": ""}', b"[]"])
async def test_a_malformed_sign_in_is_a_wrong_code_and_changes_nothing(stores, body):
    async with served(stores, FakeClock()) as web:
        code = await web.new_code()
        token = await login_csrf(web.client)
        answer = await web.client.post(
            "/login", content=body, headers={"X-CSRF-Token": token, "Content-Type": "application/json"}
        )
        assert answer.status_code == 401
        with sqlite3.connect(engines.sqlite_file(stores)) as db:
            assert db.execute("SELECT count(*) FROM web_login_codes").fetchone() == (1,)
        assert (await sign_in(web.client, code)).status_code == 200
