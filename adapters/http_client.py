"""httpx's client for the links that send one request after another to the same server (the Bot API, the model
server): the same requests, with less of the loop's CPU spent on each.

`httpx.AsyncClient.send` passes every request through its authentication flow, its redirect handling, a timer
for `Response.elapsed`, a wrapper around the answer's stream and the cookie jar: on this machine about 0.1 ms
of CPU a request, with the cookie jar half of it (docs/benchmarks.md). `LeanClient.send` hands a request that
needs none of them straight to the transport httpx would have chosen, which is what httpx's own path does
once all of them have nothing to do: a request is sent byte for byte as the base class sends it
(tests/adapters/test_http_client.py compares them on the wire). Whatever needs one of them goes the base
class's way whole: a client or a request with authentication (credentials in the URL too), event hooks,
following redirects. The cookie jar is read into only from an answer that sets a cookie; httpx's log line of
each request is written as httpx writes it, when its logger is on.

The private parts of httpx used here (`_transport_for_url`, `_state`, `_auth`, `_default_encoding` and
`httpx._exceptions.request_context`, as of httpx 0.28) are each checked by a test; an upgrade of httpx runs
those tests first.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from httpx._client import ClientState, UseClientDefault
from httpx._exceptions import request_context

# httpx's own logger: its line of each request, when an operator turned it on (bot/logs.py keeps it at WARNING, and
# adapters/telegram/connection.py's guard redacts the token on it), is written as httpx writes it.
_HTTPX_LOG = logging.getLogger("httpx")
# How many URLs a client keeps parsed: the methods it calls, and the files it fetched last.
URLS_KEPT = 64


class LeanClient(httpx.AsyncClient):
    """An `httpx.AsyncClient` whose requests skip what they do not use (see the module), and which parses each
    URL given as a string once (the Bot API's method URLs, ~12 µs a request)."""

    def __init__(self, **kwargs: Any) -> None:
        self._urls: dict[str, httpx.URL] = {}
        super().__init__(**kwargs)

    def _merge_url(self, url: httpx.URL | str) -> httpx.URL:
        if not isinstance(url, str):
            return super()._merge_url(url)
        merged = self._urls.get(url)
        if merged is None:
            if len(self._urls) >= URLS_KEPT:  # a file's URL is fetched once: those do not pile up
                self._urls.clear()
            merged = self._urls[url] = super()._merge_url(url)
        return merged

    def plain(self, request: httpx.Request, auth: Any, follow_redirects: Any) -> bool:
        """Whether `request`, sent with `auth` and `follow_redirects` as `send` got them, needs nothing of
        httpx's path but the transport: no authentication, no hooks, no redirect to follow, a client open."""
        return (
            self._state is ClientState.OPENED
            and self._auth is None
            and (auth is None or isinstance(auth, UseClientDefault))
            and not (self.follow_redirects if isinstance(follow_redirects, UseClientDefault) else follow_redirects)
            and not (request.url.username or request.url.password)
            and not self.event_hooks["request"]
            and not self.event_hooks["response"]
        )

    async def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = httpx.USE_CLIENT_DEFAULT,
        follow_redirects: Any = httpx.USE_CLIENT_DEFAULT,
    ) -> httpx.Response:
        """`httpx.AsyncClient.send`, through the transport alone when the request is `plain`."""
        if not self.plain(request, auth, follow_redirects):
            return await super().send(request, stream=stream, auth=auth, follow_redirects=follow_redirects)
        self._set_timeout(request)
        with request_context(request=request):
            response = await self._transport_for_url(request.url).handle_async_request(request)
        response.request = request
        response.default_encoding = self._default_encoding
        if "set-cookie" in response.headers:
            self.cookies.extract_cookies(response)
        if _HTTPX_LOG.isEnabledFor(logging.INFO):
            _HTTPX_LOG.info(
                'HTTP Request: %s %s "%s %d %s"',
                request.method,
                request.url,
                response.http_version,
                response.status_code,
                response.reason_phrase,
            )
        if not stream:
            try:
                await response.aread()
            except BaseException:
                await response.aclose()
                raise
        return response
