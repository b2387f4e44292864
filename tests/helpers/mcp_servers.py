"""Real MCP servers for tests, written with the SDK's FastMCP: run over stdio, or streamable HTTP on 127.0.0.1.

Run as a script (`python tests/helpers/mcp_servers.py [flags]`) it is one server with these tools:
echo (records its arguments), big (a result of N bytes), crash (exits mid-call), hang (never
answers), fail (answers with an error), environment (its variables' names), spawn (starts a child in its process group), grow (adds
the tool "grown" and says its list changed). Flags: --only a,b (offer only these), --record PATH
(append each call's tool and arguments, one JSON line each), --alias a,b (echo under these
names too), --started PATH (create this file once running), --stray (print lines that are not MCP
messages at start, in every call and at exit), --exit-at-start (exit before answering),
--ignore-term (ignore SIGTERM, with its child), --crash-once PATH (crash exits mid-call only while
PATH does not exist, creating it; then it answers), --linger (stay after the input ends, as a server
whose own threads outlive it does), --cancelled PATH (create PATH when a call of hang is cancelled), --http PORT (streamable HTTP instead of stdio).

Imported, it gives what tests need to configure and start those servers; importing it loads no
part of the SDK (the lazy-import tests import it too).
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()


def stdio_server(*flags: str, record: Path | None = None, **keys: Any) -> dict[str, Any]:
    """One server's entry in a configuration file: this script over stdio, with `flags`."""
    args = [str(SCRIPT), *flags]
    if record is not None:
        args += ["--record", str(record)]
    return {"command": sys.executable, "args": args, **keys}


def write_config(path: Path, servers: dict[str, dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def records(path: Path) -> list[dict[str, Any]]:
    """The calls a server received, in order: {"tool": ..., "arguments": {...}}."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def free_port() -> int:
    """tests/helpers/ports.py's (imported here: this file also runs as a script, where `tests` is not a package)."""
    from tests.helpers.ports import free_port as below_the_ephemeral_range

    return below_the_ephemeral_range()


@contextlib.contextmanager
def http_server(*flags: str, record: Path | None = None, port: int | None = None) -> Iterator[str]:
    """This script over streamable HTTP on 127.0.0.1; yields its URL; stopped (and waited for) at the end."""
    port = port or free_port()
    args = [sys.executable, str(SCRIPT), "--http", str(port), *flags]
    if record is not None:
        args += ["--record", str(record)]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the MCP test server on port {port} did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()  # uvicorn's own stop; SIGKILL only if it does not come
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        process.kill()  # a no-op once it has ended
        process.wait()


def alive(pid: int) -> bool:
    """The process runs (a zombie nobody reaped yet does not count: it holds no resource but its entry)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


# --- the server (run as a script) ---------------------------------------------------------------

# The child `spawn` starts: it ignores SIGTERM when told to, says so, and sleeps.
_CHILD = """
import signal, sys, time
if sys.argv[1] == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(3600)
"""


def _main(argv: list[str]) -> None:
    import anyio
    from mcp.server.fastmcp import Context, FastMCP

    def flag(name: str) -> str | None:
        return argv[argv.index(name) + 1] if name in argv else None

    only = set((flag("--only") or "").split(",")) - {""}
    record = flag("--record")
    stray = "--stray" in argv
    http = flag("--http")
    if "--exit-at-start" in argv:
        sys.exit(4)
    if "--ignore-term" in argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def stray_line(words: str) -> None:
        if stray:  # straight to the pipe, beside the SDK's own writes: a whole line, never inside one of its messages
            os.write(1, f"stray {words}: not a message\n".encode())

    def note(tool: str, arguments: dict[str, Any]) -> None:
        stray_line(tool)
        if record:
            with open(record, "a", encoding="utf-8") as f:
                f.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")

    server = FastMCP("test", host="127.0.0.1", port=int(http or 0), log_level="ERROR")

    def tool(fn: Any) -> Any:
        if not only or fn.__name__ in only:
            server.add_tool(fn, name=fn.__name__, description=(fn.__doc__ or "").strip())
        return fn

    @tool
    def echo(text: str) -> str:
        """Say the text back."""
        note("echo", {"text": text})
        return f"echo: {text}"

    @tool
    def big(size: int) -> str:
        """A result of size bytes."""
        note("big", {"size": size})
        return "x" * size

    @tool
    def crash() -> str:
        """Exit in the middle of the call."""
        note("crash", {})
        if (once := flag("--crash-once")) is not None:
            if Path(once).exists():
                return "crash: not this time"
            Path(once).touch()
        os._exit(3)

    @tool
    async def hang() -> str:
        """Never answer."""
        note("hang", {})
        try:
            await anyio.sleep(3600)
        except anyio.get_cancelled_exc_class():
            if (cancelled := flag("--cancelled")) is not None:
                Path(cancelled).touch()  # noqa: ASYNC240 - in a cancelled scope, where an await would not run
            raise
        return "woke"

    @tool
    def fail() -> str:
        """Answer with an error."""
        note("fail", {})
        raise ValueError("the test tool failed on purpose")

    @tool
    def spawn() -> str:
        """Start a child in this server's process group; say both process ids once it runs."""
        note("spawn", {})
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, "1" if "--ignore-term" in argv else "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        # Its first line says its SIGTERM handling is set: a stop before that would end it whatever it ignores.
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        return json.dumps({"server": os.getpid(), "child": child.pid})

    @tool
    def environment() -> str:
        """The names of the environment variables this server was given."""
        note("environment", {})
        return " ".join(sorted(os.environ))

    @tool
    async def grow(ctx: Context) -> str:
        """Add the tool "grown" and say the list changed."""
        note("grow", {})

        def grown() -> str:
            return "grown here"

        server.add_tool(grown, name="grown", description="Added by grow.")
        await ctx.session.send_tool_list_changed()
        return "grew"

    for alias in (flag("--alias") or "").split(","):
        if alias:
            server.add_tool(echo, name=alias, description="Say the text back.")

    if started := flag("--started"):
        Path(started).touch()
    stray_line("start")
    if stray:
        import atexit

        atexit.register(stray_line, "exit")
    server.run("streamable-http" if http else "stdio")
    stray_line("end")
    if "--linger" in argv:
        time.sleep(3600)


if __name__ == "__main__":
    _main(sys.argv[1:])
