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
    monkeypatch.setenv("COMPANION_ALLOWED_USERS", "telegram:123456, discord:987654321012345678")
    assert load_settings().allowed_accounts == {"telegram:123456", "discord:987654321012345678"}


def test_owner_is_a_comma_separated_list_of_platform_accounts(monkeypatch):
    monkeypatch.setenv("COMPANION_OWNER", "telegram:123456, discord:987654321012345678")
    assert load_settings().owner_accounts == {"telegram:123456", "discord:987654321012345678"}


def test_dotenv_file_is_read(tmp_path):
    (tmp_path / ".env").write_text("COMPANION_LLM_MODEL=from-dotenv\nCOMPANION_TIMEZONE=Europe/Berlin\n")
    settings = load_settings()
    assert settings.llm_model == "from-dotenv" and settings.timezone == "Europe/Berlin"


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("COMPANION_HTTP_PORT", "eighty", "a port number from 1 to 65535, or 0 or off"),
        ("COMPANION_HTTP_PORT", "70000", "a port number from 1 to 65535, or 0 or off"),
        ("COMPANION_HTTP_HOST", "my host", "not an IP address or host name"),
        ("COMPANION_HTTP_ALLOWED_HOSTS", "companion.example.com,http://x", "not a host name"),
        ("COMPANION_HTTP_ALLOWED_HOSTS", "localhost:99999", "not a host name"),
        ("COMPANION_TIMEZONE", "Mars/Olympus", "not a known IANA timezone"),
        ("COMPANION_QUIET_HOURS", "late", "22:00-08:00"),
        ("COMPANION_ALLOWED_USERS", "telegram:1,bob", "'bob' is not platform:user_id"),
        ("COMPANION_LOG_LEVEL", "LOUD", "DEBUG, INFO"),
        ("COMPANION_LLM_BASE_URL", "localhost:11434", "http"),
        ("COMPANION_PRIVATE_PASSPHRASE_HASH", "hunter2", "scrypt$"),
        ("COMPANION_PRIVATE_DEFAULT_EXPIRY", "soon", "45s, 30m, 24h, 7d or never"),
        ("COMPANION_ALLOWED_USERS", "telegram:alice", "positive number"),
        ("COMPANION_ALLOWED_USERS", "telegram:123,discord:12", "17 to 20 digits"),
        ("COMPANION_TELEGRAM_TOKEN", "123456789:AAE-short", "@BotFather"),
        ("COMPANION_TELEGRAM_TOKEN", "123456789:AAEabcdefghij\nklmnopqrstuvwxyz0123456", "@BotFather"),
        ("COMPANION_TELEGRAM_TOKEN", "bot123456789:AAEabcdefghijklmnopqrstuvwxyz0123456", "@BotFather"),
        ("COMPANION_DISCORD_TOKEN", "just-one-part-of-a-discord-token", "three parts"),
        ("COMPANION_EXPIRY_SWEEP_SECONDS", "120", "less than or equal to 60"),
        ("COMPANION_CAPTURE_SECONDS", "0", "greater than 0"),
        ("COMPANION_OUTBOX_PRUNE_SECONDS", "often", "number"),
        ("COMPANION_DISCORD_OUTAGE_SECONDS", "-1", "greater than or equal to 0"),
        ("COMPANION_DISCORD_GUILD_READY_SECONDS", "-1", "greater than or equal to 0"),
        ("COMPANION_PROACTIVE_TICK_SECONDS", "0", "greater than 0"),
        ("COMPANION_NUDGES_PER_DAY", "many", "integer"),
        ("COMPANION_NUDGES_PER_DAY", "25", "less than or equal to 24"),
        ("COMPANION_NUDGE_COOLDOWN_MINUTES", "-5", "greater than or equal to 0"),
        ("COMPANION_OWNER", "telegram:1,bob", "'bob' is not platform:user_id"),
        ("COMPANION_OWNER", "discord:12", "17 to 20 digits"),
        ("COMPANION_OWNER", "web:abc", "not a telegram or discord account"),
    ],
)
def test_a_bad_value_names_the_variable_and_what_is_wrong(monkeypatch, name, value, words):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    line = str(info.value)
    assert line.startswith(f"{name}: ") and words in line and "\n" not in line


@pytest.mark.wire
def test_a_bad_value_stops_start_up_with_exit_code_2_and_no_traceback(tmp_path):
    env = companion_env(tmp_path, COMPANION_HTTP_PORT="eighty")
    result = run_companion(["chat"], env, stdin="hello\n")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "COMPANION_HTTP_PORT" in lines[0] and "Traceback" not in result.stderr


def test_a_token_is_stripped_of_a_pasted_newline_before_any_network_call(monkeypatch):
    token = "123456789:AAEabcdefghijklmnopqrstuvwxyz0123456"
    monkeypatch.setenv("COMPANION_TELEGRAM_TOKEN", f"  {token}\n")
    monkeypatch.setenv("COMPANION_DISCORD_TOKEN", "MTIzNDU2Nzg5MDEyMzQ1Njc4.GaBcDe.abcdefghijklmnopqrstuvwxyz0123\r\n")
    settings = load_settings()
    assert settings.telegram_token.get_secret_value() == token
    assert settings.discord_token.get_secret_value().endswith("0123")


def test_a_token_of_the_wrong_shape_is_never_quoted(monkeypatch):
    monkeypatch.setenv("COMPANION_TELEGRAM_TOKEN", "123456789:TOKEN-CANARY")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "TOKEN-CANARY" not in str(info.value)


def test_a_server_of_ones_own_may_issue_its_own_ids_and_token_shapes(monkeypatch):
    # The fake servers of the gateway tests (and a self-hosted Bot API server) do; a name is never an id.
    monkeypatch.setenv("COMPANION_TELEGRAM_BASE_URL", "http://127.0.0.1:9/bot")
    monkeypatch.setenv("COMPANION_DISCORD_API_BASE", "http://127.0.0.1:9/api")
    monkeypatch.setenv("COMPANION_TELEGRAM_TOKEN", "123456:TEST-token")
    monkeypatch.setenv("COMPANION_DISCORD_TOKEN", "fake-discord-token")
    monkeypatch.setenv("COMPANION_ALLOWED_USERS", "telegram:7,discord:111")
    assert load_settings().allowed_accounts == {"telegram:7", "discord:111"}
    monkeypatch.setenv("COMPANION_ALLOWED_USERS", "telegram:alice")
    with pytest.raises(ConfigError, match=r"^COMPANION_ALLOWED_USERS: "):
        load_settings()


def test_against_a_server_of_ones_own_tokens_are_still_stripped_before_any_network_call(monkeypatch):
    monkeypatch.setenv("COMPANION_TELEGRAM_BASE_URL", "http://127.0.0.1:9/bot")
    monkeypatch.setenv("COMPANION_DISCORD_API_BASE", "http://127.0.0.1:9/api")
    monkeypatch.setenv("COMPANION_TELEGRAM_TOKEN", " 123456:TEST-token\n")
    monkeypatch.setenv("COMPANION_DISCORD_TOKEN", "\tfake-discord-token\r\n")
    settings = load_settings()
    assert settings.telegram_token.get_secret_value() == "123456:TEST-token"
    assert settings.discord_token.get_secret_value() == "fake-discord-token"


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("COMPANION_TELEGRAM_TOKEN", "not a token", "@BotFather"),
        ("COMPANION_TELEGRAM_TOKEN", "123456:TEST token", "@BotFather"),
        ("COMPANION_TELEGRAM_TOKEN", "TEST-token", "@BotFather"),
        ("COMPANION_DISCORD_TOKEN", "fake discord\ntoken", "three parts"),
    ],
)
def test_against_a_server_of_ones_own_a_malformed_token_is_still_one_line(monkeypatch, name, value, words):
    monkeypatch.setenv("COMPANION_TELEGRAM_BASE_URL", "http://127.0.0.1:9/bot")
    monkeypatch.setenv("COMPANION_DISCORD_API_BASE", "http://127.0.0.1:9/api")
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    line = str(info.value)
    assert line.startswith(f"{name}: ") and words in line and "\n" not in line
    assert value not in line


def test_an_llm_api_key_is_stripped_of_a_pasted_newline(monkeypatch):
    # Sent with its newline, the key made an illegal header: "couldn't reach my language model".
    monkeypatch.setenv("COMPANION_LLM_BASE_URL", " http://127.0.0.1:8080/v1 ")
    monkeypatch.setenv("COMPANION_LLM_API_KEY", "  sk-test-key\n")
    settings = load_settings()
    assert settings.llm_base_url == "http://127.0.0.1:8080/v1"
    assert settings.llm_api_key.get_secret_value() == "sk-test-key"


def test_an_llm_api_key_with_whitespace_inside_is_one_line_that_does_not_quote_it(monkeypatch):
    monkeypatch.setenv("COMPANION_LLM_BASE_URL", "http://127.0.0.1:8080/v1")
    monkeypatch.setenv("COMPANION_LLM_API_KEY", "sk-KEY-CANARY\nsk-second-line")
    with pytest.raises(ConfigError) as info:
        load_settings()
    line = str(info.value)
    assert line.startswith("COMPANION_LLM_API_KEY: ") and "\n" not in line
    assert "CANARY" not in line and "second-line" not in line


@pytest.mark.wire
def test_a_malformed_token_with_a_custom_base_url_exits_2_in_one_line_before_any_network_call(tmp_path):
    # The base URLs point at a closed port: a network call would fail differently (and slowly).
    env = companion_env(
        tmp_path,
        COMPANION_TELEGRAM_BASE_URL="http://127.0.0.1:9/bot",
        COMPANION_TELEGRAM_TOKEN="not a token",
        COMPANION_LLM_BASE_URL="http://127.0.0.1:9/v1",
    )
    result = run_companion(["run"], env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("companion: COMPANION_TELEGRAM_TOKEN: ")
        and "Traceback" not in result.stderr
    )
    assert "not a token" not in result.stderr


@pytest.mark.parametrize("value", ["0", "off", "OFF"])
def test_the_http_service_is_turned_off_by_port_0_or_off(monkeypatch, value):
    monkeypatch.setenv("COMPANION_HTTP_PORT", value)
    assert load_settings().http_port is None


def test_the_http_service_listens_on_loopback_port_8765_by_default():
    settings = load_settings()
    assert (settings.http_host, settings.http_port, settings.http_allowed_host_set) == ("127.0.0.1", 8765, frozenset())


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "companion.example.com"])  # noqa: S104 - under test
def test_listening_beyond_loopback_needs_the_allowed_hosts(monkeypatch, host):
    monkeypatch.setenv("COMPANION_HTTP_HOST", host)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value).startswith("COMPANION_HTTP_ALLOWED_HOSTS: must be set when COMPANION_HTTP_HOST")
    monkeypatch.setenv("COMPANION_HTTP_ALLOWED_HOSTS", "companion.example.com, localhost")
    assert load_settings().http_allowed_host_set == {"companion.example.com", "localhost"}
    monkeypatch.setenv("COMPANION_HTTP_ALLOWED_HOSTS", "")
    monkeypatch.setenv("COMPANION_HTTP_PORT", "off")
    assert load_settings().http_port is None  # nothing listens: nothing to allow


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_a_loopback_address_needs_no_allowed_hosts(monkeypatch, host):
    monkeypatch.setenv("COMPANION_HTTP_HOST", host)
    assert load_settings().http_host == host
