"""`companion doctor`'s MCP section against real servers: reachable or why not, tools, private mode, no secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.doctor import FAIL, INFO, OK, WARN, Report, mcp_section
from tests.helpers.mcp_servers import free_port, http_server, stdio_server, write_config
from tests.helpers.proc import companion_env, run_companion

SECRET = "s3cret-token-value"


async def section_for(tmp_path: Path, servers: dict, environ: dict[str, str] | None = None) -> tuple[list[str], str]:
    section, secrets = await mcp_section(write_config(tmp_path / "mcp.json", servers), environ or {})
    assert section is not None
    return [f"{line.status} {line.text}" for line in section.lines], Report([section], secrets).render()


async def test_doctor_lists_each_server_its_tools_after_the_filter_and_those_private_mode_is_offered(tmp_path) -> None:
    with http_server() as url:
        lines, _ = await section_for(
            tmp_path,
            {
                "notes": stdio_server(include=["echo", "big"], private="allowed"),
                "files": stdio_server("--only", "fail,spawn", include=["f*"], private="allowed"),
                "web": {"url": url, "include": ["hang"]},
                "off": stdio_server(enabled=False),
            },
        )
    assert lines[0].startswith(f"{OK} notes (stdio): reachable, one tools/list in ")
    assert lines[0].endswith("s; 2 tools after the filter: echo, big")
    assert lines[1] == f"{INFO} notes: private mode is offered echo, big (the owner named them)"
    assert lines[2].endswith("1 tool after the filter: fail")
    assert lines[3] == f"{INFO} files: private mode is offered none of its tools"  # a glob names no tool for it
    assert lines[4].startswith(f"{OK} web (streamable HTTP): reachable") and lines[4].endswith(": hang")
    assert lines[5] == f"{INFO} web: private mode is offered none of its tools"
    assert lines[6] == f"{INFO} off (stdio): disabled in the configuration (enabled: false)"


async def test_doctor_says_why_a_server_is_not_reachable_and_what_is_left_out(tmp_path) -> None:
    lines, _ = await section_for(
        tmp_path,
        {
            "missing": {"command": str(tmp_path / "nothing-here")},
            "web": {"url": f"http://127.0.0.1:{free_port()}/mcp", "connect_timeout": 5},
            "clash": stdio_server("--only", "echo", "--alias", "recall"),
        },
    )
    assert lines[0] == f"{FAIL} missing (stdio): not reachable: its command was not found"
    assert (
        lines[1]
        == f"{FAIL} web (streamable HTTP): not reachable: it cannot be reached (connection refused or no such host)"
    )
    assert (
        f"{WARN} clash: the tool recall is left out: its name is taken by a built-in tool or an earlier server's tool"
        in lines
    )


async def test_doctor_names_a_bad_file_in_one_line(tmp_path) -> None:
    lines, _ = await section_for(tmp_path, {"notes": {"command": "x", "colour": "red"}})
    assert lines == [
        f"{FAIL} {tmp_path / 'mcp.json'}: server 'notes', key 'colour': unknown key: fix the file, or unset COMPANION_MCP_CONFIG"
    ]


async def test_doctor_never_shows_a_secret_of_the_mcp_file(tmp_path) -> None:
    # The server fails to start with the secret in its command line too: the doctor's words may
    # quote a path, never a value of env or headers.
    _, shown = await section_for(
        tmp_path,
        {
            "notes": stdio_server(env={"TOKEN": "${TOKEN}"}),
            "gone": {"command": str(tmp_path / SECRET), "env": {"KEY": SECRET}},
            "web": {"url": f"http://127.0.0.1:{free_port()}/mcp", "headers": {"Authorization": f"Bearer {SECRET}"}},
        },
        {"TOKEN": SECRET},
    )
    assert "notes (stdio): reachable" in shown
    assert SECRET not in shown


@pytest.mark.wire
def test_companion_doctor_has_the_mcp_section_and_no_secret(tmp_path) -> None:
    config = write_config(
        tmp_path / "mcp.json", {"notes": stdio_server("--only", "echo", env={"NOTES_TOKEN": "${NOTES_TOKEN}"})}
    )
    done = run_companion(["doctor"], companion_env(tmp_path, COMPANION_MCP_CONFIG=str(config), NOTES_TOKEN=SECRET))
    assert f"MCP servers (COMPANION_MCP_CONFIG={config})" in done.stdout
    assert "notes (stdio): reachable, one tools/list in " in done.stdout
    assert SECRET not in done.stdout + done.stderr
