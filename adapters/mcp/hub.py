"""The configured MCP servers kept connected: one supervisor task per server, a catalogue read without I/O, calls cut at their timeout."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from adapters.mcp.catalogue import arrange
from adapters.mcp.config import McpConfig, ServerConfig, builtin_tool_names
from adapters.mcp.sdk import McpError, types
from adapters.mcp.session import (
    SESSION_OVER,
    Connection,
    connected,
    cut,
    describe,
    description,
    list_tools,
    result_text,
    usable,
)
from adapters.mcp.stdio import StdioProcess, kill_group
from core.ports.tools import ServedResult, ServedTool, ServerState

log = logging.getLogger(__name__)

# Restarts: the first try again after FIRST_BACKOFF, doubling to LONGEST_BACKOFF; a server up for
# STEADY seconds starts again from the first.
FIRST_BACKOFF = 1.0
LONGEST_BACKOFF = 60.0
STEADY = 60.0
# How long a server being restarted (not stopped) has to end before its process group is killed.
RESTART_GRACE = 2.0
_CLOSE_MARGIN = 3.0
_CANCEL_SECONDS = 1.0  # for the notification that cancels a call cut at its timeout to be written


@dataclass(eq=False)
class _Server:
    config: ServerConfig
    up: bool = False
    detail: str = "not started yet"
    listed: tuple[types.Tool, ...] = ()  # last listed (after the filter); kept while down, to reserve names
    connection: Connection | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    relist: bool = False
    broken: bool = False
    scope: anyio.CancelScope | None = None
    task: asyncio.Task[None] | None = None
    groups: set[int] = field(default_factory=set)  # process groups it started (stdio)
    # The calls waiting on its session: cancelled when the session ends (a dead server's reply
    # would never come, and the SDK's own "connection closed" answer races the session's end).
    calls: set[anyio.CancelScope] = field(default_factory=set)


async def _cancel(connection: Connection, request_id: int) -> None:
    """Tell the server a call it did not answer in time is cancelled (the MCP specification's SHOULD):
    otherwise each call cut at its timeout runs on in the server, a hanging one for good."""
    cancelled = types.CancelledNotification(
        params=types.CancelledNotificationParams(requestId=request_id, reason="timeout")
    )
    with anyio.move_on_after(_CANCEL_SECONDS), contextlib.suppress(Exception):  # a broken session is the supervisor's
        await connection.session.send_notification(types.ClientNotification(cancelled))


class McpHub:
    """ToolServers over the configured MCP servers (core/ports/tools.py)."""

    def __init__(self, config: McpConfig, *, builtin: Collection[str] | None = None) -> None:
        self._config = config
        self._builtin = frozenset(builtin_tool_names() if builtin is None else builtin)
        self._servers = [_Server(s) for s in config.servers]
        self._by_name = {s.config.name: s for s in self._servers}
        self._catalogue: tuple[ServedTool, ...] = ()
        self._warned: set[tuple[str, str]] = set()
        self._grace = RESTART_GRACE
        self._started = False
        self._stopping = False
        for server in self._servers:
            if not server.config.enabled:
                server.detail = "disabled in the configuration (enabled: false)"

    # --- the port -------------------------------------------------------------------------------

    def catalogue(self) -> Sequence[ServedTool]:
        return self._catalogue

    def states(self) -> Sequence[ServerState]:
        offered: dict[str, int] = {}
        for tool in self._catalogue:
            offered[tool.server] = offered.get(tool.server, 0) + 1
        return [
            ServerState(
                s.config.name, s.config.transport, s.up, "" if s.up else s.detail, offered.get(s.config.name, 0)
            )
            for s in self._servers
        ]

    async def call(self, server: str, name: str, arguments: dict[str, Any]) -> ServedResult:
        found = self._by_name.get(server)
        connection = found.connection if found is not None and found.up else None
        if found is None or connection is None:
            return ServedResult(f"the tool {name} is unavailable: its server {server} is down", "unavailable", 0.0)
        if not any(t.server == server and t.name == name for t in self._catalogue):
            return ServedResult(f"the tool {name} is not offered by the server {server} now", "unavailable", 0.0)
        timeout = found.config.timeout
        began = time.monotonic()
        # The id call_tool is about to send its request under: the SDK takes it before its first await,
        # so no other task's request comes between (it is needed to cancel the request at its timeout).
        request_id = connection.session._request_id
        try:
            with anyio.CancelScope() as ended:
                found.calls.add(ended)
                try:
                    with anyio.fail_after(timeout):
                        result = await connection.session.call_tool(name, arguments)
                finally:
                    found.calls.discard(ended)
            if ended.cancelled_caught:
                return ServedResult(
                    f"the tool {name} failed: its server {server} ended the session", "failed", time.monotonic() - began
                )
        except TimeoutError:
            await _cancel(connection, request_id)
            return ServedResult(f"the tool {name} did not answer within {timeout:g} s", "timeout", timeout)
        except McpError as exc:
            seconds = time.monotonic() - began
            if exc.error.code in SESSION_OVER:
                self._break(found)
                return ServedResult(f"the tool {name} failed: its server {server} ended the session", "failed", seconds)
            # The server's own words go to the model (never to the log), cut like a result.
            return ServedResult(cut(f"error: the tool {name} refused: {exc.error.message}"), "error", seconds)
        except RuntimeError:  # the SDK's check of a structured result against the tool's own schema
            seconds = time.monotonic() - began
            return ServedResult(f"error: the tool {name} gave a result its own schema refuses", "error", seconds)
        except Exception as exc:  # noqa: BLE001 - a broken session must not end the turn
            self._break(found)
            log.warning("MCP server %s: a call of %s failed (%s)", server, name, type(exc).__name__)
            return ServedResult(
                f"the tool {name} failed: its server {server} broke off", "failed", time.monotonic() - began
            )
        seconds = time.monotonic() - began
        if result.isError:
            return ServedResult(f"error: {result_text(result)}", "error", seconds)
        return ServedResult(result_text(result), "ok", seconds)

    # --- the lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Start one supervisor per enabled server and return at once (each connects in the background)."""
        if self._started:
            return
        self._started = True
        for server in self._servers:
            if server.config.enabled:
                server.task = asyncio.create_task(self._supervise(server), name=f"mcp {server.config.name}")

    async def aclose(self, grace: float) -> None:
        """End every session and every stdio server's process tree within about `grace` seconds."""
        self._stopping = True
        self._grace = max(grace, 0.0)
        tasks = [s.task for s in self._servers if s.task is not None]
        for server in self._servers:
            if server.scope is not None:
                server.scope.cancel()
            server.wake.set()
        if tasks:
            # Each supervisor ends its process group within the grace; the margin is for a loaded machine.
            _, pending = await asyncio.wait(tasks, timeout=self._grace + _CLOSE_MARGIN)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        # The last word: a process group still there (a supervisor that did not finish) is killed.
        for server in self._servers:
            for group in server.groups:
                kill_group(group, signal.SIGKILL)
            server.groups.clear()
            server.up = False
            server.connection = None
        self._rebuild()

    # --- one server's supervisor ----------------------------------------------------------------

    async def _supervise(self, server: _Server) -> None:
        backoff = FIRST_BACKOFF
        with anyio.CancelScope() as server.scope:
            while not self._stopping:
                server.broken = server.relist = False
                up_since: float | None = None
                processes: list[StdioProcess] = []
                detail = ""
                try:
                    async with connected(
                        server.config,
                        grace=lambda: self._grace,
                        on_end=lambda: self._break(server),
                        on_message=lambda message: self._on_message(server, message),
                        on_process=functools.partial(self._started_process, server, processes),
                    ) as connection:
                        with anyio.fail_after(server.config.connect_timeout):
                            server.listed = tuple(usable(server.config, await list_tools(connection.session)))
                        server.connection, server.up, server.detail = connection, True, ""
                        up_since = time.monotonic()
                        self._rebuild()
                        log.info("MCP server %s is up (%d tools offered)", server.config.name, self._offered(server))
                        await self._serve(server, connection)
                        detail = "it ended the session"
                except Exception as exc:  # noqa: BLE001 - any failure of a server is that server's, retried
                    detail = describe(exc, server.config)
                finally:
                    server.up, server.connection = False, None
                    for call in server.calls:
                        call.cancel()
                    self._rebuild()
                for process in processes:
                    server.groups.discard(process.pid)
                    if process.left and process.returncode is not None:
                        detail = f"it exited (status {process.returncode})"
                if self._stopping:
                    break
                if up_since is not None and time.monotonic() - up_since >= STEADY:
                    backoff = FIRST_BACKOFF
                server.detail = detail
                log.warning("MCP server %s is down (%s); next try in %g s", server.config.name, detail, backoff)
                with anyio.move_on_after(backoff):
                    server.wake.clear()
                    await server.wake.wait()
                backoff = min(backoff * 2, LONGEST_BACKOFF)
        server.detail = "stopped"

    def _started_process(self, server: _Server, processes: list[StdioProcess], process: StdioProcess) -> None:
        # Known from its first moment, so a stop while it is still starting ends its process group too.
        server.groups.add(process.pid)
        processes.append(process)

    async def _serve(self, server: _Server, connection: Connection) -> None:
        """Hold the session until it breaks or the hub stops; re-list the tools when the server says they changed."""
        while not self._stopping and not server.broken:
            if server.relist:
                server.relist = False
                with anyio.fail_after(server.config.timeout):
                    server.listed = tuple(usable(server.config, await list_tools(connection.session)))
                self._rebuild()
                log.info("MCP server %s changed its tools (%d offered)", server.config.name, self._offered(server))
                continue
            server.wake.clear()
            await server.wake.wait()

    async def _on_message(self, server: _Server, message: Any) -> None:
        # Runs in the session's receive loop: it only flags (a request from here would wait on itself).
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            server.relist = True
            server.wake.set()

    def _break(self, server: _Server) -> None:
        server.broken = True
        server.wake.set()

    # --- the catalogue --------------------------------------------------------------------------

    def _rebuild(self) -> None:
        """The catalogue from what each server last listed (a server that is down keeps its names
        reserved, so a tool does not change servers while one restarts); see `arrange`."""
        offered, left_out = arrange([(s.config, [t.name for t in s.listed]) for s in self._servers], self._builtin)
        tools: list[ServedTool] = []
        for server, names in zip(self._servers, offered, strict=True):
            if not server.up:
                continue
            by_name = {t.name: t for t in server.listed}
            tools += [
                ServedTool(
                    server=server.config.name,
                    name=name,
                    description=description(by_name[name]),
                    parameters=dict(by_name[name].inputSchema),
                    private_allowed=server.config.private_allowed(name),
                )
                for name in names
            ]
        self._catalogue = tuple(tools)
        for left in left_out:
            if (left.server, left.tool) not in self._warned:
                self._warned.add((left.server, left.tool))
                log.warning("MCP server %s: the tool %s is left out: %s", left.server, left.tool, left.why)

    def _offered(self, server: _Server) -> int:
        return sum(1 for t in self._catalogue if t.server == server.config.name)
