"""POST of a webhook (Telegram's): its secret header checked in constant time, its body bounded, and the update
stored durably (on the core's loop) before the 200; anything else refused with nothing stored.

Telegram sends the secret given to setWebhook in `X-Telegram-Bot-Api-Secret-Token` with every delivery, and
delivers again after any answer but a 2xx (or none within its timeout): so a 200 goes out only once the
update is committed, and a failure to store answers 503 (Telegram tries again). A refused request is
counted, never logged with anything of it (the access log names method, path and status alone).
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from adapters.web.auth import by_secret
from adapters.web.bridge import BRIDGE

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"  # noqa: S105 - a header name
MAX_BODY_BYTES = 256 * 1024  # an update with the longest message and its entities is far below this

# Runs on the core's loop: stores the update (its id, its JSON) durably, or raises.
Sink = Callable[[int, str], Awaitable[object]]


class WebhookRoute:
    """One webhook's route, installed on the HTTP service (an installer, as the operator endpoints).

    Args:
        path: where it is served (the path of COMPANION_TELEGRAM_WEBHOOK_URL).
        secret: the secret token (COMPANION_TELEGRAM_WEBHOOK_SECRET).
        sink: stores an update durably; called through the bridge on the core's loop.
        refused: counts a request refused for its secret (a metric).
    """

    def __init__(
        self,
        path: str,
        secret: str,
        sink: Sink,
        *,
        refused: Callable[[], None] = lambda: None,
        max_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.path = path
        self._secret = secret.encode("utf-8")
        self._sink = sink
        self._refused = refused
        self._max_bytes = max_bytes

    def install(self, app: web.Application) -> None:
        async def deliver(request: web.Request) -> web.StreamResponse:
            return await self._deliver(request)

        app.router.add_post(self.path, by_secret(deliver))

    async def _deliver(self, request: web.Request) -> web.StreamResponse:
        given = request.headers.get(SECRET_HEADER)
        if given is None:
            self._refused()
            return web.Response(status=401)
        if not hmac.compare_digest(given.encode("utf-8", "replace"), self._secret):
            self._refused()
            return web.Response(status=403)
        body = await _bounded(request, self._max_bytes)
        if body is None:
            return web.Response(status=413)
        update_id = _update_id(body)
        if update_id is None:
            # Not an update: Telegram never sends one, so a retry could not help.
            log.warning("webhook: a delivery of %d bytes is not an update; refused", len(body))
            return web.Response(status=400)
        try:
            await request.app[BRIDGE].call(self._sink, update_id, body.decode("utf-8"))
        except Exception as exc:  # noqa: BLE001 - any failure: not stored, so Telegram must deliver it again
            log.warning(
                "webhook: update %s could not be stored (%s); Telegram delivers it again", update_id, type(exc).__name__
            )
            return web.Response(status=503)
        return web.Response(status=200)


async def _bounded(request: web.Request, limit: int) -> bytes | None:
    """The body, or None once it is longer than `limit` (read no further)."""
    if request.content_length is not None and request.content_length > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _update_id(body: bytes) -> int | None:
    try:
        parsed = json.loads(body.decode("utf-8"))
    except ValueError:
        return None
    update_id = parsed.get("update_id") if isinstance(parsed, dict) else None
    if isinstance(update_id, bool) or not isinstance(update_id, int) or update_id < 0:
        return None
    return update_id
