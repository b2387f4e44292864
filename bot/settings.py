"""Configuration from the environment (prefix COMPANION_) and `.env`; bad values stop start-up in one line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.values.addresses import is_host_name, is_loopback, split_host_port

_ACCOUNT = re.compile(r"^(telegram|discord|web):[A-Za-z0-9_.-]{1,64}$")
# What each platform's ids look like: a Telegram user id is a positive integer, a Discord id a
# snowflake of 17 to 20 digits. Checked where the platform is the real one (see `_platform_shapes`).
_IDS = {
    "telegram": (
        re.compile(r"^[1-9]\d{0,15}$"),
        "a Telegram user id is a positive number, for example telegram:123456789",
    ),
    "discord": (
        re.compile(r"^[1-9]\d{16,19}$"),
        ("a Discord user id is a snowflake of 17 to 20 digits, for example discord:123456789012345678"),
    ),
}
# Token shapes: Telegram `<bot id>:<35 characters>`, Discord three dot-separated base64url parts.
_TELEGRAM_TOKEN = re.compile(r"^\d{5,16}:[A-Za-z0-9_-]{30,50}$")
_DISCORD_TOKEN = re.compile(r"^[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{20,}$")
# A self-hosted Bot API server or a test double may issue other shapes; these are the least.
_TELEGRAM_TOKEN_ANY = re.compile(r"^\d+:\S+$")
_DISCORD_TOKEN_ANY = re.compile(r"^\S+$")
# An LLM API key has no one shape (sk-..., a self-hosted server's own word); it is at least one header word.
_API_KEY = re.compile(r"^[\x21-\x7e]+$")
# Telegram's rule for setWebhook's secret_token; and a webhook path the HTTP service can route as it is.
_WEBHOOK_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
_WEBHOOK_PATH = re.compile(r"(/[A-Za-z0-9._~-]+)+/?")
# The first segments of the HTTP service's own routes (adapters/web/), which a webhook path must not take.
_SERVICE_PATHS = frozenset(
    {"context", "events", "livez", "login", "login.js", "logout", "memory", "metrics", "normal", "privacy"}
    | {"private", "readyz", "send", "static"}
)
_QUIET = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$")


SHARED_NEEDS_POSTGRES = (
    "COMPANION_SHARED_DATABASE: needs COMPANION_DATABASE_URL=postgresql://... (several processes cannot share "
    "an SQLite file)"
)


class ConfigError(Exception):
    """One line naming the variable and what is wrong with it."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="COMPANION_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        validate_default=True,
    )

    db_path: Path = Path("data/companion.db")
    # PostgreSQL instead of the SQLite file, and the folder of its private intervals' keys (issue 31, in
    # progress: checked here, not used yet). Checked with urllib alone: the driver is an optional extra.
    database_url: SecretStr | None = None
    key_dir: Path = Path("data/keys")
    # Several `companion run` processes on one PostgreSQL database (issue 33; docs/operations.md): each
    # registers, claims the chats it answers, and recovers only what no live process holds. Unset: one
    # `companion run` per database, as ever.
    shared_database: bool = False
    log_level: str = "WARNING"
    timezone: str = "UTC"
    quiet_hours: str | None = "22:00-08:00"
    # The HTTP service of `companion run` (web chat, sign-in, probes, metrics): where it listens
    # (None: off), and the Host names it answers to (unset: the bound host and localhost).
    http_host: str = "127.0.0.1"
    http_port: int | None = 8765
    http_allowed_hosts: str = ""

    llm_base_url: str | None = None
    llm_api_key: SecretStr | None = None
    llm_model: str = "default"
    llm_timeout: float = Field(60.0, gt=0, le=600)
    llm_max_tokens: int = Field(1024, ge=16, le=131072)
    # Media: images go to the model as image input (a vision model); voice notes and audio are
    # transcribed by an OpenAI-compatible /audio/transcriptions server when its URL is set.
    llm_vision: bool = False
    # Offer the model tools (memory, goals, follow-ups). false: a model server that cannot call them
    # (`companion doctor` says so); memory then works through /remember, /recall and /forget.
    llm_tools: bool = True
    stt_base_url: str | None = None
    stt_model: str = "whisper-1"
    stt_api_key: SecretStr | None = None
    # The outbox: how often due deliveries are sent again, and the backoff between tries.
    outbox_tick_seconds: float = Field(5.0, gt=0, le=3600)
    outbox_retry_seconds: float = Field(2.0, gt=0, le=3600)
    outbox_max_retry_seconds: float = Field(300.0, gt=0, le=86400)
    outbox_prune_seconds: float = Field(3600.0, gt=0, le=86400)
    # The other scheduled jobs. The expiry sweep runs at least every minute: PRIVACY.md promises it.
    expiry_sweep_seconds: float = Field(60.0, gt=0, le=60)
    capture_seconds: float = Field(300.0, gt=0, le=86400)
    # Reminders and nudges: the triage tick, and the defaults of the manners (each person may
    # change theirs with /nudges, /quiet and /timezone).
    proactive_tick_seconds: float = Field(60.0, gt=0, le=3600)
    nudges_per_day: int = Field(2, ge=0, le=24)
    nudge_cooldown_minutes: float = Field(240.0, ge=0, le=7 * 24 * 60)
    # No nudge this soon after a person's last message, none after this many unanswered ones
    # (until they write), and when each kind of nudge falls due.
    nudge_active_minutes: float = Field(30.0, ge=0, le=7 * 24 * 60)
    nudge_backoff_after: int = Field(2, ge=1, le=100)
    nudge_watch_after_minutes: float = Field(60.0, ge=0, le=30 * 24 * 60)
    nudge_goal_every_hours: float = Field(72.0, gt=0, le=365 * 24)
    nudge_checkin_after_hours: float = Field(72.0, gt=0, le=365 * 24)

    telegram_token: SecretStr | None = None
    telegram_base_url: str | None = None
    # A webhook instead of long polling (issue 33): the public HTTPS URL Telegram delivers to (a reverse
    # proxy with TLS in front of the HTTP service, which serves the URL's path), and its secret token.
    telegram_webhook_url: str | None = None
    telegram_webhook_secret: SecretStr | None = None
    discord_token: SecretStr | None = None
    discord_api_base: str | None = None
    discord_gateway_url: str | None = None
    # How long the Discord gateway may stay down while discord.py reconnects before the process
    # exits 1 for its supervisor to start it again; 0: discord.py reconnects for ever.
    discord_outage_seconds: float = Field(600.0, ge=0, le=86400)
    # After Discord's READY, how long discord.py waits for one more guild (GUILD_CREATE) before the
    # platform counts as started (discord.py's own default).
    discord_guild_ready_seconds: float = Field(2.0, ge=0, le=60)
    allowed_users: str = ""
    # Accounts that are one person with the terminal's owner from start-up (and so allowed too).
    owner: str = ""

    persona: str | None = None
    persona_file: Path | None = None
    private_persona: str | None = None
    private_persona_file: Path | None = None
    private_passphrase_hash: str | None = None
    private_default_expiry: str = "24h"
    private_idle_minutes: float = Field(30.0, ge=0, le=7 * 24 * 60)
    context_tokens: int = Field(3000, ge=256, le=1_000_000)
    allow_private_export: bool = False
    transition: Literal["constant", "generated"] = "constant"
    artifact_retention_days: float = Field(30.0, ge=0, le=3650)
    backup_retention_days: float = Field(14.0, ge=0, le=3650)
    # Messages of one chat this close together are answered in one turn (issue 15); 0: each alone.
    burst_seconds: float = Field(1.5, ge=0, le=60)
    # A stop (SIGTERM) lets the turns in flight finish this long, then flushes pending deliveries
    # briefly, then closes connections: under Kubernetes' 30 s default grace (docs/operations.md).
    stop_grace: float = Field(25.0, ge=0, le=600)
    # A JSON file of MCP servers (the common `mcpServers` shape) whose tools the model is offered in
    # normal mode (issue 32; adapters/mcp/). Unset: none, and the `mcp` SDK is never imported.
    mcp_config: Path | None = None
    # Replies are shown while the model writes them, one edit at most this often (issue 24);
    # 0 or `off`: each reply is sent whole once written.
    stream_edit_seconds: float | None = Field(1.0, ge=0.2, le=60)

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        value = value.upper()
        if value not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"'{value}' is not a known IANA timezone (for example Europe/Berlin or UTC)") from None
        return value

    @field_validator("quiet_hours")
    @classmethod
    def _quiet_hours(cls, value: str | None) -> str | None:
        if value is None or value.strip().lower() in {"", "off", "none"}:
            return None
        if not _QUIET.match(value.strip()):
            raise ValueError("must look like 22:00-08:00 (24-hour HH:MM-HH:MM), or 'off'")
        return value.strip()

    @field_validator("http_port", mode="before")
    @classmethod
    def _http_port(cls, value: object) -> object:
        """0 or `off` turns the service off (None); otherwise a port to listen on."""
        if value is None:
            return None
        text = str(value).strip().lower()
        if text in {"0", "off", "none", "false"}:
            return None
        if not text.isdigit() or not 1 <= int(text) <= 65535:
            raise ValueError("must be a port number from 1 to 65535, or 0 or off to turn the service off")
        return int(text)

    @field_validator("stream_edit_seconds", mode="before")
    @classmethod
    def _stream_edit_seconds(cls, value: object) -> object:
        """0 or `off` turns streaming off (None); otherwise seconds between edits (0.2 to 60)."""
        if value is None:
            return None
        text = str(value).strip().lower()
        if text in {"0", "off", "none", "false"}:
            return None
        try:
            return float(text)
        except ValueError:
            raise ValueError(
                "must be seconds between edits (for example 1.0), or 0 or off to send replies whole"
            ) from None

    @field_validator("http_host")
    @classmethod
    def _http_host(cls, value: str) -> str:
        value = value.strip()
        if not is_host_name(value):
            raise ValueError(
                f"'{value}' is not an IP address or host name to listen on (for example 127.0.0.1, or 0.0.0.0 for all)"
            )
        return value

    @field_validator("http_allowed_hosts")
    @classmethod
    def _http_allowed_hosts(cls, value: str) -> str:
        for item in filter(None, (part.strip() for part in value.split(","))):
            name, port = split_host_port(item)
            if name is None or not is_host_name(name) or (port is not None and not 1 <= port <= 65535):
                raise ValueError(
                    f"'{item}' is not a host name or address, with an optional :port "
                    "(for example companion.example.com,localhost)"
                )
        return value

    @model_validator(mode="after")
    def _http_exposed(self) -> Settings:
        """Beyond loopback, the Host names must be said: a DNS-rebinding page would otherwise reach it."""
        if self.http_port is not None and not self.http_allowed_host_set and not is_loopback(self.http_host):
            raise ValueError(
                f"COMPANION_HTTP_ALLOWED_HOSTS: must be set when COMPANION_HTTP_HOST ({self.http_host}) is not a "
                "loopback address: the host names the web service answers to, such as companion.example.com"
            )
        return self

    @field_validator("llm_base_url", "telegram_base_url", "discord_api_base", "discord_gateway_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if not re.match(r"^(https?|wss?)://[^\s/]+", value):
            raise ValueError("must be an http(s):// or ws(s):// URL")
        return value

    @field_validator("database_url", mode="before")
    @classmethod
    def _database_url(cls, value: object) -> object:
        """A postgresql:// or postgres:// URL; the message never shows it (it may hold a password)."""
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if not isinstance(value, str) or not value.strip():
            return None
        from urllib.parse import urlsplit

        words = (
            "must be a PostgreSQL URL, such as postgresql://user:password@host:5432/database (the value is not shown)"
        )
        try:
            parts = urlsplit(value.strip())
            parts.port  # noqa: B018 - parsing the port is the check
        except ValueError:
            raise ValueError(words) from None
        if (
            parts.scheme not in {"postgresql", "postgres"}
            or "://" not in value
            or any(c.isspace() for c in value.strip())
        ):
            raise ValueError(words)
        return value.strip()

    @field_validator("telegram_webhook_url")
    @classmethod
    def _webhook_url(cls, value: str | None) -> str | None:
        """An https:// URL with a host and a path of its own (the route the HTTP service serves)."""
        if value is None or not value.strip():
            return None
        from urllib.parse import urlsplit

        value = value.strip()
        example = "such as https://companion.example.com/telegram/webhook"
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - parsing the port is the check
        except ValueError:
            raise ValueError(f"must be a public https:// URL, {example}") from None
        if parts.scheme != "https" or not parts.hostname or any(c.isspace() for c in value):
            raise ValueError(f"must be a public https:// URL (Telegram delivers to HTTPS only), {example}")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError(f"must be a URL without user, query or fragment, {example}")
        if parts.path in ("", "/") or not _WEBHOOK_PATH.fullmatch(parts.path):
            raise ValueError(f"must have a path of its own (letters, digits, / - _ .), {example}")
        if parts.path.strip("/").split("/")[0] in _SERVICE_PATHS:
            raise ValueError(f"its path {parts.path} is one of the HTTP service's own pages; choose another, {example}")
        return value

    @field_validator("telegram_webhook_secret", mode="before")
    @classmethod
    def _webhook_secret(cls, value: object) -> object:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, str):
            value = value.strip() or None
            if value is not None and not _WEBHOOK_SECRET.fullmatch(value):
                raise ValueError("must be 1 to 256 characters of A-Z, a-z, 0-9, _ and - (Telegram's rule; not shown)")
        return value

    @model_validator(mode="after")
    def _webhook(self) -> Settings:
        """A webhook needs its secret, a bot token, and the HTTP service that serves its route."""
        if self.telegram_webhook_url is None:
            return self
        if self.telegram_webhook_secret is None:
            raise ValueError(
                "COMPANION_TELEGRAM_WEBHOOK_SECRET: must be set with COMPANION_TELEGRAM_WEBHOOK_URL: 1 to 256 "
                "characters of A-Z, a-z, 0-9, _ and -, which Telegram sends back with every delivery"
            )
        if self.telegram_token is None:
            raise ValueError(
                "COMPANION_TELEGRAM_WEBHOOK_URL: is set without COMPANION_TELEGRAM_TOKEN; set the bot token"
            )
        if self.http_port is None:
            raise ValueError(
                "COMPANION_TELEGRAM_WEBHOOK_URL: the webhook is served by the HTTP service, which is off; set "
                "COMPANION_HTTP_PORT (the default is 8765) and put the reverse proxy in front of it"
            )
        return self

    @property
    def telegram_webhook_path(self) -> str | None:
        """The path the HTTP service serves the webhook on: COMPANION_TELEGRAM_WEBHOOK_URL's."""
        if self.telegram_webhook_url is None:
            return None
        from urllib.parse import urlsplit

        return urlsplit(self.telegram_webhook_url).path

    @property
    def telegram_webhook_host(self) -> str | None:
        """The webhook URL's host name: the Host header Telegram sends through the proxy."""
        if self.telegram_webhook_url is None:
            return None
        from urllib.parse import urlsplit

        return urlsplit(self.telegram_webhook_url).hostname

    @field_validator("stt_base_url")
    @classmethod
    def _stt_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not re.match(r"^https?://[^\s/]+", value.strip()):
            raise ValueError("must be an http(s):// URL, such as http://127.0.0.1:8000/v1")
        return value.strip()

    @field_validator("stt_api_key", mode="before")
    @classmethod
    def _stt_api_key(cls, value: object) -> object:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, str):
            value = value.strip() or None
            if value is not None and not _API_KEY.match(value):
                raise ValueError("must be one word of printable ASCII, without spaces or line breaks (not shown)")
        return value

    @field_validator("allowed_users", "owner")
    @classmethod
    def _allowed_users(cls, value: str) -> str:
        for item in filter(None, (part.strip() for part in value.split(","))):
            if not _ACCOUNT.match(item):
                raise ValueError(f"'{item}' is not platform:user_id (for example telegram:123456,discord:987654321)")
        return value

    @field_validator("telegram_token", "discord_token", "llm_api_key", mode="before")
    @classmethod
    def _token_stripped(cls, value: object) -> object:
        # A token pasted with a trailing newline or space would be blamed on the network.
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, str):
            value = value.strip()
            return value or None
        return value

    @field_validator("private_default_expiry")
    @classmethod
    def _expiry(cls, value: str) -> str:
        from core.values.durations import parse_expiry

        parse_expiry(value)
        return value

    @field_validator("private_passphrase_hash")
    @classmethod
    def _passphrase_hash(cls, value: str | None) -> str | None:
        from core.privacy.secrets import PassphraseHash

        if value is None or not value.strip():
            return None
        PassphraseHash.parse(value)
        return value.strip()

    @model_validator(mode="after")
    def _platform_shapes(self) -> Settings:
        """Ids and tokens checked before any network call. Against a server of one's own
        (COMPANION_TELEGRAM_BASE_URL, COMPANION_DISCORD_API_BASE) only the least shape is
        required: such a server may issue its own ids and tokens. No message quotes a token."""
        custom = {"telegram": self.telegram_base_url is not None, "discord": self.discord_api_base is not None}
        listed = [("COMPANION_ALLOWED_USERS", item) for item in sorted(self.allowed_accounts)]
        listed += [("COMPANION_OWNER", item) for item in sorted(self.owner_accounts)]
        for variable, item in listed:
            platform, _, user_id = item.partition(":")
            shape, words = _IDS.get(platform, (None, ""))
            if shape is None:
                if variable == "COMPANION_OWNER":
                    raise ValueError(f"COMPANION_OWNER: '{item}' is not a telegram or discord account")
                continue
            if not (user_id.isascii() and user_id.isdigit() and int(user_id) > 0) or (
                not custom[platform] and not shape.match(user_id)
            ):
                raise ValueError(f"{variable}: '{item}' is not a {platform} account; {words}")
        checks = (
            (
                "telegram_token",
                _TELEGRAM_TOKEN_ANY if custom["telegram"] else _TELEGRAM_TOKEN,
                (
                    "must look like 123456789:AAE... (the bot id, a colon, about 35 letters, digits, - and _), "
                    "as @BotFather gives it"
                ),
            ),
            (
                "discord_token",
                _DISCORD_TOKEN_ANY if custom["discord"] else _DISCORD_TOKEN,
                "must be three parts separated by dots, as the Discord developer portal gives it",
            ),
        )
        if self.llm_api_key is not None and not _API_KEY.match(self.llm_api_key.get_secret_value()):
            # Sent as it is, a key with whitespace inside makes an illegal header, blamed on the network.
            raise ValueError(
                "COMPANION_LLM_API_KEY: must be one word of printable ASCII, without spaces or line breaks "
                "(the value is not shown)"
            )
        for name, shape, words in checks:
            token = getattr(self, name)
            if token is not None and not shape.match(token.get_secret_value()):
                raise ValueError(f"COMPANION_{name.upper()}: {words} (the value is not shown)")
        return self

    @model_validator(mode="after")
    def _shared_database(self) -> Settings:
        """Several processes share a PostgreSQL server, never an SQLite file (one writer, one host)."""
        if self.shared_database and self.database_url is None:
            raise ValueError(SHARED_NEEDS_POSTGRES)
        return self

    @model_validator(mode="after")
    def _files(self) -> Settings:
        for name in ("persona_file", "private_persona_file"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise ValueError(f"COMPANION_{name.upper()}: no such file: {path}")
        return self

    @property
    def allowed_accounts(self) -> frozenset[str]:
        return frozenset(filter(None, (part.strip() for part in self.allowed_users.split(","))))

    @property
    def owner_accounts(self) -> frozenset[str]:
        return frozenset(filter(None, (part.strip() for part in self.owner.split(","))))

    @property
    def http_allowed_host_set(self) -> frozenset[str]:
        """COMPANION_HTTP_ALLOWED_HOSTS as written (lower case), each `name` or `name:port`."""
        return frozenset(filter(None, (part.strip().lower() for part in self.http_allowed_hosts.split(","))))

    def persona_text(self) -> str | None:
        if self.persona_file is not None:
            return self.persona_file.read_text(encoding="utf-8").strip()
        return self.persona

    def private_persona_text(self) -> str:
        if self.private_persona_file is not None:
            return self.private_persona_file.read_text(encoding="utf-8").strip()
        return self.private_persona or ""


def load_settings(**overrides: Any) -> Settings:
    """Read the settings, or raise ConfigError with one line naming the variable."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error.get("loc") else ""
        message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
        if field:
            return _raise(f"COMPANION_{field.upper()}: {message}")
        return _raise(message)


def _raise(line: str) -> Settings:
    raise ConfigError(line.splitlines()[0])
