"""One MCP session over stdio or streamable HTTP, opened through the official SDK (mcp 1.x); results put in words.

The SDK's sessions run anyio task groups, which must be entered and left in one task: whoever
opens `connected` keeps it open in that task (the hub's supervisor, or the doctor's probe), and
other tasks only send requests on the session it yields.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import anyio
import httpx

from adapters.mcp.config import ServerConfig
from adapters.mcp.sdk import ClientSession, McpError, MessageHandlerFnT, streamable_http_client, types
from adapters.mcp.stdio import StdioProcess, stdio_transport
from adapters.tls import shared_ssl_context

# A result longer than this (UTF-8) reaches the model cut, saying so (docs/operations.md states it).
MAX_RESULT_BYTES = 16 * 1024
# A tool's description as the model is shown it: a server's catalogue is part of every request.
MAX_DESCRIPTION = 1024
# The SDK's own HTTP read timeout: a server may hold its event stream open this long between events.
_HTTP_READ_TIMEOUT = 300.0
# Error codes that mean the session is over, not that the tool refused (SDK: CONNECTION_CLOSED; a
# streamable HTTP server that forgot the session answers 404, which the SDK gives as 32600).
SESSION_OVER = frozenset({types.CONNECTION_CLOSED, 32600})
CLIENT = types.Implementation(name="companion", version="0.1.0")


@dataclass
class Connection:
    session: ClientSession
    process: StdioProcess | None  # None over HTTP


@contextlib.asynccontextmanager
async def connected(
    server: ServerConfig,
    *,
    grace: Callable[[], float],
    on_end: Callable[[], None],
    on_message: MessageHandlerFnT,
    on_process: Callable[[StdioProcess], None] = lambda process: None,
) -> AsyncIterator[Connection]:
    """An initialized session (within the server's connect_timeout), closed when the block ends.

    `on_process` hears of a stdio server's process as soon as it runs (before it answers), `on_end`
    when its output ends; `grace` is read when the block ends (see stdio_transport)."""
    async with contextlib.AsyncExitStack() as stack:
        process: StdioProcess | None = None
        if server.transport == "stdio":
            read, write, started = await stack.enter_async_context(stdio_transport(server, grace, on_end))
            on_process(started)
            process = started
        else:
            client = await stack.enter_async_context(
                httpx.AsyncClient(
                    headers=dict(server.headers),
                    timeout=httpx.Timeout(server.connect_timeout, read=_HTTP_READ_TIMEOUT),
                    verify=shared_ssl_context(),  # adapters/tls.py: one CA bundle loaded per process
                )
            )
            read, write, _ = await stack.enter_async_context(streamable_http_client(server.url, http_client=client))
        session = await stack.enter_async_context(
            ClientSession(read, write, message_handler=on_message, client_info=CLIENT)
        )
        with anyio.fail_after(server.connect_timeout):
            await session.initialize()
        yield Connection(session, process)


async def list_tools(session: ClientSession) -> list[types.Tool]:
    """Every tool the server lists, following its pages."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools += page.tools
        cursor = page.nextCursor
        if not cursor:
            return tools


def usable(server: ServerConfig, tools: list[types.Tool]) -> list[types.Tool]:
    """The tools after the server's include/exclude filter (names a model may not call are the hub's to leave out)."""
    return [t for t in tools if server.admits(t.name)]


def description(tool: types.Tool) -> str:
    words = tool.description or tool.title or ""
    return words if len(words) <= MAX_DESCRIPTION else words[: MAX_DESCRIPTION - 1] + "…"


def result_text(result: types.CallToolResult) -> str:
    """The result for the model: text joined, other content named by kind, structured content when
    there is no text; cut at MAX_RESULT_BYTES."""
    parts: list[str] = []
    for item in result.content:
        if isinstance(item, types.TextContent):
            parts.append(item.text)
        elif isinstance(item, types.EmbeddedResource) and isinstance(item.resource, types.TextResourceContents):
            parts.append(item.resource.text)
        else:
            parts.append(f"[{_KINDS.get(type(item), 'content')}]")
    text = "\n".join(parts)
    if not any(isinstance(i, types.TextContent) for i in result.content) and result.structuredContent is not None:
        text = json.dumps(result.structuredContent, ensure_ascii=False)
    return cut(text)


_KINDS: dict[type, str] = {
    types.ImageContent: "image",
    types.AudioContent: "audio",
    types.ResourceLink: "resource link",
    types.EmbeddedResource: "resource",
}


def cut(text: str) -> str:
    data = text.encode()
    if len(data) <= MAX_RESULT_BYTES:
        return text
    kept = data[:MAX_RESULT_BYTES].decode(errors="ignore")
    return f"{kept}… [cut: the result was {len(data)} bytes]"


def describe(exc: BaseException, server: ServerConfig) -> str:
    """Why a server is not up, in words: our own, with no secret (an error's message is never quoted
    when it could hold one: httpx's, the server's)."""
    exc = _leaf(exc)
    if isinstance(exc, TimeoutError):
        return f"it did not answer within {server.connect_timeout:g} s (connect_timeout)"
    if isinstance(exc, FileNotFoundError):
        return "its command was not found"
    if isinstance(exc, PermissionError):
        return "its command may not be run (permission denied)"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"it answered HTTP {exc.response.status_code}"
    if isinstance(exc, httpx.ConnectError):
        return "it cannot be reached (connection refused or no such host)"
    if isinstance(exc, httpx.TimeoutException):
        return f"it did not answer within {server.connect_timeout:g} s (connect_timeout)"
    if isinstance(exc, McpError):
        if exc.error.code in SESSION_OVER:
            return "it ended the session"
        return f"it refused the session (error {exc.error.code})"
    return f"the session failed ({type(exc).__name__})"


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
