"""The command line end to end, in real subprocesses."""

from __future__ import annotations

import pytest

from core.privacy.secrets import PassphraseHash
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.proc import companion_env, run_companion

pytestmark = pytest.mark.wire


def test_piped_chat_answers_offline_one_reply_per_line_in_order(tmp_path):
    result = run_companion(["chat"], companion_env(tmp_path), stdin="hello\nhow are you\n")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2
    assert all("offline responder, not a language model" in line for line in lines)
    assert "1 visible message," in lines[0] and "3 visible messages" in lines[1]
    assert result.stderr == ""


def test_piped_chat_prints_the_model_servers_reply(tmp_path):
    with FakeOpenAIServer.run_in_thread() as server:
        server.reply_text("Hello from the model server.")
        env = companion_env(tmp_path, COMPANION_LLM_BASE_URL=server.base_url, COMPANION_LLM_MODEL="tiny")
        result = run_companion(["chat"], env, stdin="hello\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Hello from the model server."
    assert server.requests[0]["model"] == "tiny"


def test_chat_commands_work_in_the_terminal(tmp_path):
    result = run_companion(["chat"], companion_env(tmp_path), stdin="/help\n/mode\n")
    assert result.returncode == 0
    assert "/private PASSPHRASE [EXPIRY]" in result.stdout and "You are in normal mode." in result.stdout


def test_an_unreachable_model_server_gives_a_short_apology_and_loses_nothing(tmp_path):
    import sqlite3

    env = companion_env(tmp_path, COMPANION_LLM_BASE_URL="http://127.0.0.1:9/v1", COMPANION_LLM_TIMEOUT="2")
    result = run_companion(["chat"], env, stdin="keep this\n")
    assert result.returncode == 0
    assert "couldn't reach my language model" in result.stdout
    with sqlite3.connect(tmp_path / "companion.db") as db:
        assert db.execute("SELECT text FROM messages").fetchall() == [("keep this",)]


def test_run_with_nothing_configured_says_what_to_set(tmp_path):
    result = run_companion(["run"], companion_env(tmp_path))
    assert result.returncode == 2
    assert "COMPANION_TELEGRAM_TOKEN" in result.stderr and "COMPANION_DISCORD_TOKEN" in result.stderr
    assert "Traceback" not in result.stderr


def test_passphrase_prints_a_hash_that_verifies(tmp_path):
    result = run_companion(["passphrase"], companion_env(tmp_path), stdin="correct-horse\n")
    assert result.returncode == 0
    parsed = PassphraseHash.parse(result.stdout.strip())
    assert parsed.verify("correct-horse") and not parsed.verify("wrong")
    assert "correct-horse" not in result.stdout


def test_a_database_from_a_newer_version_refuses_to_start_with_one_line(tmp_path):
    import sqlite3

    env = companion_env(tmp_path)
    assert run_companion(["chat"], env, stdin="hi\n").returncode == 0
    with sqlite3.connect(tmp_path / "companion.db") as db:
        db.execute("INSERT INTO schema_migrations VALUES ('9999_future', 0)")
    result = run_companion(["chat"], env, stdin="hi\n")
    assert result.returncode == 2
    assert "9999_future" in result.stderr and "Traceback" not in result.stderr


GOOD_TELEGRAM_TOKEN = "123456789:AAEabcdefghijklmnopqrstuvwxyz0123456"


def _one_line_exit_2(result, variable: str) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("companion: ") and variable in lines[0], result.stderr
    assert result.stdout == ""
    return lines[0]


def _files_under(folder) -> dict:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("COMPANION_ALLOWED_USERS", "telegram:alice"),
        ("COMPANION_ALLOWED_USERS", "discord:12"),
        ("COMPANION_TELEGRAM_TOKEN", "123456789:AAEabcdefghijklmnop\nqrstuvwxyz0123456"),
        ("COMPANION_TELEGRAM_TOKEN", "AAEabcdefghijklmnopqrstuvwxyz0123456"),
        ("COMPANION_DISCORD_TOKEN", "not-a-discord-token"),
    ],
    ids=["telegram name", "short discord id", "token with a newline", "telegram token shape", "discord token shape"],
)
def test_each_bad_setting_gives_one_line_naming_it_exit_2_and_no_network_call(tmp_path, name, value):
    # No base URL is set: a network call would go to the real platform, and the test would hang or fail.
    result = run_companion(["run"], companion_env(tmp_path, **{name: value}))
    line = _one_line_exit_2(result, name)
    assert "abcdefghij" not in line and "not-a-discord" not in line  # a token is never quoted
    assert list(tmp_path.iterdir()) == []  # nothing created on disk


def test_a_database_file_that_is_not_sqlite_gives_one_line_and_is_left_alone(tmp_path):
    db = tmp_path / "companion.db"
    db.write_bytes(b"my notes, not a database\n" * 40)
    before = _files_under(tmp_path)
    for command in (["chat"], ["report"], ["run"]):
        _one_line_exit_2(run_companion(command, companion_env(tmp_path), stdin="hi\n"), "COMPANION_DB_PATH")
    assert _files_under(tmp_path) == before  # no lock file, no journal, not a byte changed


def test_a_damaged_sqlite_file_gives_one_line_naming_the_variable(tmp_path):
    # The header is SQLite's, the rest is not: SQLite itself refuses it while the store starts.
    (tmp_path / "companion.db").write_bytes(b"SQLite format 3\x00" + b"\xff" * 4080)
    line = _one_line_exit_2(run_companion(["chat"], companion_env(tmp_path), stdin="hi\n"), "COMPANION_DB_PATH")
    assert "Traceback" not in line


def test_a_database_folder_that_cannot_be_created_gives_one_line(tmp_path):
    (tmp_path / "data").write_text("a file where the folder should be")
    env = companion_env(tmp_path, COMPANION_DB_PATH=str(tmp_path / "data" / "companion.db"))
    before = _files_under(tmp_path)
    _one_line_exit_2(run_companion(["chat"], env, stdin="hi\n", cwd=tmp_path), "COMPANION_DB_PATH")
    assert _files_under(tmp_path) == before


def test_a_database_folder_without_write_permission_gives_one_line(tmp_path):
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes into any folder; the case above covers the path")
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        env = companion_env(tmp_path, COMPANION_DB_PATH=str(folder / "companion.db"))
        _one_line_exit_2(run_companion(["chat"], env, stdin="hi\n", cwd=tmp_path), "COMPANION_DB_PATH")
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o700)
