"""adapters/http_client.py: `LeanClient` sends what `httpx.AsyncClient` sends, byte for byte, answers as it
answers, and leaves to httpx's own path every request that needs more than the transport.

The server here is a raw HTTP/1.1 server on 127.0.0.1 that records each request's bytes as they arrived
and answers from a script, so the two clients are compared on the wire, not through httpx's objects."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import httpx
import pytest

from adapters.http_client import LeanClient

Answer = Callable[[bytes], bytes]  # a request's bytes -> the response's bytes; b"" never answers


def _ok(body: bytes = b'{"ok":true,"result":[]}', *extra: str) -> bytes:
    head = "".join(f"{line}\r\n" for line in ("HTTP/1.1 200 OK", "Content-Type: application/json", *extra))
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def _chunked(*pieces: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


@dataclass
class _RawServer:
    answer: Answer
    requests: list[bytes] = field(default_factory=list)
    url: str = ""
    # Every connection's writer and handler, closed and ended when the server is (none left to the collector).
    connections: list[tuple[asyncio.StreamWriter, asyncio.Task[None] | None]] = field(default_factory=list)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.append((writer, asyncio.current_task()))  # type: ignore[arg-type]
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                raw = head + await reader.readexactly(length)
                self.requests.append(raw)
                answer = self.answer(raw)
                if not answer:
                    await asyncio.sleep(3600)
                writer.write(answer)
                await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def _raw_server(answer: Answer) -> AsyncIterator[_RawServer]:
    server = _RawServer(answer)
    listening = await asyncio.start_server(server._serve, "127.0.0.1", 0)
    server.url = f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}"
    try:
        yield server
    finally:
        listening.close()
        for writer, handler in server.connections:
            writer.close()
            if handler is not None:
                handler.cancel()
        await asyncio.gather(*(h for _, h in server.connections if h is not None), return_exceptions=True)
        for writer, _ in server.connections:
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(listening.wait_closed(), 1)


def _kwargs() -> dict[str, object]:
    # As the model link and python-telegram-bot build theirs: default headers, a timeout, a pool.
    return {
        "headers": {"Content-Type": "application/json", "Accept": "application/json"},
        "timeout": httpx.Timeout(5.0),
        "limits": httpx.Limits(max_connections=4),
    }


async def _exchange(client: httpx.AsyncClient, url: str) -> list[tuple[int, list[tuple[str, str]], bytes]]:
    """The requests of a turn's links, as each link makes them; what each answer reads as."""
    answers = []
    # python-telegram-bot: client.request with a form body and per-request timeouts.
    response = await client.request(
        "POST", f"{url}/bot123:abc/sendMessage", data={"chat_id": "7", "text": "é"}, timeout=httpx.Timeout(3.0)
    )
    answers.append((response.status_code, response.headers.multi_items(), response.content))
    # The model link: a built request with a byte body, its answer streamed.
    built = client.build_request("POST", httpx.URL(f"{url}/v1/chat/completions"), content=b'{"stream":true}')
    streamed = await client.send(built, stream=True)
    try:
        pieces = [piece async for piece in streamed.aiter_bytes()]
    finally:
        await streamed.aclose()
    answers.append((streamed.status_code, streamed.headers.multi_items(), b"|".join(pieces)))
    # A GET with parameters, and a request made without the client (its timeout is the client's).
    response = await client.get(f"{url}/v1/models", params={"q": "a b"})
    answers.append((response.status_code, response.headers.multi_items(), response.content))
    response = await client.send(httpx.Request("GET", f"{url}/health"))
    answers.append((response.status_code, response.headers.multi_items(), response.text.encode()))
    return answers


def _request_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int, str]]:
    return [(r.name, r.levelno, r.getMessage()) for r in caplog.records if r.name == "httpx"]


def _answer(raw: bytes) -> bytes:
    if b"/v1/chat/completions" in raw.split(b"\r\n", 1)[0]:
        return _chunked(b'data: {"a":1}\n\n', b"data: [DONE]\n\n")
    return _ok()


async def test_a_plain_request_goes_out_byte_for_byte_as_httpx_sends_it_through_the_transport_alone(monkeypatch, caplog):
    layered = []
    full_path = httpx.AsyncClient._send_handling_auth

    async def counted(self, *args, **kwargs):
        layered.append(type(self).__name__)
        return await full_path(self, *args, **kwargs)

    monkeypatch.setattr(httpx.AsyncClient, "_send_handling_auth", counted)
    caplog.set_level(logging.INFO, logger="httpx")  # httpx's line of each request, as an operator may turn it on
    async with _raw_server(_answer) as server:
        async with httpx.AsyncClient(**_kwargs()) as plain:  # type: ignore[arg-type]
            expected = await _exchange(plain, server.url)
        sent_by_httpx, server.requests = server.requests, []
        logged_by_httpx = _request_lines(caplog)
        caplog.clear()
        async with LeanClient(**_kwargs()) as lean:  # type: ignore[arg-type]
            got = await _exchange(lean, server.url)
            assert lean.cookies.jar is not None  # a jar is kept (nothing set one here)
    assert server.requests == sent_by_httpx
    assert got == expected
    assert _request_lines(caplog) == logged_by_httpx and len(logged_by_httpx) == 4
    assert layered == ["AsyncClient"] * 4  # httpx's own four; none of the lean client's


async def test_credentials_in_the_url_are_sent_as_httpx_sends_them():
    async with _raw_server(_answer) as server:
        url = server.url.replace("http://", "http://user:secret@")
        for client_type in (httpx.AsyncClient, LeanClient):
            async with client_type(**_kwargs()) as client:  # type: ignore[arg-type]
                await client.get(f"{url}/v1/models")
                await client.get(f"{url}/v1/models")
    assert len(server.requests) == 4
    assert server.requests[2:] == server.requests[:2]
    assert b"Authorization: Basic dXNlcjpzZWNyZXQ=" in server.requests[3]


async def test_a_cookie_the_server_sets_is_sent_back_as_httpx_sends_it():
    def answer(raw: bytes) -> bytes:
        return _ok(b"{}", "Set-Cookie: affinity=node-2; Path=/") if b"/first" in raw else _ok(b"{}")

    async with _raw_server(answer) as server:
        for client_type in (httpx.AsyncClient, LeanClient):
            async with client_type(**_kwargs()) as client:  # type: ignore[arg-type]
                await client.get(f"{server.url}/warm")
                await client.get(f"{server.url}/first")
                await client.get(f"{server.url}/next")
    assert len(server.requests) == 6
    assert server.requests[3:] == server.requests[:3]
    assert b"Cookie: affinity=node-2" in server.requests[5]


async def test_redirects_and_hooks_go_httpx_s_own_way():
    def answer(raw: bytes) -> bytes:
        if b"/moved" in raw.split(b"\r\n", 1)[0]:
            return b"HTTP/1.1 302 Found\r\nLocation: /here\r\nContent-Length: 0\r\n\r\n"
        return _ok(b"here")

    async with _raw_server(answer) as server:
        async with LeanClient(**_kwargs(), follow_redirects=True) as client:  # type: ignore[arg-type]
            await client.get(f"{server.url}/warm")
            followed = await client.get(f"{server.url}/moved")
        seen: list[str] = []

        async def hook(request: httpx.Request) -> None:
            seen.append(request.url.path)

        async with LeanClient(**_kwargs(), event_hooks={"request": [hook]}) as client:  # type: ignore[arg-type]
            await client.get(f"{server.url}/warm")
            await client.get(f"{server.url}/hooked")
        async with LeanClient(**_kwargs()) as client:  # type: ignore[arg-type]
            await client.get(f"{server.url}/warm")
            unfollowed = await client.get(f"{server.url}/moved")
            asked = await client.get(f"{server.url}/moved", follow_redirects=True)
    assert followed.content == b"here" and [r.status_code for r in followed.history] == [302]
    assert seen == ["/warm", "/hooked"]
    assert unfollowed.status_code == 302 and asked.content == b"here"


async def test_a_failure_names_its_request_and_a_request_made_without_the_client_keeps_its_timeout():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    async with _raw_server(lambda raw: b"" if b"/silent" in raw else _ok()) as server:
        async with LeanClient(**{**_kwargs(), "timeout": httpx.Timeout(0.3)}) as client:  # type: ignore[arg-type]
            await client.get(f"{server.url}/warm")
            refused = client.build_request("GET", f"http://127.0.0.1:{closed}/x")
            with pytest.raises(httpx.ConnectError) as failed:
                await client.send(refused)
            assert failed.value.request is refused
            async with asyncio.timeout(5):  # without the client's timeout the request would wait for ever
                with pytest.raises(httpx.ReadTimeout):
                    await client.send(httpx.Request("GET", f"{server.url}/silent"))
        with pytest.raises(RuntimeError, match="closed"):
            await client.get(f"{server.url}/warm")
