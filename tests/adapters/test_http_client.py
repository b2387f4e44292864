"""adapters/http_client.py: `LeanClient` sends what `httpx.AsyncClient` sends, byte for byte, answers as it
answers, and leaves to httpx's own path every request that needs more than the transport.

The server here is a raw HTTP/1.1 server on 127.0.0.1 that records each request's bytes as they arrived
and answers from a script, so the two clients are compared on the wire, not through httpx's objects."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import httpx
import pytest

from adapters.http_client import AsyncioBackend, LeanClient

Answer = Callable[[bytes], "bytes | str"]  # a request's bytes -> the response's bytes, or one of the ACTIONS
# What the server may do instead of answering: never answer; close or reset the connection at once; answer
# half of a 100-byte body, then close.
ACTIONS = ("hang", "close", "reset", "half")


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
    reads_bodies: bool = True  # False: a request's head is read, its body never (the peer's buffers fill)
    # Every connection's writer and handler, closed and ended when the server is (none left to the collector).
    connections: list[tuple[asyncio.StreamWriter, asyncio.Task[None] | None]] = field(default_factory=list)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.append((writer, asyncio.current_task()))
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if not self.reads_bodies:
                    self.requests.append(head)
                    await asyncio.sleep(3600)
                raw = head + await reader.readexactly(length)
                self.requests.append(raw)
                answer = self.answer(raw)
                if answer == "hang":
                    await asyncio.sleep(3600)
                elif answer == "reset":
                    writer.get_extra_info("socket").setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    writer.transport.abort()
                    return
                elif answer == "close":
                    break
                elif answer == "half":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 50)
                    await writer.drain()
                    break
                else:
                    assert isinstance(answer, bytes)
                    writer.write(answer)
                    await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def _raw_server(
    answer: Answer, *, tls: ssl.SSLContext | None = None, unix: str | None = None, reads_bodies: bool = True
) -> AsyncIterator[_RawServer]:
    server = _RawServer(answer, reads_bodies=reads_bodies)
    if unix is not None:
        listening = await asyncio.start_unix_server(server._serve, unix)
        server.url = "http://companion.invalid"
    else:
        listening = await asyncio.start_server(server._serve, "127.0.0.1", 0, ssl=tls)
        port = listening.sockets[0].getsockname()[1]
        server.url = f"{'https' if tls else 'http'}://{'localhost' if tls else '127.0.0.1'}:{port}"
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


async def test_a_plain_request_goes_out_byte_for_byte_as_httpx_sends_it_through_the_transport_alone(
    monkeypatch, caplog
):
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
    async with _raw_server(lambda raw: "hang" if b"/silent" in raw else _ok()) as server:
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


# --- the connections: asyncio's transports under httpcore (AsyncioBackend) -------------------------------------


def _both(**kwargs: object) -> list[httpx.AsyncClient]:
    """httpx's own client (httpcore on anyio) and the lean one, built alike."""
    return [httpx.AsyncClient(**{**_kwargs(), **kwargs}), LeanClient(**{**_kwargs(), **kwargs})]  # type: ignore[arg-type]


async def _outcome(client: httpx.AsyncClient, method: str, url: str, **kwargs: object) -> object:
    """What a request came to: the answer's status and body, or the name of the httpx error it raised."""
    try:
        async with asyncio.timeout(10):
            response = await client.request(method, url, **kwargs)  # type: ignore[arg-type]
    except httpx.HTTPError as exc:
        return type(exc).__name__
    return response.status_code, response.content


def test_a_lean_client_s_pools_read_and_write_through_asyncio_s_transports():
    proxied = httpx.AsyncHTTPTransport()
    client = LeanClient(mounts={"http://example.invalid": proxied})
    assert isinstance(client._transport._pool._network_backend, AsyncioBackend)  # type: ignore[attr-defined]
    assert isinstance(proxied._pool._network_backend, AsyncioBackend)
    plain = httpx.AsyncClient()
    assert not isinstance(plain._transport._pool._network_backend, AsyncioBackend)  # type: ignore[attr-defined]


async def test_failures_on_the_connection_are_the_errors_httpx_raises_on_its_own():
    def answer(raw: bytes) -> bytes | str:
        for action in ACTIONS:
            if f"/{action} ".encode() in raw.split(b"\r\n", 1)[0]:
                return action
        return _ok(b"fine")

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    outcomes = []
    async with _raw_server(answer) as server:
        for client in _both(timeout=httpx.Timeout(0.3)):
            async with client:
                outcomes.append(
                    [
                        await _outcome(client, "GET", f"{server.url}/fine"),
                        await _outcome(client, "GET", f"{server.url}/close"),
                        await _outcome(client, "GET", f"{server.url}/fine"),  # on a new connection
                        await _outcome(client, "GET", f"{server.url}/reset"),
                        await _outcome(client, "GET", f"{server.url}/half"),
                        await _outcome(client, "GET", f"{server.url}/hang"),
                        await _outcome(client, "GET", f"http://127.0.0.1:{closed}/"),
                        await _outcome(client, "GET", f"{server.url}/fine"),
                    ]
                )
    assert outcomes[1] == outcomes[0]
    assert outcomes[0][0] == outcomes[0][2] == outcomes[0][7] == (200, b"fine")
    assert outcomes[0][5] == "ReadTimeout" and outcomes[0][6] == "ConnectError"
    assert outcomes[0][1] == outcomes[0][4] == "RemoteProtocolError"


async def test_an_idle_connection_the_server_closed_is_not_used_again():
    async with (
        _raw_server(lambda raw: _ok(b"fine")) as server,
        LeanClient(**_kwargs()) as client,  # type: ignore[arg-type]
    ):
        first = await client.get(f"{server.url}/fine")
        server.connections[0][0].close()  # the server ends the kept-alive connection
        await asyncio.sleep(0.05)
        second = await client.get(f"{server.url}/fine")
    assert first.content == second.content == b"fine"
    assert len(server.connections) == 2


async def test_a_connection_closed_through_its_stream_is_not_used_again():
    # As the model link drops the connection of a stream that did not end as an answer (_drop_connection).
    async with _raw_server(lambda raw: _ok(b"fine")) as server:
        for client in _both():
            async with client:
                first = await client.get(f"{server.url}/fine")
                await first.extensions["network_stream"].aclose()
                second = await _outcome(client, "GET", f"{server.url}/fine")
            assert second == (200, b"fine"), type(client).__name__
    assert len(server.connections) == 4  # each client: a new connection for its second request


async def _held_then_read(client: httpx.AsyncClient, url: str) -> bytes:
    """A large body's headers taken, then its reading held while the server sends on (the connection's buffer
    passes its high mark and the socket is no longer read), then read whole."""
    async with asyncio.timeout(10), client.stream("GET", url) as response:
        await asyncio.sleep(0.3)
        return b"".join([piece async for piece in response.aiter_raw()])


async def test_a_body_larger_than_the_buffers_arrives_whole_both_ways():
    big = bytes(range(256)) * (6 * 4096)  # 6 MiB
    async with (
        _raw_server(lambda raw: _ok(big) if raw.startswith(b"GET") else _ok(str(len(raw)).encode())) as server,
        LeanClient(**_kwargs()) as client,  # type: ignore[arg-type]
    ):
        got = await _held_then_read(client, f"{server.url}/file")
        sent = await client.post(f"{server.url}/upload", content=big)
    assert got == big
    assert int(sent.content) > len(big)


async def test_a_request_the_server_does_not_read_times_out_writing():
    async with _raw_server(lambda raw: _ok(), reads_bodies=False) as server:
        for client in _both(timeout=httpx.Timeout(5.0, write=0.3)):
            async with client:
                outcome = await _outcome(client, "POST", f"{server.url}/upload", content=b"x" * (64 * 1024 * 1024))
                assert outcome == "WriteTimeout", type(client).__name__


async def test_a_unix_socket_carries_requests(tmp_path):
    path = str(tmp_path / "api.sock")
    async with (
        _raw_server(lambda raw: _ok(b"over the socket"), unix=path) as server,
        LeanClient(transport=httpx.AsyncHTTPTransport(uds=path)) as client,
    ):
        answers = [await client.get(f"{server.url}/a"), await client.get(f"{server.url}/b")]
    assert [a.content for a in answers] == [b"over the socket"] * 2
    assert len(server.connections) == 1  # kept alive between the two


def _certificate(tmp_path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a self-signed certificate for `name`, and a client context trusting it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_file, key_file)
    client = ssl.create_default_context(cafile=str(cert_file))
    return server, client


async def test_tls_carries_requests_and_a_certificate_for_another_name_is_refused_as_httpx_refuses_it(tmp_path):
    big = b"y" * (3 * 1024 * 1024)  # more than the buffers: reading pauses and resumes through TLS
    right_server, trusting = _certificate(tmp_path, "localhost")
    wrong_server, trusting_other = _certificate(tmp_path, "other.invalid")
    async with (
        _raw_server(lambda raw: _ok(big) if b"/big" in raw else _ok(b"secret"), tls=right_server) as server,
        LeanClient(**_kwargs(), verify=trusting) as client,  # type: ignore[arg-type]
    ):
        small = await client.get(f"{server.url}/small")
        large = await _held_then_read(client, f"{server.url}/big")
        stream = small.extensions["network_stream"]
    assert small.content == b"secret" and large == big
    assert stream.get_extra_info("ssl_object") is not None
    assert len(server.connections) == 1
    async with _raw_server(lambda raw: _ok(b"secret"), tls=wrong_server) as server:
        refused = []
        for client in _both(verify=trusting_other):
            async with client:
                refused.append(await _outcome(client, "GET", f"{server.url}/small"))
    assert refused == ["ConnectError", "ConnectError"]
