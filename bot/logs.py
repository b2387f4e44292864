"""Logging policy, set in this one place by the CLI entry point: format, levels, library floors, no tracebacks."""

from __future__ import annotations

import logging
import sys

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
}

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class OneLineFormatter(logging.Formatter):
    """Every record is one line: an exception is named by its type, never by its message or
    traceback (a library's exception text can quote what it was sending, discord.py logs each
    gateway reconnect with a traceback, and the gateway's own last word is one line)."""

    def format(self, record: logging.LogRecord) -> str:
        exc_type = record.exc_info[0] if record.exc_info else None
        line = super().format(record)
        return f"{line} ({exc_type.__name__})" if exc_type is not None else line

    def formatException(self, ei) -> str:
        return ""

    def formatStack(self, stack_info: str) -> str:
        return ""


def configure_logging(level: str) -> None:
    """One stderr handler at `level` (COMPANION_LOG_LEVEL), each library held at its floor."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter(FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
    numeric = logging.getLevelName(level)
    for name, floor in FLOORS.items():
        logging.getLogger(name).setLevel(max(numeric, floor))
