"""The MCP servers' configuration file (COMPANION_MCP_CONFIG): read, checked, one line per mistake."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal

# What a server's name and a tool's name may be: what OpenAI-style function names allow, and the
# server's name shows in logs, doctor and /tools as it is written.
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DEFAULT_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 10.0
_LONGEST = 3600.0  # a bound on both timeouts: a day-long wait is a typo, not a choice

_STDIO_KEYS = {"command", "args", "env", "cwd"}
_HTTP_KEYS = {"url", "headers"}
_COMMON_KEYS = {"include", "exclude", "timeout", "connect_timeout", "private", "enabled"}
_KEYS = _STDIO_KEYS | _HTTP_KEYS | _COMMON_KEYS


class McpConfigError(Exception):
    """The configuration file cannot be used: one line naming the file, the server and the key."""


@dataclasses.dataclass(frozen=True, slots=True)
class ServerConfig:
    """One server as configured; `env` and `headers` hold secrets and never show in a repr."""

    name: str
    transport: Literal["stdio", "http"]
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    include: tuple[str, ...] | None = None  # None: every tool
    exclude: tuple[str, ...] = ()
    timeout: float = DEFAULT_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    private: Literal["allowed"] | None = None  # None: never offered in private mode
    enabled: bool = True
    variables: tuple[str, ...] = dataclasses.field(default=(), repr=False)  # what ${VAR}s gave

    def admits(self, tool: str) -> bool:
        """The include/exclude filter: names or fnmatch globs, exclude winning."""
        if self.include is not None and not any(fnmatch.fnmatchcase(tool, p) for p in self.include):
            return False
        return not any(fnmatch.fnmatchcase(tool, p) for p in self.exclude)

    def private_allowed(self, tool: str) -> bool:
        """The owner named this tool for private mode: a stdio server marked "allowed" whose include
        names it exactly (a glob names no tool for private mode)."""
        return (
            self.transport == "stdio"
            and self.private == "allowed"
            and self.include is not None
            and tool in self.include
            and self.admits(tool)
        )

    @property
    def secrets(self) -> tuple[str, ...]:
        return (*self.env.values(), *self.headers.values(), *self.variables)


@dataclasses.dataclass(frozen=True, slots=True)
class McpConfig:
    path: Path
    servers: tuple[ServerConfig, ...]

    @property
    def enabled(self) -> tuple[ServerConfig, ...]:
        return tuple(s for s in self.servers if s.enabled)

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every value of `env` and `headers` and every value a ${VAR} gave, longest first (for withholding in text)."""
        found = {v for s in self.servers for v in s.secrets if v}
        return tuple(sorted(found, key=len, reverse=True))


def builtin_tool_names() -> frozenset[str]:
    """The companion's own tools' names: a served tool may not take one."""
    from core.memory.operations import default_tools

    return default_tools().names


def load_mcp_config(path: Path, environ: Mapping[str, str], *, builtin: Collection[str] | None = None) -> McpConfig:
    """Read and check the file; raises McpConfigError with one line naming the file, server and key."""
    builtin = builtin_tool_names() if builtin is None else builtin
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise McpConfigError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise McpConfigError(f"{path}: is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"{path}: is not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(raw, dict):
        raise McpConfigError(f"{path}: must be a JSON object with the key mcpServers")
    unknown = sorted(set(raw) - {"mcpServers"})
    if unknown:
        raise McpConfigError(f"{path}: unknown key {unknown[0]!r} (the file holds mcpServers only)")
    servers = raw.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise McpConfigError(f"{path}: mcpServers must be an object of servers by name")
    return McpConfig(
        Path(path), tuple(_server(path, name, spec, environ, frozenset(builtin)) for name, spec in servers.items())
    )


def _server(path: Path, name: str, spec: Any, environ: Mapping[str, str], builtin: frozenset[str]) -> ServerConfig:
    def fail(key: str, what: str) -> McpConfigError:
        return McpConfigError(f"{path}: server {name!r}, key {key!r}: {what}")

    if not NAME.match(name):
        raise McpConfigError(f"{path}: server {name!r}: a name is 1 to 64 letters, digits, _ or -")
    if not isinstance(spec, dict):
        raise McpConfigError(f"{path}: server {name!r}: must be an object")
    for key in spec:
        if key not in _KEYS:
            raise fail(key, "unknown key")
    read: list[str] = []  # the values ${VAR} gave: secrets as well (a token is often passed in args)
    spec = {
        key: _expand(value, environ, lambda var, key=key: fail(key, f"${{{var}}} is not set"), read)
        for key, value in spec.items()
    }
    if "command" in spec and "url" in spec:
        raise fail("url", "a server has either command (stdio) or url (streamable HTTP), not both")
    if "command" not in spec and "url" not in spec:
        raise fail("command", "a server needs command (stdio) or url (streamable HTTP)")
    transport: Literal["stdio", "http"] = "stdio" if "command" in spec else "http"
    wrong = sorted(set(spec) & (_HTTP_KEYS if transport == "stdio" else _STDIO_KEYS))
    if wrong:
        raise fail(wrong[0], f"does not apply to a {'stdio' if transport == 'stdio' else 'streamable HTTP'} server")
    include = _names(spec, "include", fail)
    for tool in include or ():
        if tool in builtin:
            raise fail("include", f"{tool!r} is the name of a built-in tool")
    private = spec.get("private")
    if private is not None and private != "allowed":
        raise fail("private", 'the only value is "allowed" (leave it out to keep the server out of private mode)')
    if private == "allowed" and transport == "http":
        raise fail("private", "a server reached over HTTP is never offered in private mode")
    enabled = spec.get("enabled", True)
    if not isinstance(enabled, bool):
        raise fail("enabled", "must be true or false")
    common = {
        "include": include,
        "exclude": _names(spec, "exclude", fail) or (),
        "timeout": _seconds(spec, "timeout", DEFAULT_TIMEOUT, fail),
        "connect_timeout": _seconds(spec, "connect_timeout", DEFAULT_CONNECT_TIMEOUT, fail),
        "private": private,
        "enabled": enabled,
        "variables": tuple(read),
    }
    if transport == "stdio":
        command = spec["command"]
        if not isinstance(command, str) or not command.strip():
            raise fail("command", "must be a non-empty string")
        cwd = spec.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise fail("cwd", "must be a string")
        return ServerConfig(
            name,
            "stdio",
            command=command,
            args=_strings(spec, "args", fail),
            env=_mapping(spec, "env", fail),
            cwd=cwd,
            **common,
        )
    url = spec["url"]
    if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
        raise fail("url", "must be an http:// or https:// URL")
    return ServerConfig(name, "http", url=url, headers=_mapping(spec, "headers", fail), **common)


def _expand(value: Any, environ: Mapping[str, str], missing: Any, read: list[str]) -> Any:
    """${VAR} in every string, however deep; a VAR not set is an error (its value never shows)."""
    if isinstance(value, str):

        def one(match: re.Match[str]) -> str:
            var = match.group(1)
            if not _VARIABLE_NAME.match(var) or var not in environ:
                raise missing(var)
            read.append(environ[var])
            return environ[var]

        return _VARIABLE.sub(one, value)
    if isinstance(value, list):
        return [_expand(v, environ, missing, read) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, environ, missing, read) for k, v in value.items()}
    return value


def _strings(spec: dict[str, Any], key: str, fail: Any) -> tuple[str, ...]:
    value = spec.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail(key, "must be a list of strings")
    return tuple(value)


def _names(spec: dict[str, Any], key: str, fail: Any) -> tuple[str, ...] | None:
    if key not in spec:
        return None
    names = _strings(spec, key, fail)
    if not all(names):
        raise fail(key, "a tool's name or glob cannot be empty")
    return names


def _mapping(spec: dict[str, Any], key: str, fail: Any) -> dict[str, str]:
    value = spec.get(key, {})
    # Only the key names may be quoted: the values are secrets.
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise fail(key, "must be an object of strings")
    return dict(value)


def _seconds(spec: dict[str, Any], key: str, default: float, fail: Any) -> float:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise fail(key, "must be a number of seconds")
    if not 0 < value <= _LONGEST:
        raise fail(key, f"must be more than 0 and at most {_LONGEST:g} seconds")
    return float(value)
