"""The checks every request passes: Host, Origin, CSRF, the stop; no CORS; one line when it cannot listen."""

from __future__ import annotations

import httpx
import pytest
from aiohttp import web

from adapters.web.auth import SESSION_COOKIE
from adapters.web.hosts import AllowedHosts
from adapters.web.service import WebStartError
from tests.helpers import engines
from tests.helpers.fakes import FakeClock
from tests.helpers.web import csrf_of, served, sign_in


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8765", "127.0.0.2", "localhost.evil.example", ""])
async def test_a_request_naming_another_host_is_refused_as_a_dns_rebinding_page_would_send_it(stores, host):
    async with served(stores, FakeClock()) as web:
        for path in ("/livez", "/login", "/metrics"):
            answer = await web.client.get(path, headers={"Host": host})
            assert answer.status_code == 400, path
        code = await web.new_code()
        refused = await web.client.post("/login", json={"code": code}, headers={"Host": host})
        assert refused.status_code == 400
        assert await engines.rows(stores, "SELECT id FROM web_sessions") == []


async def test_the_default_hosts_are_the_bound_one_and_localhost_and_a_listed_port_must_match(stores):
    async with served(stores, FakeClock()) as web:
        assert (await web.client.get("/livez", headers={"Host": "localhost"})).status_code == 200
        assert (await web.client.get("/livez", headers={"Host": "LOCALHOST:1234"})).status_code == 200
    allowed = AllowedHosts.parse(["companion.example.com:443"])
    async with served(stores, FakeClock(), allowed=allowed) as web:
        assert (await web.client.get("/livez", headers={"Host": "companion.example.com:443"})).status_code == 200
        assert (await web.client.get("/livez", headers={"Host": "companion.example.com:80"})).status_code == 400
        assert (await web.client.get("/livez")).status_code == 400  # 127.0.0.1 is not listed


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1.evil.example", "file://"])
async def test_a_request_from_another_origin_is_refused_and_changes_nothing(stores, origin):
    async with served(stores, FakeClock()) as web:
        await sign_in(web.client, await web.new_code())
        page = await web.client.get("/")
        token = csrf_of(page.text)
        assert (await web.client.get("/", headers={"Origin": origin})).status_code == 403
        out = await web.client.post("/logout", data={"csrf_token": token}, headers={"Origin": origin})
        assert out.status_code == 403
        assert len(await engines.rows(stores, "SELECT id FROM web_sessions")) == 1  # still signed in
        same = await web.client.post("/logout", data={"csrf_token": token}, headers={"Origin": web.service.url})
        assert same.status_code == 303


async def test_a_page_on_another_port_or_scheme_of_the_same_host_is_another_origin_and_refused_before_the_csrf_check(
    stores,
):
    async with served(stores, FakeClock()) as web:
        await sign_in(web.client, await web.new_code())
        token = csrf_of((await web.client.get("/")).text)
        port = httpx.URL(web.service.url).port
        assert port is not None
        for origin in (
            f"http://127.0.0.1:{port + 1}",  # another server on this machine: a page there is not ours
            "http://127.0.0.1",  # port 80
            f"https://127.0.0.1:{port + 1}",
            f"http://localhost:{port}",  # another name than the Host this request came with
        ):
            # The page's own CSRF token does not help it: the Origin is refused first.
            out = await web.client.post("/logout", data={"csrf_token": token}, headers={"Origin": origin})
            assert out.status_code == 403, origin
            assert "other origins" in out.text
        assert len(await engines.rows(stores, "SELECT id FROM web_sessions")) == 1  # still signed in
        ours = await web.client.post(
            "/logout", data={"csrf_token": token}, headers={"Origin": f"http://127.0.0.1:{port}"}
        )
        assert ours.status_code == 303


def test_an_origin_matches_its_hosts_name_and_port_with_the_schemes_default_port_on_both_sides():
    allowed = AllowedHosts.parse(["companion.example.com", "127.0.0.1"])
    assert allowed.allows_origin("https://companion.example.com", "companion.example.com")
    assert allowed.allows_origin("https://companion.example.com:443", "companion.example.com")
    assert allowed.allows_origin("http://companion.example.com", "companion.example.com:80")
    assert not allowed.allows_origin("http://companion.example.com", "companion.example.com:443")
    assert not allowed.allows_origin("https://companion.example.com:8443", "companion.example.com")
    assert allowed.allows_origin("http://127.0.0.1:8765", "127.0.0.1:8765")
    assert not allowed.allows_origin("http://127.0.0.1:8766", "127.0.0.1:8765")
    assert not allowed.allows_origin("http://127.0.0.1:8765", "evil.example:8765")  # an unlisted Host
    assert not allowed.allows_origin("http://127.0.0.1:8765", None)


async def test_a_state_changing_request_without_its_sessions_csrf_token_is_refused_and_changes_nothing(stores):
    async with served(stores, FakeClock()) as web:
        await sign_in(web.client, await web.new_code())
        token = csrf_of((await web.client.get("/")).text)
        for headers, data in (({}, None), ({"X-CSRF-Token": "wrong"}, None), ({}, {"csrf_token": token[:-1]})):
            answer = await web.client.post("/logout", headers=headers, data=data)
            assert answer.status_code == 403
        assert len(await engines.rows(stores, "SELECT id FROM web_sessions")) == 1
        # Another browser's session token is not this one's.
        other = httpx.AsyncClient(base_url=web.service.url)
        async with other:
            await sign_in(other, await web.new_code())
            other_token = csrf_of((await other.get("/")).text)
        assert (await web.client.post("/logout", headers={"X-CSRF-Token": other_token})).status_code == 403
        assert (await web.client.post("/logout", headers={"X-CSRF-Token": token})).status_code == 303


async def test_signing_in_needs_the_login_pages_csrf_token(stores):
    async with served(stores, FakeClock()) as web:
        code = await web.new_code()
        assert (await web.client.post("/login", json={"code": code})).status_code == 403
        await web.client.get("/login")  # the login cookie, but no token sent
        assert (await web.client.post("/login", json={"code": code})).status_code == 403
        assert SESSION_COOKIE not in web.client.cookies
        assert (await sign_in(web.client, code)).status_code == 200  # the code was not used up


async def test_no_cors_header_is_ever_sent(stores):
    async with served(stores, FakeClock()) as web:
        preflight = await web.client.request(
            "OPTIONS",
            "/login",
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        )
        same_origin = await web.client.get("/livez", headers={"Origin": web.service.url})
        for answer in (preflight, same_origin, await web.client.get("/readyz"), await web.client.get("/metrics")):
            assert not [name for name in answer.headers if name.lower().startswith("access-control-")]
        assert preflight.status_code in (403, 405)


async def test_a_cors_header_a_handler_sets_is_never_sent(stores):
    async def generous(request: web.Request) -> web.Response:
        return web.Response(text="ok", headers={"Access-Control-Allow-Origin": "*"})

    def install(app: web.Application) -> None:
        app.router.add_get("/generous", generous)

    async with served(stores, FakeClock(), routes=[install]) as web_:
        answer = await web_.client.get("/generous")
    assert answer.status_code == 200 and "access-control-allow-origin" not in answer.headers


async def test_every_answer_keeps_to_its_origin_and_names_no_library(stores):
    async with served(stores, FakeClock()) as web:
        for path in ("/login", "/livez", "/nowhere"):
            answer = await web.client.get(path)
            assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
            assert answer.headers["referrer-policy"] == "no-referrer"
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["server"] == "companion"


async def test_once_the_stop_began_a_state_changing_request_is_refused(stores):
    async with served(stores, FakeClock()) as web:
        await sign_in(web.client, await web.new_code())
        token = csrf_of((await web.client.get("/")).text)
        await web.service.stop_intake()
        answer = await web.client.post("/logout", headers={"X-CSRF-Token": token})
        assert answer.status_code == 503
        assert (await web.client.get("/")).status_code == 200  # pages still answer until the close
        assert len(await engines.rows(stores, "SELECT id FROM web_sessions")) == 1


async def test_a_port_in_use_stops_start_up_with_one_line_naming_the_setting(stores):
    async with served(stores, FakeClock()) as web:
        taken = web.service
        from adapters.web.service import WebService

        second = WebService("127.0.0.1", taken.port, taken.allowed, taken.auth)
        with pytest.raises(WebStartError) as info:
            await second.start()
        line = str(info.value)
        assert line.startswith("COMPANION_HTTP_PORT: cannot listen on http://127.0.0.1:") and "\n" not in line
        await second.aclose()  # safe after a failed start, and twice
        await second.aclose()
