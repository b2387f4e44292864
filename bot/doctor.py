"""`companion doctor`: probes what is configured and says, in one screen, what works and what to change.

The probes live with their adapters (adapters/llm/probe.py, adapters/probes.py, adapters/mcp/probe.py,
adapters/storage/inspection.py) and report findings; this module knows the settings, so it turns
each finding into a line: OK, or the problem and the exact setting or command that fixes it. A
line marked -- is not configured or only worth knowing; it does not count as a problem.

It never prints a token, an API key, the passphrase hash, a message, a memory or anything a model
wrote (the probes keep none of it, and `render` withholds any configured secret all the same), and
it never writes: the database is opened read-only and no lock is taken (on PostgreSQL, a read-only
transaction; who holds the instance lock is read from `pg_locks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from bot.settings import ConfigError, Settings

if TYPE_CHECKING:
    from adapters.llm.probe import ModelServerProbe
    from adapters.probes import Finding
    from adapters.storage.postgres.inspection import PostgresFacts

OK, FAIL, INFO = "OK", "FAIL", "--"
WARN = "WARN"  # worth changing, but it works as it is: not counted as a problem
WITHHELD = "[withheld]"
NO_TOOLS_MEMORY = "memory then works through /remember, /recall and /forget"


@dataclasses.dataclass(frozen=True, slots=True)
class Line:
    status: str  # OK, FAIL or INFO
    text: str


@dataclasses.dataclass
class Section:
    title: str
    lines: list[Line] = dataclasses.field(default_factory=list)

    def add(self, status: str, text: str) -> None:
        self.lines.append(Line(status, text))


@dataclasses.dataclass
class Report:
    sections: list[Section]
    secrets: tuple[str, ...] = ()

    @property
    def problems(self) -> int:
        return sum(1 for section in self.sections for line in section.lines if line.status == FAIL)

    def render(self) -> str:
        out = ["companion doctor"]
        for section in self.sections:
            out.append("")
            out.append(section.title)
            out += [f"  {line.status:<5} {line.text}" for line in section.lines]
        out.append("")
        if self.problems:
            s = "s" if self.problems != 1 else ""
            out.append(
                f"{self.problems} problem{s}: change what the FAIL line{s} say{'' if s else 's'}, then run `companion doctor` again."
            )
        else:
            out.append("Everything configured works.")
        text = "\n".join(out)
        for secret in self.secrets:
            text = text.replace(secret, WITHHELD)
        return text


async def diagnose(settings: Settings, *, check_path: Callable[..., None]) -> Report:
    """Every probe that applies to `settings`, concurrently; `check_path` is the CLI's own check of
    COMPANION_DB_PATH (it raises ConfigError with one line and creates nothing)."""
    *sections, (mcp, mcp_secrets) = await asyncio.gather(
        _model_section(settings),
        _speech_section(settings),
        _telegram_section(settings),
        _discord_section(settings),
        mcp_section(settings.mcp_config, os.environ),
    )
    report = [s for s in sections if s is not None]
    if mcp is not None:
        report.append(mcp)
    if settings.database_url is not None:
        report.append(await _postgres_section(settings))
    else:
        report.append(_database_section(settings, check_path))
    report.append(_settings_section(settings))
    secrets = {*_secrets(settings), *(s for s in mcp_secrets if len(s) >= 4)}
    return Report(report, tuple(sorted(secrets, key=len, reverse=True)))


# --- the model server ------------------------------------------------------------------------------


async def _model_section(settings: Settings) -> Section:
    if not settings.llm_base_url:
        section = Section("model: the embedded offline responder (COMPANION_LLM_BASE_URL is not set)")
        section.add(INFO, "no model server to check; set COMPANION_LLM_BASE_URL to use one (README: A real model)")
        return section
    from adapters.llm.probe import ModelServerProbe

    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
    probe = ModelServerProbe(settings.llm_base_url, key, settings.llm_model, timeout=settings.llm_timeout)
    section = Section(f"model server {probe.where}, COMPANION_LLM_MODEL={settings.llm_model}")
    async with probe:
        await _model_lines(settings, probe, section)
    return section


async def _model_lines(settings: Settings, probe: ModelServerProbe, section: Section) -> None:
    listed = await probe.models()
    found = listed.finding
    if found.kind == "unreachable":
        section.add(FAIL, f"{found.seen}: start the server, or correct COMPANION_LLM_BASE_URL")
        return
    if found.kind == "key-refused":
        section.add(FAIL, f"{found.seen} to the API key: set COMPANION_LLM_API_KEY to a key the server accepts")
        return
    chat = await probe.chat()
    model = settings.llm_model
    served = _served(model, listed.ids)
    choices = ", ".join(listed.ids[:5]) + (", ..." if len(listed.ids) > 5 else "")
    if not found.ok:
        section.add(INFO, f"{found.seen}; the chat below shows whether the model name works")
    elif served:
        section.add(OK, f"reachable; it serves {model}")
    elif chat.ok:
        section.add(
            INFO,
            f"reachable; it lists {choices or 'no model'}, not {model}, but answered anyway "
            f"(it serves what it has loaded); to be exact: COMPANION_LLM_MODEL={listed.ids[0] if listed.ids else model}",
        )
    if not chat.ok:
        if chat.kind == "model-missing" or (found.ok and not served):
            where = f"set COMPANION_LLM_MODEL to one of: {choices}" if choices else "set COMPANION_LLM_MODEL"
            section.add(FAIL, f"chat completion: {chat.seen}: {where} (Ollama: `ollama pull {model}`)")
        elif chat.kind == "key-refused":
            section.add(FAIL, f"chat completion: {chat.seen}: set COMPANION_LLM_API_KEY to a key the server accepts")
        elif chat.kind == "unreachable":
            section.add(
                FAIL,
                f"chat completion: {chat.seen}: raise COMPANION_LLM_TIMEOUT "
                f"(now {settings.llm_timeout:g} s), or use a smaller model",
            )
        else:
            section.add(FAIL, f"chat completion: {chat.seen}: the server's own log says why")
        return
    section.add(OK, f"chat completion: answered in {chat.seconds:.1f} s")
    await _tool_line(settings, probe, section)
    if settings.llm_vision:
        image = await probe.image_input()
        if image.ok:
            section.add(OK, "image input: the model took a probe image")
        else:
            section.add(
                FAIL,
                f"image input: {image.seen}: set COMPANION_LLM_VISION=false, or use a model that "
                "reads images (llama.cpp: --mmproj)",
            )
    else:
        section.add(INFO, "image input: off (COMPANION_LLM_VISION=false)")
    _context_line(settings, await probe.context_window(listed), section)
    if settings.stream_edit_seconds is None:
        section.add(INFO, "streaming: off (COMPANION_STREAM_EDIT_SECONDS=off): replies are sent whole")
        return
    # Probed with what a turn's first request carries: its tools (and tool_choice), when they are on.
    stream = await probe.streaming(tools=settings.llm_tools)
    if stream.ok:
        section.add(OK, f"streaming: the server {stream.seen}")
    elif stream.kind == "stream-failed":
        section.add(
            FAIL,
            f"streaming: {stream.seen}: set COMPANION_STREAM_EDIT_SECONDS=off to send replies whole, "
            "or the server's own log says why",
        )
    elif stream.kind == "no-stream-with-tools":
        section.add(
            INFO,
            f"streaming: {stream.seen}: each turn's request offering tools is sent unstreamed, so replies are "
            f"sent whole; COMPANION_LLM_TOOLS=false gets streaming back ({NO_TOOLS_MEMORY}), or "
            "COMPANION_STREAM_EDIT_SECONDS=off stops asking the server to stream",
        )
    else:
        section.add(INFO, f"streaming: {stream.seen}")


async def _tool_line(settings: Settings, probe: ModelServerProbe, section: Section) -> None:
    tools = await probe.tool_round_trip()
    if not settings.llm_tools:
        words = await probe.words_with_tools() if tools.ok else tools
        if words.ok:
            section.add(
                INFO,
                "tool calls: off (COMPANION_LLM_TOOLS=false), but this server and model can call them and "
                "still answer in words: COMPANION_LLM_TOOLS=true lets the model remember by itself",
            )
        else:
            section.add(INFO, f"tool calls: off (COMPANION_LLM_TOOLS=false), and rightly so: {words.seen}")
        return
    if tools.ok:
        section.add(OK, f"tool calls: a forced call of a probe tool and its result went round ({tools.seconds:.1f} s)")
        words = await probe.words_with_tools()
        if words.kind == "no-words":
            section.add(
                FAIL,
                f"words with tools offered: {words.seen}, so every turn is asked twice: set "
                f"COMPANION_LLM_TOOLS=false ({NO_TOOLS_MEMORY}), or a server that parses this model's "
                "tool calls (llama.cpp's llama-server with --jinja)",
            )
        elif words.ok:
            section.add(OK, f"words with tools offered: {words.seen}")
        else:
            section.add(FAIL, f"words with tools offered: {words.seen}")
        return
    fixes = {
        "tools-refused": "use a model with tool support (vLLM: --enable-auto-tool-choice --tool-call-parser; "
        "llama.cpp: --jinja), or set COMPANION_LLM_TOOLS=false",
        "tool-unparsed": "the server does not parse this model's tool syntax (llama.cpp: --jinja; llama-cpp-python: "
        "--chat_format chatml-function-calling), or set COMPANION_LLM_TOOLS=false",
        "tool-ignored": "this model does not call tools here: set COMPANION_LLM_TOOLS=false, or use a model that does",
    }
    fix = fixes.get(tools.kind, "set COMPANION_LLM_TOOLS=false, or the server's own log says why")
    section.add(FAIL, f"tool calls: {tools.seen}: {fix}; {NO_TOOLS_MEMORY}")


def _context_line(settings: Settings, window: Finding, section: Section) -> None:
    need = settings.context_tokens + settings.llm_max_tokens
    sum_words = (
        f"COMPANION_CONTEXT_TOKENS={settings.context_tokens} + "
        f"COMPANION_LLM_MAX_TOKENS={settings.llm_max_tokens} = {need}"
    )
    if not window.ok or window.value is None:
        section.add(INFO, f"context window: {window.seen}; it must hold {sum_words} tokens")
        return
    size = window.value
    if window.kind == "ollama-model-max":
        section.add(
            INFO,
            f"context window: the model takes up to {size} tokens, but Ollama runs it with its own "
            f"num_ctx (OLLAMA_CONTEXT_LENGTH) unless set: make that at least {need}",
        )
        return
    if size < need:
        fits = size - settings.llm_max_tokens
        fix = (
            f"set COMPANION_CONTEXT_TOKENS={fits}"
            if fits >= 256
            else f"set COMPANION_LLM_MAX_TOKENS={max(16, size // 4)} and COMPANION_CONTEXT_TOKENS={size - max(16, size // 4)}"
        )
        section.add(
            FAIL,
            f"context window: {size} tokens ({window.seen}) cannot hold {sum_words}: {fix}, "
            "or start the server with a larger context (llama.cpp: -c; Ollama: num_ctx)",
        )
        return
    more = f"; up to COMPANION_CONTEXT_TOKENS={size - settings.llm_max_tokens} would fit" if size >= 2 * need else ""
    section.add(OK, f"context window: {size} tokens ({window.seen}) holds {sum_words}{more}")


def _served(model: str, ids: tuple[str, ...]) -> bool:
    # Ollama lists `llama3.1:latest` for a model asked for as `llama3.1`.
    return model in ids or f"{model}:latest" in ids


# --- speech to text and the platforms --------------------------------------------------------------


async def _speech_section(settings: Settings) -> Section | None:
    if not settings.stt_base_url:
        return None
    from adapters.llm.probe import transcription

    key = settings.stt_api_key.get_secret_value() if settings.stt_api_key else None
    found = await transcription(settings.stt_base_url, key, settings.stt_model, seconds=settings.llm_timeout)
    section = Section(f"speech to text, COMPANION_STT_MODEL={settings.stt_model}")
    if found.ok:
        section.add(OK, "a probe of half a second of silence was transcribed")
    else:
        section.add(FAIL, f"{found.seen}: check COMPANION_STT_BASE_URL, COMPANION_STT_MODEL and COMPANION_STT_API_KEY")
    return section


async def _telegram_section(settings: Settings) -> Section | None:
    if settings.telegram_token is None:
        return None
    from adapters.probes import telegram_get_me

    found = await telegram_get_me(settings.telegram_token.get_secret_value(), settings.telegram_base_url)
    section = Section("telegram")
    if found.ok:
        section.add(OK, f"token: {found.seen}")
    elif found.kind == "token-refused":
        section.add(
            FAIL,
            f"token: {found.seen}: copy it again from @BotFather (/mybots, API Token) into COMPANION_TELEGRAM_TOKEN",
        )
    else:
        section.add(FAIL, f"token: {found.seen}: check the network, or COMPANION_TELEGRAM_BASE_URL")
    if found.ok:
        await _telegram_webhook(settings, section)
    return section


async def _telegram_webhook(settings: Settings, section: Section) -> None:
    """What Telegram says of the webhook, beside what the settings ask for (polling, or this URL)."""
    from adapters.probes import Finding, telegram_webhook_info

    if settings.telegram_token is None:
        return
    info = await telegram_webhook_info(settings.telegram_token.get_secret_value(), settings.telegram_base_url)
    if isinstance(info, Finding):
        section.add(WARN, f"webhook: {info.seen}")
        return
    wanted = settings.telegram_webhook_url
    pending = f", {info.pending} updates waiting at Telegram" if info.pending else ""
    if wanted is None:
        if info.url:
            section.add(WARN, f"webhook: one is set ({info.url}); `companion run` removes it, to poll{pending}")
        return
    if info.url == wanted:
        section.add(OK, f"webhook: set to {wanted}{pending}")
    elif info.url:
        section.add(WARN, f"webhook: Telegram delivers to {info.url}; `companion run` sets {wanted}{pending}")
    else:
        section.add(INFO, f"webhook: not set; `companion run` sets {wanted}{pending}")
    if info.last_error is not None:
        section.add(WARN, f"webhook: Telegram's last delivery failed: {info.last_error} (check the proxy and its TLS)")


async def _discord_section(settings: Settings) -> Section | None:
    if settings.discord_token is None:
        return None
    from adapters.probes import discord_me

    token, intent = await discord_me(settings.discord_token.get_secret_value(), settings.discord_api_base)
    section = Section("discord")
    if token.ok:
        section.add(OK, f"token: {token.seen}")
    elif token.kind == "token-refused":
        section.add(
            FAIL, f"token: {token.seen}: reset it (Developer Portal, Bot, Reset Token) into COMPANION_DISCORD_TOKEN"
        )
    else:
        section.add(FAIL, f"token: {token.seen}: check the network, or COMPANION_DISCORD_API_BASE")
    if intent is not None:
        if intent.ok:
            section.add(OK, f"intents: {intent.seen}")
        elif intent.kind == "intent-off":
            section.add(
                FAIL,
                f"intents: {intent.seen}: turn on Message Content Intent (Developer Portal, Bot, "
                "Privileged Gateway Intents)",
            )
        else:
            section.add(INFO, f"intents: {intent.seen}; `companion run` says so if the intent is off")
    return section


# --- MCP servers -----------------------------------------------------------------------------------


async def mcp_section(path: Path | None, environ: Mapping[str, str]) -> tuple[Section | None, tuple[str, ...]]:
    """Each configured MCP server: reachable or why not, its tools after the filter, which of them
    private mode is offered, the time of one tools/list; and the file's secrets, for `render` to withhold."""
    if path is None:
        return None, ()
    from adapters.mcp.config import McpConfigError, load_mcp_config

    section = Section(f"MCP servers (COMPANION_MCP_CONFIG={path})")
    try:
        config = load_mcp_config(path, environ)
    except McpConfigError as exc:
        section.add(FAIL, f"{exc}: fix the file, or unset COMPANION_MCP_CONFIG")
        return section, ()
    from adapters.mcp.probe import probe

    reports = await probe(config)
    for r in reports:
        where = "stdio" if r.transport == "stdio" else "streamable HTTP"
        if not r.enabled:
            section.add(INFO, f"{r.name} ({where}): {r.detail}")
            continue
        if not r.reachable:
            section.add(FAIL, f"{r.name} ({where}): not reachable: {r.detail}")
            continue
        tools = ", ".join(r.tools) if r.tools else "none"
        s = "" if len(r.tools) == 1 else "s"
        section.add(
            OK,
            f"{r.name} ({where}): reachable, one tools/list in {r.list_seconds or 0:.2f} s; "
            f"{len(r.tools)} tool{s} after the filter: {tools}",
        )
        if r.private:
            section.add(INFO, f"{r.name}: private mode is offered {', '.join(r.private)} (the owner named them)")
        else:
            section.add(INFO, f"{r.name}: private mode is offered none of its tools")
        for left in r.left_out:
            section.add(WARN, f"{r.name}: the tool {left.tool} is left out: {left.why}")
    if not reports:
        section.add(INFO, "the file names no server")
    return section, config.secrets


# --- the database ---------------------------------------------------------------------------------


def _database_section(settings: Settings, check_path: Callable[..., None]) -> Section:
    from adapters.storage.inspection import inspect_database

    path = settings.db_path
    section = Section(f"database {path}")
    try:
        check_path(path, must_be_sqlite=True)
    except ConfigError as exc:
        section.add(FAIL, str(exc))
        return section
    facts = inspect_database(Path(path))
    if not facts.exists:
        section.add(OK, "not created yet; `companion run` or `companion chat` creates it (its folder is writable)")
        return section
    if facts.problem:
        section.add(FAIL, f"COMPANION_DB_PATH: {path} {facts.problem}; name another file, or restore a backup")
        return section
    if facts.unknown:
        section.add(
            FAIL,
            f"written by a newer companion (migration {facts.unknown[-1]}): upgrade companion, or "
            "`companion restore` a backup made by this version",
        )
        return section
    migrations = (
        f"{len(facts.pending)} migration{'s' if len(facts.pending) != 1 else ''} to apply at the next start"
        if facts.pending
        else f"{facts.applied} migrations current"
    )
    intervals = facts.open_private_intervals
    section.add(
        OK,
        f"writable, {migrations}, {_size(facts.size_bytes)}, "
        f"{intervals} private interval{'s' if intervals != 1 else ''} open",
    )
    return section


async def _postgres_section(settings: Settings) -> Section:
    """COMPANION_DATABASE_URL's database, read-only, and the key folder beside it (COMPANION_KEY_DIR)."""
    from adapters.storage.keys import FAIL as KEY_FAIL
    from adapters.storage.keys import OK as KEY_OK
    from adapters.storage.keys import WARN as KEY_WARN
    from adapters.storage.keys import check_key_dir, key_ids
    from adapters.storage.postgres.errors import mask
    from adapters.storage.postgres.inspection import inspect_postgres
    from core.values.errors import StoreError

    url = settings.database_url.get_secret_value() if settings.database_url is not None else ""
    try:
        facts = await inspect_postgres(url)
    except StoreError as exc:  # the URL itself (settings checked its shape; the engine's parser is stricter)
        section = Section("database COMPANION_DATABASE_URL")
        section.add(FAIL, str(exc))
        return section
    section = Section(f"database {mask(url)} (PostgreSQL)")
    if facts.problem:
        section.add(FAIL, facts.problem)
    else:
        _postgres_lines(facts, section)
    try:
        import cryptography  # noqa: F401 - the sealing of private intervals needs it (the `postgres` extra)
    except ImportError:
        section.add(
            FAIL,
            "the cryptography package is missing, so the store cannot seal private intervals and will not start: "
            "pip install 'companion[postgres]'",
        )
    levels = {KEY_OK: OK, KEY_FAIL: FAIL, KEY_WARN: WARN}
    for check in check_key_dir(settings.key_dir, data_directory=facts.data_directory):
        section.add(levels.get(check.level, INFO), f"COMPANION_KEY_DIR {check.text}")
    if not facts.problem:
        _interval_key_lines(facts.interval_keys, key_ids(settings.key_dir), section)
    return section


def _interval_key_lines(named: tuple[str | None, ...], held: set[str], section: Section) -> None:
    """The intervals and the key folder compared, by key ids alone (counts shown, never an id)."""
    keyless = sum(1 for key in named if key is None or key not in held)
    orphans = len(held - {key for key in named if key is not None})
    if keyless:
        section.add(
            WARN,
            f"{keyless} private interval{'s' if keyless != 1 else ''} without {'their keys' if keyless != 1 else 'its key'}"
            " in COMPANION_KEY_DIR: masked, never read back (an open one is closed at the next start; each goes at"
            " its expiry or by /forget private)",
        )
    if orphans:
        section.add(
            INFO,
            f"{orphans} key file{'s' if orphans != 1 else ''} no interval names: shredded at the next start"
            " (a crash between a key and its interval, or a copy of the folder from elsewhere)",
        )


def _postgres_lines(facts: PostgresFacts, section: Section) -> None:
    where = f"{facts.target.where}/{facts.target.database}"
    section.add(OK, f"reachable at {where}, PostgreSQL {facts.version}")
    if not facts.migrations_readable:
        section.add(INFO, f"migrations: user {facts.target.user} may not read schema_migrations (see below)")
    elif facts.unknown:
        section.add(
            FAIL,
            f"written by a newer companion (migration {facts.unknown[-1]}): upgrade companion, or restore a backup "
            "made by this version",
        )
    elif facts.pending:
        n = len(facts.pending)
        section.add(OK, f"{n} migration{'s' if n != 1 else ''} to apply at the next start")
        if not facts.may_create:
            user = facts.target.user
            section.add(
                FAIL,
                f"user {user} may not create tables in schema public, so the migrations cannot run: "
                f"GRANT CREATE ON SCHEMA public TO {user}",
            )
    else:
        section.add(OK, f"{facts.applied} migration{'s' if facts.applied != 1 else ''} current")
    if facts.missing_rights:
        names = ", ".join(facts.missing_rights[:5]) + (", ..." if len(facts.missing_rights) > 5 else "")
        section.add(
            FAIL,
            f"user {facts.target.user} lacks rights on {len(facts.missing_rights)} of the companion's tables and "
            f"sequences ({names}): GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public, and USAGE "
            f"ON ALL SEQUENCES IN SCHEMA public, TO {facts.target.user}",
        )
    for role in ("run", "chat"):
        if role in facts.holders:
            section.add(INFO, f"a companion {role} holds this database{facts.holders[role]}")
    if facts.live_processes:  # a shared database (COMPANION_SHARED_DATABASE): who serves it now
        count = len(facts.live_processes)
        section.add(INFO, f"{count} live companion run process{'es' if count != 1 else ''} (shared database)")
        for process_id, host, pid, held in facts.live_processes:
            chats = f"{held} conversation{'s' if held != 1 else ''}"
            gateway = " and the Discord gateway" if facts.holders.get("discord") == f" (pid {pid})" else ""
            section.add(INFO, f"  process {process_id} on {host} (pid {pid}), holding {chats}{gateway}")
    intervals = facts.open_private_intervals
    section.add(INFO, f"{intervals} private interval{'s' if intervals != 1 else ''} open")


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    amount = size / 1024
    for unit in ("KB", "MB"):
        if amount < 1024:
            return f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} GB"


# --- settings that disagree ---------------------------------------------------------------------------


def _settings_section(settings: Settings) -> Section:
    section = Section("settings")
    tokens = {"telegram": settings.telegram_token is not None, "discord": settings.discord_token is not None}
    accounts = settings.allowed_accounts | settings.owner_accounts
    for platform, configured in tokens.items():
        listed = any(a.startswith(f"{platform}:") for a in accounts)
        variable = f"COMPANION_{platform.upper()}_TOKEN"
        if configured and not listed:
            section.add(
                FAIL,
                f"nobody may talk with the {platform.capitalize()} bot: add {platform}:YOUR_ID to "
                "COMPANION_ALLOWED_USERS (the log names each refused id)",
            )
        elif listed and not configured:
            section.add(INFO, f"COMPANION_ALLOWED_USERS names {platform} accounts, but {variable} is not set")
    unused = [
        ("COMPANION_TELEGRAM_BASE_URL", settings.telegram_base_url, "COMPANION_TELEGRAM_TOKEN", tokens["telegram"]),
        ("COMPANION_DISCORD_API_BASE", settings.discord_api_base, "COMPANION_DISCORD_TOKEN", tokens["discord"]),
        ("COMPANION_LLM_API_KEY", settings.llm_api_key, "COMPANION_LLM_BASE_URL", bool(settings.llm_base_url)),
        ("COMPANION_STT_API_KEY", settings.stt_api_key, "COMPANION_STT_BASE_URL", bool(settings.stt_base_url)),
    ]
    for name, value, needs, present in unused:
        if value is not None and not present:
            section.add(INFO, f"{name} is set but unused without {needs}")
    if settings.llm_vision and not settings.llm_base_url:
        section.add(
            FAIL,
            "COMPANION_LLM_VISION=true, but the offline responder reads no images: set "
            "COMPANION_LLM_BASE_URL to a vision model's server, or COMPANION_LLM_VISION=false",
        )
    if not settings.private_passphrase_hash:
        section.add(
            INFO,
            "private mode is unavailable: `companion passphrase` prints the hash for COMPANION_PRIVATE_PASSPHRASE_HASH",
        )
    if not section.lines:
        section.add(OK, "no settings disagree")
    return section


def _secrets(settings: Settings) -> tuple[str, ...]:
    values = [settings.telegram_token, settings.discord_token, settings.llm_api_key, settings.stt_api_key]
    found = [v.get_secret_value() for v in values if v is not None]
    if settings.database_url is not None:
        from urllib.parse import unquote, urlsplit

        with contextlib.suppress(ValueError):  # the URL's password, as written and decoded
            password = urlsplit(settings.database_url.get_secret_value()).password
            found += [password, unquote(password)] if password else []
    if settings.private_passphrase_hash:
        found.append(settings.private_passphrase_hash)
    return tuple(sorted((s for s in found if len(s) >= 4), key=len, reverse=True))
