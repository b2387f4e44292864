"""What the lifecycle tests of `companion run` (a real subprocess) read beside the platforms
(tests/helpers/platforms/): a setting's shipped default, and the gateway's database."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from bot.settings import Settings


def shipped(name: str) -> str:
    """A setting's default as shipped (bot/settings.py), as its environment variable's value."""
    return str(Settings.model_fields[name].default)


def rows(db_path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Read the gateway's database from this process (another process: its locks stay its own)."""
    with contextlib.closing(sqlite3.connect(db_path)) as db:
        return db.execute(sql, params).fetchall()
