"""The entry point's logging policy applied inside one test, and undone after it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from bot.logs import FLOORS, configure_logging


@contextmanager
def logging_policy(level: str) -> Iterator[None]:
    """`configure_logging(level)` as `companion` runs it (pytest's handlers stay: basicConfig adds none)."""
    saved = {name: logging.getLogger(name).level for name in FLOORS}
    configure_logging(level)
    try:
        yield
    finally:
        for name, previous in saved.items():
            logging.getLogger(name).setLevel(previous)
