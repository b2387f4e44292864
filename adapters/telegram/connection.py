"""One bot's connection to the Bot API: the Application, calls with flood control and retries, no token in the logs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import warnings
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import quote

from telegram import BotCommand, Update
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    EndPointNotFound,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.ext import Application, ExtBot
from telegram.warnings import PTBDeprecationWarning

from adapters.telegram.updates import BotAPIRequest, UnparsableUpdate, UpdatesRequest, parse_one
from core.values.edge import CommandSpec, EdgeSettings
from core.values.errors import CompanionError
from core.values.retry import Attempt, Sleep, retrying

log = logging.getLogger(__name__)

# Opt in to python-telegram-bot's timedelta time periods: the int form warns since v22.2, even
# inside the library when it builds a RetryAfter. This module reads both forms.
os.environ.setdefault("PTB_TIMEDELTA", "true")

T = TypeVar("T")

# BadRequest subclasses NetworkError in python-telegram-bot, but repeating a bad request cannot help.
_NOT_TRANSIENT = (BadRequest, Forbidden, InvalidToken, ChatMigrated, Conflict, EndPointNotFound)


class TelegramStartError(CompanionError):
    """Telegram rejected the token or could not be reached at start-up; the message is one line."""


class TelegramConnection:
    """The Bot API as the intake, the sender and the streamer of one bot use it.

    The Application is built at each `open` (python-telegram-bot's own updater and job queue off:
    the intake polls itself, to confirm an update only once it is handled). Calls go through
    `call`: a 429 waits its retry_after, 5xx and network errors back off (`EdgeSettings.retry`).
    A request whose answer timed out may have been delivered; it is retried anyway, since a lost
    reply (which the timeline already holds) is worse than a rare duplicate.

    Args:
        token: the bot token (COMPANION_TELEGRAM_TOKEN).
        edge: the settings every platform shares (the retries of a call).
        base_url: a Bot API server's base URL with the /bot part (COMPANION_TELEGRAM_BASE_URL);
            None: api.telegram.org.
        read_timeout: the requests' read (and write) timeout.
        sleep: the pause between two tries of a call.
    """

    def __init__(
        self,
        token: str,
        edge: EdgeSettings,
        *,
        base_url: str | None = None,
        read_timeout: float = 15.0,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._token = token
        self._base_url = base_url
        self._read_timeout = read_timeout
        self.sleep = sleep
        self._policy = edge.retry(_is_transient, _flood_wait)
        self._app: Application | None = None
        self._updates_request: UpdatesRequest | None = None
        self._log_filter = _RedactToken(token)

    @property
    def started(self) -> bool:
        return self._app is not None

    @property
    def bot(self) -> ExtBot:
        """The started bot.

        Raises:
            RuntimeError: the connection is not open.
        """
        if self._app is None:
            raise RuntimeError("the Telegram connection is not open")
        return self._app.bot

    async def open(self, commands: Iterable[CommandSpec], *, drop_webhook: bool = True) -> None:
        """Check the token (getMe), register the `commands` (setMyCommands) and drop a webhook left set
        (unless `drop_webhook` is false: the webhook mode sets its own).

        Raises:
            TelegramStartError: the token was rejected or the Bot API server was unreachable.
        """
        _guard_logs(self._log_filter)
        self._app = self._build_application()
        try:
            await self._initialize()
            await self._register_commands(commands)
            if drop_webhook:
                await self._drop_webhook()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Close both HTTP connections; safe to call twice."""
        app, self._app, self._updates_request = self._app, None, None
        try:
            if app is not None:
                with contextlib.suppress(Exception):
                    await app.shutdown()
                with contextlib.suppress(Exception):  # when initialize() failed, the app skips its bot
                    await app.bot.shutdown()
        finally:
            _unguard_logs(self._log_filter)

    async def call(self, what: str, action: Callable[[], Awaitable[T]], *, attempts: int | None = None) -> T:
        """Run `action` (one Bot API call), retrying what can succeed on a later attempt.

        Raises:
            telegram.error.TelegramError: the last failure, when it is not transient or attempts ran out.
        """
        policy = replace(self._policy, attempts=attempts) if attempts else self._policy

        def retrying_after(exc: Exception, attempt: Attempt, delay: float) -> None:
            reason = "flood control" if isinstance(exc, RetryAfter) else type(exc).__name__
            log.info("telegram: %s failed (%s), retry %d in %.1f s", what, reason, attempt.number, delay)

        return await retrying(policy, lambda _attempt: action(), on_retry=retrying_after, sleep=self.sleep)

    async def post(self, method: str, params: dict[str, Any]) -> Any:
        """One Bot API request with `params` as the bot's method of that name sends them (None values
        left out, objects as JSON), failing as it fails (RetryAfter, ChatMigrated, BadRequest...);
        its result left as JSON. `bot.send_message` would parse the Message Telegram returns into
        objects (about 50 us a send, on the loop that reads the next update), of which a send
        reads the id only."""
        return await self.bot._post(method, params)

    def fetched(self, updates: Sequence[Update]) -> tuple[Update, ...]:
        """What `bot.get_updates` fetched: `updates` and those its connection parsed itself."""
        taken = self._updates_request.take_parsed() if self._updates_request is not None else []
        return (*updates, *taken)

    def parse(self, body: str) -> Update | UnparsableUpdate:
        """An update a webhook delivered (its JSON), parsed with the bot as getUpdates' are; or, when
        python-telegram-bot cannot parse it, what a log may say of it."""
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        parsed: list[Update] = []
        unparsable = parse_one(data, self.bot, parsed)
        return parsed[0] if unparsable is None else unparsable

    def take_unparsable(self) -> list[UnparsableUpdate]:
        """The updates the last getUpdates answers held that python-telegram-bot cannot parse."""
        return self._updates_request.take_unparsable() if self._updates_request is not None else []

    def _build_application(self) -> Application:
        from adapters.tls import shared_ssl_context

        # Both clients share one TLS context (adapters/tls.py); otherwise python-telegram-bot's defaults.
        tls = {"verify": shared_ssl_context()}
        # Both leave answer bodies out of the log; the getUpdates one sets aside what cannot be parsed.
        updates_request = self._updates_request = UpdatesRequest(connection_pool_size=1, httpx_kwargs=tls)
        builder = (
            Application.builder()
            .token(self._token)
            .updater(None)  # the intake polls itself, to confirm an update only once it is handled
            .job_queue(None)
            .request(
                BotAPIRequest(
                    connection_pool_size=256,
                    read_timeout=self._read_timeout,
                    write_timeout=self._read_timeout,
                    connect_timeout=10.0,
                    pool_timeout=5.0,
                    httpx_kwargs=tls,
                )
            )
            .get_updates_request(updates_request)
        )
        if self._base_url:
            builder = builder.base_url(self._base_url).base_file_url(_file_url(self._base_url))
        app = builder.build()
        updates_request.bind(app.bot)  # each update parsed once, there, with the bot (adapters/telegram/updates.py)
        return app

    async def _initialize(self) -> None:
        app = self._app
        if app is None:
            raise RuntimeError("telegram: initialise after the application is built")
        where = f"the Bot API server at {self._base_url}" if self._base_url else "Telegram (api.telegram.org)"
        # `from None` below: python-telegram-bot's own InvalidToken message quotes the token.
        try:
            await self.call("getMe", app.initialize, attempts=3)
        except InvalidToken:
            hint = ""
            if self._base_url and "bot" not in self._base_url.rstrip("/").rpartition("/")[2]:
                hint = " (or COMPANION_TELEGRAM_BASE_URL lacks the /bot part, as in http://127.0.0.1:8081/bot)"
            raise TelegramStartError(f"COMPANION_TELEGRAM_TOKEN: {where} rejected the token{hint}") from None
        except TelegramError as exc:
            reason = type(exc).__name__
            if self._base_url:
                raise TelegramStartError(f"COMPANION_TELEGRAM_BASE_URL: cannot reach {where} ({reason})") from None
            raise TelegramStartError(
                f"cannot reach {where} ({reason}); check the network, "
                "or point COMPANION_TELEGRAM_BASE_URL at a Bot API server"
            ) from None

    async def _register_commands(self, specs: Iterable[CommandSpec]) -> None:
        commands = [
            BotCommand(spec.name.lower(), spec.description[:256])
            for spec in specs
            if re.fullmatch(r"[a-z0-9_]{1,32}", spec.name.lower()) and spec.description
        ]
        if not commands:
            return
        try:
            await self.call("setMyCommands", lambda: self.bot.set_my_commands(commands))
        except TelegramError as exc:
            log.warning("telegram: setMyCommands failed (%s); commands still work when typed", type(exc).__name__)

    async def _drop_webhook(self) -> None:
        try:  # a webhook left set would make every getUpdates fail with 409 Conflict
            await self.call("deleteWebhook", lambda: self.bot.delete_webhook(drop_pending_updates=False))
        except TelegramError as exc:
            log.warning("telegram: deleteWebhook failed (%s)", type(exc).__name__)


# --- which failures a retry can help --------------------------------------------------------------


def is_permanent(exc: TelegramError) -> bool:
    """Whether sending again cannot help: the bot is blocked or removed (403), the chat is not
    found or the request is malformed (400), or the group moved (ChatMigrated)."""
    return isinstance(exc, (BadRequest, Forbidden, ChatMigrated))


def _is_transient(exc: Exception) -> bool:
    """Flood control (429), and network errors: timeouts and every 5xx answer."""
    if isinstance(exc, _NOT_TRANSIENT):
        return False
    return isinstance(exc, (RetryAfter, NetworkError))


def _flood_wait(exc: Exception) -> float | None:
    return retry_after_seconds(exc) if isinstance(exc, RetryAfter) else None


def retry_after_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():  # the int form is deprecated since v22.2; both forms are read
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value: Any = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _file_url(base_url: str) -> str:
    """http://host:8081/bot -> http://host:8081/file/bot, as a self-hosted Bot API server serves files."""
    head, _, tail = base_url.rstrip("/").rpartition("/")
    return f"{head}/file/{tail}" if head else base_url


# --- the token stays out of the logs ---------------------------------------------

_GUARDED = ("httpx", "telegram")


class _RedactToken(logging.Filter):
    """httpx logs every request URL at INFO, and the Bot API puts the token in the URL."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token
        # A file download's URL carries the token percent-encoded (`123%3AABC`): redacted as well.
        self._forms = tuple(dict.fromkeys(form for form in (token, quote(token, safe="")) if form))

    def filter(self, record: logging.LogRecord) -> bool:
        if self._token:
            message = record.getMessage()
            if any(form in message for form in self._forms):
                for form in self._forms:
                    message = message.replace(form, "<token>")
                record.msg, record.args = message, None
        return True


def _guard_logs(token_filter: _RedactToken) -> None:
    # Levels (python-telegram-bot logs message text at DEBUG) are bot/logs.py's; the token is ours.
    for name in _GUARDED:
        logging.getLogger(name).addFilter(token_filter)


def _unguard_logs(token_filter: _RedactToken) -> None:
    for name in _GUARDED:
        logging.getLogger(name).removeFilter(token_filter)
