"""A real browser for the web tests: Playwright for Python driving Debian's Chromium, headless.

Playwright's own browser download cannot work here (nothing downloads at run time), so the tests
drive `/usr/bin/chromium` from Debian's packages (`apt-get install -y chromium`; `.ci/run`
installs it where apt-get can). Each test gets a fresh user-data folder, and the switches below
keep Chromium from reaching anything but the loopback servers the tests start: no QUIC, no
background, component-update or sync traffic. Without Chromium or Playwright the test skips,
saying how to install what is missing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
MISSING_CHROMIUM = (
    f"Chromium is not installed at {CHROMIUM}: install Debian's package with "
    "`apt-get update && apt-get install -y chromium` (.ci/run does this where apt-get can)"
)
MISSING_PLAYWRIGHT = "Playwright is not installed: `.venv/bin/pip install -e '.[test]'`"


def require_chromium() -> None:
    """Skip the calling test, saying how to install what is missing, unless both are here."""
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        pytest.skip(MISSING_PLAYWRIGHT)
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(MISSING_CHROMIUM)


@pytest.fixture
async def chromium(tmp_path: Path) -> AsyncIterator[Any]:
    """A Playwright browser context of a headless Chromium with a fresh user-data folder; closed
    after the test (it is `playwright.async_api.BrowserContext`, typed loosely so that this module
    imports without Playwright)."""
    require_chromium()
    from playwright.async_api import async_playwright

    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    async with async_playwright() as playwright:
        # headless=False: the switch `--headless=new` above says it; Playwright would add its own.
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            args=list(CHROMIUM_ARGS),
            headless=False,
            # Nothing from the tests' pages may be looked up or fetched past the loopback servers.
            service_workers="block",
        )
        try:
            yield context
        finally:
            await context.close()


@contextlib.contextmanager
def chromium_browser(*extra_args: str) -> Iterator[Any]:
    """A headless Chromium through Playwright's sync API, for a whole module of browser tests (each
    test opens contexts of its own: `browser.new_context()`); skips as `require_chromium` does.
    `extra_args`: more switches (such as `--host-resolver-rules`, to point a name at 127.0.0.1)."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=[*CHROMIUM_ARGS, *extra_args], headless=False
        )
        try:
            yield browser
        finally:
            browser.close()
