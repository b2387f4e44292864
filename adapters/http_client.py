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

Below httpx, httpcore reads and writes its connections through anyio: every read and every write in a cancel
scope of its own and a turn of the loop besides, another 0.15-0.2 ms of CPU a request. A `LeanClient`'s
connection pools read and write through `AsyncioBackend` instead: asyncio's own transports and a protocol
that keeps what arrived until httpcore reads it, timeouts as timer handles, TLS by `loop.start_tls`, every
failure raised as the httpcore error anyio's backend raises for it (tests/adapters/test_http_client.py runs
both over plain TCP, TLS and a Unix socket, through resets, early closes, timeouts and a body larger than the
buffers).

The private parts of httpx and httpcore used here (`_transport_for_url`, `_state`, `_auth`,
`_default_encoding`, `httpx._exceptions.request_context`, `AsyncHTTPTransport._pool` and a pool's
`_network_backend`, as of httpx 0.28 and httpcore 1.0) are each checked by a test; an upgrade of either
runs those tests first.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal

import httpcore
import httpx
from httpcore._utils import is_socket_readable
from httpx._client import ClientState, UseClientDefault
from httpx._exceptions import request_context

# httpx's own logger: its line of each request, when an operator turned it on (bot/logs.py keeps it at WARNING, and
# adapters/telegram/connection.py's guard redacts the token on it), is written as httpx writes it.
_HTTPX_LOG = logging.getLogger("httpx")
# How many URLs a client keeps parsed: the methods it calls, and the files it fetched last.
URLS_KEPT = 64
# A connection's bytes kept unread: past the high mark the socket is not read from until httpcore took all
# but the low mark (a download larger than the buffers waits in the kernel, as with anyio's backend).
READ_HIGH = 256 * 1024
READ_LOW = 64 * 1024


class LeanClient(httpx.AsyncClient):
    """An `httpx.AsyncClient` whose requests skip what they do not use (see the module), and which parses each
    URL given as a string once (the Bot API's method URLs, ~12 µs a request)."""

    def __init__(self, **kwargs: Any) -> None:
        self._urls: dict[str, httpx.URL] = {}
        super().__init__(**kwargs)
        backend = AsyncioBackend()
        for transport in (self._transport, *self._mounts.values()):
            pool = getattr(transport, "_pool", None)  # httpx.AsyncHTTPTransport's; a proxy's pool is one too
            if (
                isinstance(transport, httpx.AsyncHTTPTransport)
                and pool is not None
                and hasattr(pool, "_network_backend")
            ):
                pool._network_backend = backend

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


# --- httpcore's connections on asyncio's transports --------------------------------------------------------


class _Connection(asyncio.Protocol):
    """One connection's protocol: what arrived, kept for `AsyncioStream.read`; how it ended; whether writing
    waits for the peer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.ended = False  # the peer closed it, or it was lost
        self.lost: Exception | None = None  # how it was lost, when not closed cleanly
        self.reading: asyncio.Future[None] | None = None  # a read waiting for bytes
        self.writable: asyncio.Future[None] | None = None  # a write waiting for the peer to take bytes
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.buffered += len(data)
        if self.buffered > READ_HIGH and self.transport is not None:
            self.transport.pause_reading()
        _wake(self.reading)

    def eof_received(self) -> bool:
        self.ended = True
        _wake(self.reading)
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.lost = exc
        _wake(self.reading)
        _wake(self.writable)

    async def wait(self, until: Literal["reading", "writable"], seconds: float | None) -> None:
        """Until this protocol wakes `until` (bytes arrived, the peer took bytes, or the connection ended), at most
        `seconds` (None: for ever); TimeoutError once they passed. A timer handle, not asyncio.timeout: no task to
        cancel and uncancel on every read."""
        waiter = asyncio.get_running_loop().create_future()
        setattr(self, until, waiter)
        timer = None if seconds is None else asyncio.get_running_loop().call_later(seconds, _expire, waiter)
        try:
            await waiter
        finally:
            setattr(self, until, None)
            if timer is not None:
                timer.cancel()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        _wake(self.writable)


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class AsyncioStream(httpcore.AsyncNetworkStream):
    """A connection as httpcore reads and writes it, on an asyncio transport."""

    def __init__(self, transport: asyncio.Transport, connection: _Connection) -> None:
        self._transport = transport
        self._connection = connection

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109 - httpcore's
        connection = self._connection
        if not connection.chunks:
            if not connection.ended:
                try:
                    await connection.wait("reading", timeout)
                except TimeoutError as exc:
                    raise httpcore.ReadTimeout("timed out reading the answer") from exc
            if not connection.chunks:
                if connection.lost is not None:
                    raise httpcore.ReadError(str(connection.lost) or type(connection.lost).__name__)
                return b""  # the peer closed it: httpcore reads this as the end
        data = connection.chunks.popleft()
        if len(data) > max_bytes:
            connection.chunks.appendleft(data[max_bytes:])
            data = data[:max_bytes]
        connection.buffered -= len(data)
        if connection.buffered <= READ_LOW and not connection.ended:
            self._transport.resume_reading()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109 - httpcore's
        if not buffer:
            return
        connection = self._connection
        if connection.ended or self._transport.is_closing():
            raise httpcore.WriteError(str(connection.lost) if connection.lost else "the connection is closed")
        self._transport.write(buffer)
        while connection.paused and not connection.ended:
            try:
                await connection.wait("writable", timeout)
            except TimeoutError as exc:
                raise httpcore.WriteTimeout("timed out writing the request") from exc
        if connection.lost is not None:
            raise httpcore.WriteError(str(connection.lost) or type(connection.lost).__name__)

    async def aclose(self) -> None:
        self._connection.ended = True  # at once: the pool asks `is_readable` before the transport has closed
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport = await loop.start_tls(
                    self._transport, self._connection, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError as exc:
            self._transport.close()
            raise httpcore.ConnectTimeout("timed out in the TLS handshake") from exc
        except (OSError, ssl.SSLError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(str(exc)) from exc
        if transport is None:  # the connection closed during the handshake
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        self._connection.transport = transport  # what it pauses and resumes from now on: the TLS transport
        return AsyncioStream(transport, self._connection)

    def get_extra_info(self, info: str) -> Any:
        transport = self._transport
        if info == "ssl_object":
            return transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return transport.get_extra_info("sockname")
        if info == "server_addr":
            return transport.get_extra_info("peername")
        if info == "socket":
            return transport.get_extra_info("socket")
        if info == "is_readable":  # an idle connection the peer closed, or wrote on: httpcore drops it
            connection = self._connection
            return bool(connection.chunks) or connection.ended or is_socket_readable(transport.get_extra_info("socket"))
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend on asyncio's transports (see the module)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        def opening(connection: _Connection) -> Awaitable[tuple[asyncio.BaseTransport, Any]]:
            return asyncio.get_running_loop().create_connection(
                lambda: connection,
                host,
                port,
                local_addr=(local_address, 0) if local_address else None,
                happy_eyeballs_delay=0.25,  # as anyio's connect_tcp: the next address after 250 ms
            )

        return await _connected(opening, timeout, f"port {port}", socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        def opening(connection: _Connection) -> Awaitable[tuple[asyncio.BaseTransport, Any]]:
            return asyncio.get_running_loop().create_unix_connection(lambda: connection, path)

        return await _connected(opening, timeout, "a Unix socket", socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _connected(
    opening: Callable[[_Connection], Awaitable[tuple[asyncio.BaseTransport, Any]]],
    seconds: float | None,
    what: str,
    options: Iterable[Any] | None,
) -> AsyncioStream:
    """A new connection opened by `opening` within `seconds`, its socket options set; the errors anyio's backend
    raises when it cannot (ConnectTimeout, ConnectError)."""
    connection = _Connection()
    try:
        async with asyncio.timeout(seconds):
            transport, _ = await opening(connection)
    except TimeoutError as exc:
        raise httpcore.ConnectTimeout(f"timed out connecting to {what}") from exc
    except OSError as exc:
        raise httpcore.ConnectError(str(exc)) from exc
    sock = transport.get_extra_info("socket")
    for option in options or ():
        sock.setsockopt(*option)
    return AsyncioStream(transport, connection)  # type: ignore[arg-type]
