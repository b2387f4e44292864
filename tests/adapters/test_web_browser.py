"""The browser harness itself: a real Chromium (tests/helpers/browser.py) opens a page a loopback
aiohttp server serves, and a click on it reaches the server over a real link."""

from __future__ import annotations

import pytest
from aiohttp import web

from tests.helpers import browser
from tests.helpers.browser import chromium  # noqa: F401 - the fixture
from tests.helpers.serving import LoopbackServer

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>harness</title></head>
<body>
<button id="go">Say hello</button>
<p id="answer"></p>
<script>
document.getElementById("go").addEventListener("click", async () => {
  const response = await fetch("/clicked", {method: "POST", body: "hello"});
  document.getElementById("answer").textContent = await response.text();
});
</script>
</body></html>
"""


class ClickServer(LoopbackServer):
    """One page with one button; every POST to /clicked is recorded."""

    def __init__(self) -> None:
        self.clicks: list[str] = []
        self.base_url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/", self._page)
        app.router.add_post("/clicked", self._clicked)
        await self._bind(app)
        self.base_url = f"http://127.0.0.1:{self.port}"

    async def aclose(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def _clicked(self, request: web.Request) -> web.Response:
        self.clicks.append(await request.text())
        return web.Response(text=f"click {len(self.clicks)} arrived")


async def test_a_real_chromium_opens_a_loopback_page_and_its_click_reaches_the_server(chromium):  # noqa: F811
    async with ClickServer() as server:
        page = await chromium.new_page()
        await page.goto(server.base_url + "/")
        await page.click("#go")
        await page.wait_for_function("document.getElementById('answer').textContent !== ''", timeout=10_000)
        assert await page.text_content("#answer") == "click 1 arrived"
        assert server.clicks == ["hello"]


def test_without_chromium_the_browser_tests_skip_saying_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "no-chromium-here")
    with pytest.raises(pytest.skip.Exception, match=r"apt-get install -y chromium"):
        browser.require_chromium()
