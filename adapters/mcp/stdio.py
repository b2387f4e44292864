"""A stdio MCP server as a process group: its lines in and out, its stray output skipped, its whole tree ended.

The SDK's own `stdio_client` is not used because of three things it does that the companion may not:
it logs a stray stdout line with the line in the exception (a server's text, anything, into our log),
it sends the server's stderr to ours, and at its end it signals the process group only when the
server itself has not exited within 2 s (a server that exits on end of input leaves its children).
This one speaks the same newline-delimited JSON-RPC through the SDK's message types and streams.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from adapters.mcp.config import ServerConfig
from adapters.mcp.sdk import SessionMessage, get_default_environment, types

log = logging.getLogger(__name__)

# What a server may not exceed in one line (one message): past it the line is dropped, so a server
# cannot make the companion hold its whole output.
MAX_LINE_BYTES = 32 * 1024 * 1024
# Of the stop grace: how long the server has to leave on its own after its input closes, before its
# process group is sent SIGTERM (the MCP specification's order: close input, SIGTERM, SIGKILL).
_EOF_SHARE = 0.25
_KILL_SHARE = 0.15  # the last share of the grace: SIGKILL and the kernel's work
_LEAST_KILL_WAIT = 0.2  # a wait for SIGKILLed processes to be gone, even with no grace left


@dataclass
class StdioProcess:
    """What the hub knows of one running server: its process group, and how its output went."""

    pid: int
    on_end: Callable[[], None]  # called once its stdout closes: it died, or closed it
    stray_lines: int = 0  # lines that were not MCP messages, skipped (counted, never logged)
    ended: bool = False
    closing: bool = False  # the companion began to end it
    left: bool = False  # its output ended before the companion began to end it: it died or quit
    returncode: int | None = None

    def end(self) -> None:
        if not self.ended:
            self.ended, self.left = True, not self.closing
            self.on_end()


def kill_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False when no process of it is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # the group's id was taken by another user's processes: ours are gone
        return False
    return True


async def end_group(process: anyio.abc.Process, grace: float) -> None:
    """Close the server's input, then SIGTERM its process group, then SIGKILL it: within `grace` seconds.

    The group is signalled even when the server left on its own: a child it started stays in its
    group (unless it made its own session) and would outlive the companion otherwise.
    """
    pgid = process.pid  # start_new_session: the server leads its own group
    deadline = anyio.current_time() + grace
    with contextlib.suppress(Exception):  # its input may be closed already (it died)
        await process.stdin.aclose()  # type: ignore[union-attr]
    with anyio.move_on_after(grace * _EOF_SHARE):
        await process.wait()
    if kill_group(pgid, signal.SIGTERM):
        # SIGKILL comes with a share of the grace left, for the kernel to end what it kills.
        with anyio.move_on_after(max(deadline - anyio.current_time() - grace * _KILL_SHARE, 0)):
            await _until_gone(process, pgid)
        if kill_group(pgid, signal.SIGKILL):
            with anyio.move_on_after(max(deadline - anyio.current_time(), _LEAST_KILL_WAIT)):
                await _until_gone(process, pgid)
    with anyio.move_on_after(max(deadline - anyio.current_time(), _LEAST_KILL_WAIT)):
        await process.wait()  # reap the leader, so no zombie of ours is left


async def _until_gone(process: anyio.abc.Process, pgid: int) -> None:
    # Polled: a process group's end has no event to wait on (its members are not our children).
    while await _group_alive(process, pgid):  # noqa: ASYNC110
        await anyio.sleep(0.02)


async def _group_alive(process: anyio.abc.Process, pgid: int) -> bool:
    if process.returncode is None:
        with anyio.move_on_after(0):
            await process.wait()
    # Signal 0 reaches zombies too: a group of zombies nobody reaps would look alive for the whole
    # grace, so only a group member that still runs counts (read from /proc where there is one).
    if not kill_group(pgid, 0):
        return False
    return _running_members(pgid) != 0


def _running_members(pgid: int) -> int:
    """Processes of the group that are not zombies; -1 when /proc cannot say."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return -1
    running = 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after the last ")".
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            running += 1
    return running


# On Linux a server is started through these few lines of Python: they ask the kernel to SIGKILL it when the
# companion's thread that started it (the event loop's) ends, a SIGKILL of the companion included, which no
# stop of ours can follow up (PR_SET_PDEATHSIG outlives execve), then become the server's command. A launcher
# rather than a preexec_fn: no Python runs in a child forked from the threaded companion, and anyio's public
# open_process suffices. Its own children are not covered (docs/operations.md).
_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)\n"  # 1: PR_SET_PDEATHSIG
    # The companion died before the line above: nobody would send the signal.
    "if os.getppid() != int(sys.argv[1]):\n"
    "    os.kill(os.getpid(), signal.SIGKILL)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def _command(server: ServerConfig, env: dict[str, str]) -> list[str]:
    """The server's command line, through the launcher on Linux. A command that cannot be found raises
    FileNotFoundError here, as starting it directly would (the launcher would only exit)."""
    command = [server.command, *server.args]
    if not sys.platform.startswith("linux"):
        return command
    if os.sep in server.command:
        found = os.path.join(server.cwd or os.getcwd(), server.command)
        if not (os.path.isfile(found) and os.access(found, os.X_OK)):
            raise FileNotFoundError(errno.ENOENT, "no such command", server.command)
    elif shutil.which(server.command, path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(errno.ENOENT, "no such command", server.command)
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(os.getpid()), *command]


@contextlib.asynccontextmanager
async def stdio_transport(
    server: ServerConfig, grace: Callable[[], float], on_end: Callable[[], None]
) -> AsyncIterator[
    tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
        StdioProcess,
    ]
]:
    """Start the server in its own session (its own process group) and carry its messages.

    `grace` is read when the transport ends: the stop grace at a stop, a short one at a restart.
    """
    # The SDK's short list of inherited variables (HOME, PATH, USER ...) and the server's own: never
    # the companion's whole environment, which holds its tokens and keys.
    env = {**get_default_environment(), **server.env}
    process = await anyio.open_process(
        _command(server, env),
        env=env,
        cwd=server.cwd,
        stderr=subprocess.DEVNULL,  # the server's own words: anything, so never into our log
        start_new_session=True,
    )
    state = StdioProcess(process.pid, on_end)
    stdout, stdin = process.stdout, process.stdin
    if stdout is None or stdin is None:  # never: both are pipes by default
        raise OSError("the server's stdin or stdout is not a pipe")
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_lines() -> None:
        lines = _Lines()
        try:
            async with read_writer:
                async for chunk in stdout:
                    for line in lines.feed(chunk):
                        message = _message(line) if line is not None else None
                        if message is None:
                            state.stray_lines += 1
                            continue
                        await read_writer.send(SessionMessage(message))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            state.end()

    async def write_lines() -> None:
        try:
            async with write_reader:
                async for session_message in write_reader:
                    data = session_message.message.model_dump_json(by_alias=True, exclude_none=True)
                    await stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            state.end()  # the server is gone (its reader sees the end too)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_lines)
            tg.start_soon(write_lines)
            try:
                yield read_stream, write_stream, state
            finally:
                with anyio.CancelScope(shield=True):
                    state.closing = True
                    await end_group(process, grace())
                    tg.cancel_scope.cancel()
    finally:
        for stream in (read_stream, write_stream, read_writer, write_reader):
            await stream.aclose()
        with anyio.CancelScope(shield=True):
            await process.aclose()
        state.returncode = process.returncode


class _Lines:
    """Whole lines out of a pipe's chunks, each chunk scanned once; a line past MAX_LINE_BYTES is
    dropped as it comes (given as None, once) instead of held."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self._dropping = False

    def feed(self, chunk: bytes) -> list[bytes | None]:
        lines: list[bytes | None] = []
        while (end := chunk.find(b"\n")) >= 0:
            if not self._dropping:
                lines.append(b"".join([*self._parts, chunk[:end]]))
            self._parts, self._size, self._dropping = [], 0, False
            chunk = chunk[end + 1 :]
        if chunk and not self._dropping:
            self._size += len(chunk)
            if self._size > MAX_LINE_BYTES:
                self._parts, self._size, self._dropping = [], 0, True
                lines.append(None)
            else:
                self._parts.append(chunk)
        return lines


def _message(line: bytes) -> types.JSONRPCMessage | None:
    line = line.strip()
    if not line.startswith(b"{"):
        return None
    try:
        return types.JSONRPCMessage.model_validate_json(line)
    except ValueError:  # not JSON, or JSON that is no JSON-RPC message: a stray line
        return None
