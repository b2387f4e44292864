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


def rows(db_path: Path | str, sql: str, params: tuple = ()) -> list[tuple]:
    """Read the gateway's database from this process (another process: its locks stay its own): the SQLite file
    at `db_path`, or the PostgreSQL database at the URL `db_path` (a `?` of `sql` becomes psycopg's `%s`)."""
    if isinstance(db_path, str):
        import psycopg

        with psycopg.connect(db_path, autocommit=True) as conn:
            found = conn.execute(sql.replace("?", "%s").encode(), params or None)
            return [tuple(row) for row in found.fetchall()] if found.description else []
    with contextlib.closing(sqlite3.connect(db_path)) as db:
        return db.execute(sql, params).fetchall()
