"""`companion doctor`'s platform probes: is a Telegram or Discord token accepted, with what it needs.

Plain httpx calls (python-telegram-bot and discord.py are not loaded for a check). A token goes
into a URL or a header and nowhere else: no `Finding` holds it, nor a URL that carries it, nor an
httpx error's words (which may quote the URL); only the error's type name.
"""

from __future__ import annotations

import dataclasses
import re

import httpx

from adapters.tls import shared_ssl_context

TELEGRAM_API = "https://api.telegram.org/bot"
DISCORD_API = "https://discord.com/api/v10"
# Application flags (https://discord.com/developers/docs/resources/application#application-object-application-flags):
# the Message Content intent is on when either is set (the second for bots in fewer than 100 servers).
GATEWAY_MESSAGE_CONTENT = 1 << 18
GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 19
_NAME = re.compile(r"^[\w.-]{1,64}$")  # a bot's username as the doctor may show it


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    """One probe's result. `kind` names what happened for bot/doctor.py ("ok", "unreachable",
    "token-refused", ...); `seen` says it in our words (never a model's, never a secret); `value`
    is a number found (a context window), `seconds` how long it took."""

    ok: bool
    kind: str
    seen: str = ""
    value: int | None = None
    seconds: float | None = None


def _client(timeout: float, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout), transport=transport, verify=shared_ssl_context())


def _host(url: str) -> str:
    return httpx.URL(url).host or url


async def telegram_get_me(
    token: str, base_url: str | None = None, *, seconds: float = 15.0, transport: httpx.AsyncBaseTransport | None = None
) -> Finding:
    """getMe with the token: accepted, refused, or not reached."""
    base = base_url or TELEGRAM_API
    async with _client(seconds, transport) as http:
        try:
            response = await http.get(f"{base}{token}/getMe")
        except httpx.HTTPError as exc:
            return Finding(False, "unreachable", f"could not reach {_host(base)} ({type(exc).__name__})")
    if response.status_code in (401, 404):  # Telegram answers 404 to a token of no bot
        return Finding(False, "token-refused", f"Telegram refused the token ({response.status_code})")
    if response.status_code != 200:
        return Finding(False, "error", f"getMe answered {response.status_code}")
    try:
        result = response.json().get("result") or {}
    except (ValueError, AttributeError):
        return Finding(False, "error", "getMe answered something that is not the Bot API's JSON")
    username = result.get("username") if isinstance(result, dict) else None
    shown = f"@{username}" if isinstance(username, str) and _NAME.match(username) else "the bot"
    return Finding(True, "ok", f"{shown} answers getMe")


@dataclasses.dataclass(frozen=True, slots=True)
class WebhookInfo:
    """What getWebhookInfo says: the URL Telegram delivers to ("" when none is set), the updates it holds,
    and its last delivery error (a status in Telegram's words; it holds no one's text), if any."""

    url: str
    pending: int | None
    last_error: str | None


async def telegram_webhook_info(
    token: str, base_url: str | None = None, *, seconds: float = 15.0, transport: httpx.AsyncBaseTransport | None = None
) -> WebhookInfo | Finding:
    """getWebhookInfo with the token; a Finding (not ok) when it cannot be asked."""
    base = base_url or TELEGRAM_API
    async with _client(seconds, transport) as http:
        try:
            response = await http.get(f"{base}{token}/getWebhookInfo")
            result = response.json().get("result") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            return Finding(False, "unreachable", f"getWebhookInfo failed ({type(exc).__name__})")
    if not isinstance(result, dict):
        return Finding(False, "error", f"getWebhookInfo answered {response.status_code}")
    url = result.get("url")
    pending = result.get("pending_update_count")
    error = result.get("last_error_message")
    return WebhookInfo(
        url if isinstance(url, str) else "",
        pending if isinstance(pending, int) and not isinstance(pending, bool) else None,
        error[:200] if isinstance(error, str) and error else None,
    )


async def discord_me(
    token: str, api_base: str | None = None, *, seconds: float = 15.0, transport: httpx.AsyncBaseTransport | None = None
) -> tuple[Finding, Finding | None]:
    """users/@me with the token, then whether the application has the Message Content intent on
    (None when the token was not accepted, so there is nothing to ask)."""
    base = (api_base or DISCORD_API).rstrip("/")
    headers = {"Authorization": f"Bot {token}"}
    async with _client(seconds, transport) as http:
        try:
            me = await http.get(f"{base}/users/@me", headers=headers)
        except httpx.HTTPError as exc:
            return Finding(False, "unreachable", f"could not reach {_host(base)} ({type(exc).__name__})"), None
        if me.status_code == 401:
            return Finding(False, "token-refused", "Discord refused the token (401)"), None
        if me.status_code != 200:
            return Finding(False, "error", f"users/@me answered {me.status_code}"), None
        try:
            username = me.json().get("username")
        except (ValueError, AttributeError):
            username = None
        shown = username if isinstance(username, str) and _NAME.match(username) else "the bot"
        token_ok = Finding(True, "ok", f"{shown} answers users/@me")
        try:
            app = await http.get(f"{base}/oauth2/applications/@me", headers=headers)
            flags = app.json().get("flags") if app.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            flags = None
    if not isinstance(flags, int):
        return token_ok, Finding(False, "unknown", "the application's intents could not be read")
    if flags & (GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED):
        return token_ok, Finding(True, "ok", "the Message Content intent is on")
    return token_ok, Finding(False, "intent-off", "the Message Content intent is off")
