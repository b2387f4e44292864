"""Settings: names from DESIGN.md, .env support, one clear line for a bad value."""

from __future__ import annotations

import pytest

from bot.settings import ConfigError, load_settings
from tests.helpers.proc import companion_env, run_companion


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    import os

    for key in list(os.environ):
        if key.startswith("COMPANION_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def test_defaults_need_no_configuration():
    settings = load_settings()
    assert str(settings.db_path) == "data/companion.db"
    assert settings.llm_base_url is None and settings.allowed_accounts == frozenset()


def test_allowed_users_are_a_comma_separated_list_of_platform_accounts(monkeypatch):
    monkeypatch.setenv("COMPANION_ALLOWED_USERS", "telegram:123456, discord:987654321")
    assert load_settings().allowed_accounts == {"telegram:123456", "discord:987654321"}


def test_dotenv_file_is_read(tmp_path):
    (tmp_path / ".env").write_text("COMPANION_LLM_MODEL=from-dotenv\nCOMPANION_TIMEZONE=Europe/Berlin\n")
    settings = load_settings()
    assert settings.llm_model == "from-dotenv" and settings.timezone == "Europe/Berlin"


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("COMPANION_HTTP_PORT", "eighty", "integer"),
        ("COMPANION_HTTP_PORT", "70000", "less than or equal"),
        ("COMPANION_TIMEZONE", "Mars/Olympus", "not a known IANA timezone"),
        ("COMPANION_QUIET_HOURS", "late", "22:00-08:00"),
        ("COMPANION_ALLOWED_USERS", "telegram:1,bob", "'bob' is not platform:user_id"),
        ("COMPANION_LOG_LEVEL", "LOUD", "DEBUG, INFO"),
        ("COMPANION_LLM_BASE_URL", "localhost:11434", "http"),
        ("COMPANION_PRIVATE_PASSPHRASE_HASH", "hunter2", "scrypt$"),
        ("COMPANION_PRIVATE_DEFAULT_EXPIRY", "soon", "not an expiry"),
    ],
)
def test_a_bad_value_names_the_variable_and_what_is_wrong(monkeypatch, name, value, words):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    line = str(info.value)
    assert line.startswith(f"{name}: ") and words in line and "\n" not in line


def test_a_bad_value_stops_start_up_with_exit_code_2_and_no_traceback(tmp_path):
    env = companion_env(tmp_path, COMPANION_HTTP_PORT="eighty")
    result = run_companion(["chat"], env, stdin="hello\n")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "COMPANION_HTTP_PORT" in lines[0] and "Traceback" not in result.stderr
