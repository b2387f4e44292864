"""One builder per platform: a real adapter pointed at its fake server, with the tests' quick timings.

`link` is what the gateway gives an adapter: `bot.bootstrap.core_link(companion)`, or a
`CoreLink(handler, ...)` around a handler a test writes itself. Any option overrides the defaults
(`token=` a wrong token, `gateway_url=None` to have it asked from the API base).
"""

from __future__ import annotations

from typing import Any

from adapters.discord import DiscordAdapter
from adapters.telegram import TelegramAdapter
from core.turn.link import CoreLink
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_telegram import FakeTelegramServer

TELEGRAM_TIMINGS: dict[str, Any] = {"poll_timeout": 2.0, "repoll_interval": 0.05}
DISCORD_TIMINGS: dict[str, Any] = {"guild_ready_timeout": 0.05, "retry_delays": (0.01, 0.01), "ready_timeout": 10.0}


def telegram_adapter(
    server: FakeTelegramServer, link: CoreLink, *, token: str | None = None, **options: Any
) -> TelegramAdapter:
    """A TelegramAdapter on `server` (not started)."""
    options = {"base_url": server.base_url, **TELEGRAM_TIMINGS, **options}
    return TelegramAdapter(server.token if token is None else token, link, **options)


def discord_adapter(
    server: FakeDiscordServer, link: CoreLink, *, token: str | None = None, **options: Any
) -> DiscordAdapter:
    """A DiscordAdapter on `server` (not started)."""
    options = {"api_base": server.api_base, "gateway_url": server.gateway_url, **DISCORD_TIMINGS, **options}
    return DiscordAdapter(server.token if token is None else token, link, **options)
