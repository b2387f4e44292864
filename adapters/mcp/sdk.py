"""The MCP SDK's client half, imported without the package's own __init__ (which loads its servers too).

`import mcp` runs mcp/__init__.py, which imports the SDK's server side with it: starlette,
uvicorn, sse-starlette, jsonschema, python-multipart, pydantic-settings; about 10 MB resident in
an idle gateway that only ever runs the client. So the package is registered here as an empty
module over its own directory before any of its submodules is imported: `mcp.client.session` and
the rest then load as usual, and mcp/__init__.py never runs. Every module of adapters/mcp/ takes
the SDK from here. (Nothing of the client imports a name from the package itself; the tests would
fail at their first import if a release did.)
"""

from __future__ import annotations

import importlib.util
import sys


def _client_half_only() -> None:
    if "mcp" in sys.modules:  # imported whole already (a test's server in this process): use it
        return
    spec = importlib.util.find_spec("mcp")
    if spec is None or spec.submodule_search_locations is None:
        return  # not installed: the imports below fail as they would anyway
    sys.modules["mcp"] = importlib.util.module_from_spec(spec)


_client_half_only()

from mcp import types  # noqa: E402
from mcp.client.session import ClientSession, MessageHandlerFnT  # noqa: E402
from mcp.client.stdio import get_default_environment  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.exceptions import McpError  # noqa: E402
from mcp.shared.message import SessionMessage  # noqa: E402

__all__ = [
    "ClientSession",
    "McpError",
    "MessageHandlerFnT",
    "SessionMessage",
    "get_default_environment",
    "streamable_http_client",
    "types",
]
