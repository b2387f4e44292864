"""Logging policy, set in this one place by the CLI entry point: format, levels, library floors, no tracebacks."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping

# Libraries that log payloads (SQL parameters, request bodies, gateway events, URLs with
# the bot token) at DEBUG or INFO: their floor is raised whatever the level, because a log
# line is a data path and private text must not reach it. python-telegram-bot logs request
# parameters (message text) at DEBUG, discord.py whole gateway payloads and request bodies.
FLOORS = {
    "aiosqlite": logging.WARNING,
    "httpx": logging.WARNING,
    "httpcore": logging.WARNING,
    "hpack": logging.WARNING,
    "telegram": logging.INFO,
    "discord": logging.INFO,
    "discord.gateway": logging.WARNING,
    "discord.http": logging.WARNING,
    "apscheduler": logging.WARNING,
    "asyncio": logging.WARNING,
    # The MCP SDK logs each message it sends or receives at DEBUG (a tool's arguments and result).
    "mcp": logging.WARNING,
}

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Our own loggers: their lines are written for the log (ids, sizes, timings, kinds) and shown whole.
OWN_LOGGERS = ("adapters", "core", "bot")
WITHHELD = "<withheld>"
# A string a library's line quotes in its own words (asyncio's "Exception in callback f('...')").
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")


class OneLineFormatter(logging.Formatter):
    """Every record is one line: an exception is named by its type, never by its message or
    traceback (a library's exception text can quote what it was sending, discord.py logs each
    gateway reconnect with a traceback, and the gateway's own last word is one line).

    A library's line (any logger outside OWN_LOGGERS) keeps its words and its numbers, never a
    string it was given: python-telegram-bot logs an update it cannot parse whole at CRITICAL and
    an answer that is not JSON whole at ERROR, asyncio an unretrieved task with its exception's
    repr, discord.py a failed view with its repr. See `library_line`."""

    def format(self, record: logging.LogRecord) -> str:
        if record.name.split(".", 1)[0] not in OWN_LOGGERS:
            record = library_line(record)
        exc_type = record.exc_info[0] if record.exc_info else None
        line = super().format(record)
        return f"{line} ({exc_type.__name__})" if exc_type is not None else line

    def formatException(self, ei) -> str:
        return ""

    def formatStack(self, stack_info: str) -> str:
        return ""


def library_line(record: logging.LogRecord) -> logging.LogRecord:
    """A copy of a library's `record` as our log shows it: the first line of its message with every
    quoted string withheld, and of its arguments the numbers only (each other one withheld)."""
    template = record.msg if isinstance(record.msg, str) else f"<{type(record.msg).__name__}>"
    first = template.split("\n", 1)[0]
    shown = logging.makeLogRecord(record.__dict__)
    shown.msg = _QUOTED.sub(WITHHELD, first)
    if isinstance(record.args, Mapping):
        shown.args = {key: _number_or_withheld(value) for key, value in record.args.items()}
    else:
        shown.args = tuple(_number_or_withheld(value) for value in record.args or ())
    try:
        shown.getMessage()
    except (TypeError, ValueError, KeyError):  # a placeholder that wants what was withheld: the words alone
        shown.args = ()
    return shown


def _number_or_withheld(value: object) -> object:
    return value if value is None or isinstance(value, (int, float)) else WITHHELD


def configure_logging(level: str) -> None:
    """One stderr handler at `level` (COMPANION_LOG_LEVEL), each library held at its floor."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter(FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
    numeric = logging.getLevelName(level)
    for name, floor in FLOORS.items():
        logging.getLogger(name).setLevel(max(numeric, floor))
