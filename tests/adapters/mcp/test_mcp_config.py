"""The MCP configuration file: the common mcpServers shape, ${VAR} from the environment, one line per mistake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.mcp.config import DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, McpConfigError, ServerConfig, load_mcp_config


def load(tmp_path: Path, servers: object, environ: dict[str, str] | None = None, **top: object):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers, **top}), encoding="utf-8")
    return load_mcp_config(path, environ or {})


def test_the_common_shape_is_read_with_the_defaults(tmp_path) -> None:
    config = load(
        tmp_path,
        {
            "files": {
                "command": "files-server",
                "args": ["--root", "/notes"],
                "env": {"TOKEN": "t"},
                "cwd": "/srv/notes",
            },
            "home": {"url": "https://home.example/mcp", "headers": {"Authorization": "Bearer b"}},
        },
    )
    files, home = config.servers
    assert (files.name, files.transport, files.command, files.args, files.cwd) == (
        "files",
        "stdio",
        "files-server",
        ("--root", "/notes"),
        "/srv/notes",
    )
    assert (files.timeout, files.connect_timeout, files.private, files.enabled) == (
        DEFAULT_TIMEOUT,
        DEFAULT_CONNECT_TIMEOUT,
        None,
        True,
    )
    assert (home.transport, home.url, dict(home.headers)) == (
        "http",
        "https://home.example/mcp",
        {"Authorization": "Bearer b"},
    )


def test_variables_are_read_from_the_environment(tmp_path) -> None:
    config = load(
        tmp_path,
        {"files": {"command": "${HOME_BIN}/files", "env": {"TOKEN": "${FILES_TOKEN}"}}},
        {"HOME_BIN": "/opt/bin", "FILES_TOKEN": "s3cret-token"},
    )
    assert config.servers[0].command == "/opt/bin/files"
    assert config.servers[0].env == {"TOKEN": "s3cret-token"}
    assert config.secrets == ("s3cret-token", "/opt/bin")


@pytest.mark.parametrize(
    ("servers", "words"),
    [
        ({"files": {"command": "x", "colour": "red"}}, "server 'files', key 'colour': unknown key"),
        ({"files": {"command": "x", "url": "http://a/"}}, "server 'files', key 'url': a server has either command"),
        ({"files": {"args": []}}, "server 'files', key 'command': a server needs command"),
        ({"bad name": {"command": "x"}}, "server 'bad name': a name is 1 to 64"),
        ({"files": {"command": "x", "timeout": "30"}}, "server 'files', key 'timeout': must be a number"),
        ({"files": {"command": "x", "timeout": 0}}, "server 'files', key 'timeout': must be more than 0"),
        ({"files": {"command": "x", "connect_timeout": True}}, "server 'files', key 'connect_timeout'"),
        ({"files": {"command": "x", "args": "a b"}}, "server 'files', key 'args': must be a list of strings"),
        ({"files": {"command": "x", "env": {"A": 1}}}, "server 'files', key 'env': must be an object of strings"),
        ({"files": {"command": "x", "headers": {}}}, "server 'files', key 'headers': does not apply to a stdio"),
        ({"web": {"url": "ftp://a/"}}, "server 'web', key 'url': must be an http"),
        (
            {"web": {"url": "http://a/", "private": "allowed"}},
            "server 'web', key 'private': a server reached over HTTP",
        ),
        ({"files": {"command": "x", "private": "yes"}}, "server 'files', key 'private': the only value"),
        (
            {"files": {"command": "x", "include": ["remember"]}},
            "server 'files', key 'include': 'remember' is the name of a built-in",
        ),
        ({"files": {"command": "x", "include": [""]}}, "server 'files', key 'include': a tool's name"),
        ({"files": {"command": "x", "enabled": "no"}}, "server 'files', key 'enabled': must be true or false"),
        ({"files": {"command": "${NOT_SET}"}}, "server 'files', key 'command': ${NOT_SET} is not set"),
        ([], "mcpServers must be an object"),
    ],
)
def test_a_mistake_is_one_line_naming_the_file_the_server_and_the_key(tmp_path, servers, words) -> None:
    with pytest.raises(McpConfigError) as caught:
        load(tmp_path, servers)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'mcp.json'}: ")
    assert words in message


def test_a_file_that_is_not_json_or_has_other_keys_is_one_line(tmp_path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {', encoding="utf-8")
    with pytest.raises(McpConfigError, match=r"mcp\.json: is not JSON \(line 1"):
        load_mcp_config(path, {})
    with pytest.raises(McpConfigError, match="unknown key 'tools'"):
        load(tmp_path, {}, tools={})
    with pytest.raises(McpConfigError, match="cannot be read"):
        load_mcp_config(tmp_path / "missing.json", {})


def test_a_secret_never_shows_in_an_error_or_a_repr(tmp_path) -> None:
    environ = {"TOKEN": "s3cret-token"}
    config = load(tmp_path, {"files": {"command": "x", "env": {"TOKEN": "${TOKEN}"}}}, environ)
    assert "s3cret-token" not in repr(config)
    with pytest.raises(McpConfigError) as caught:
        load(tmp_path, {"files": {"command": "x", "env": {"TOKEN": "${TOKEN}", "N": 3}}}, environ)
    assert "s3cret-token" not in str(caught.value)


def test_private_mode_is_allowed_only_for_a_stdio_server_marked_allowed_and_a_tool_its_include_names(tmp_path) -> None:
    config = load(
        tmp_path,
        {
            "named": {"command": "x", "private": "allowed", "include": ["read_note", "list_*"]},
            "unmarked": {"command": "x", "include": ["read_note"]},
            "everything": {"command": "x", "private": "allowed"},
            "excluded": {"command": "x", "private": "allowed", "include": ["read_note"], "exclude": ["read_*"]},
        },
    )
    named, unmarked, everything, excluded = config.servers
    assert named.private_allowed("read_note")
    assert not named.private_allowed("list_notes")  # a glob names no tool for private mode
    assert named.admits("list_notes")
    assert not unmarked.private_allowed("read_note")
    assert not everything.private_allowed("read_note")
    assert not excluded.private_allowed("read_note")


def test_include_and_exclude_take_names_and_globs(tmp_path) -> None:
    [server] = load(
        tmp_path, {"files": {"command": "x", "include": ["read_*", "echo"], "exclude": ["read_secret"]}}
    ).servers
    assert [t for t in ("read_note", "read_secret", "echo", "write_note") if server.admits(t)] == ["read_note", "echo"]


def test_an_http_server_is_never_offered_in_private_mode() -> None:
    # The file refuses "private": "allowed" on a url server; the rule holds even for one built without the file.
    server = ServerConfig("web", "http", url="http://127.0.0.1/mcp", include=("read_note",), private="allowed")
    assert not server.private_allowed("read_note")
