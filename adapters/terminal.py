"""The terminal chat: one line a message on stdin, one reply on stdout; works piped.

A platform of three parts like the others (core/ports/chat.py), without a streamer: the intake
reads lines and hands each to the core, waiting for its outcome before the next (so the replies
print in order, one per line); the sender prints the answers the core's hand-off gives it.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from core.ports.chat import ChatCore, Platform
from core.values.edge import EdgeSettings
from core.values.errors import DeliveryFailed
from core.values.model import Attachment, Confirmation, DeliveryTarget, InboundMessage, OutboundDelivery

log = logging.getLogger(__name__)

PLATFORM = "terminal"
PROMPT = "you> "
_ERASE_PREVIOUS_LINE = "\x1b[1A\x1b[2K"


class _Screen:
    """The terminal both parts write to."""

    def __init__(self, stdin: TextIO, stdout: TextIO, interactive: bool) -> None:
        self.stdin = stdin
        self.interactive = interactive
        self._stdout = stdout

    def write(self, text: str) -> None:
        self._stdout.write(text)
        self._stdout.flush()


class TerminalIntake:
    """Reads the owner's lines (the person at the terminal is the owner; the chat is one-to-one)
    until end of input, which is this platform's connection ending (`wait_lost`)."""

    name = PLATFORM

    def __init__(self, core: ChatCore, screen: _Screen) -> None:
        self._core = core
        self._screen = screen
        self._reading: asyncio.Task[None] | None = None
        self._taking = False

    async def start(self) -> None:
        if self._reading is None:
            self._taking = True
            self._reading = asyncio.get_running_loop().create_task(self.run(), name="terminal")

    async def stop_intake(self) -> None:
        self._taking = False

    async def aclose(self) -> None:
        """Stop reading; safe to call twice (a line being read is given up)."""
        self._taking = False
        reading, self._reading = self._reading, None
        if reading is not None and not reading.done():
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)

    async def wait_lost(self) -> str:
        """Wait for the end of input."""
        if self._reading is None:
            raise RuntimeError("the terminal chat is not started")
        reading = self._reading
        await asyncio.wait({reading})
        failure = None if reading.cancelled() else reading.exception()
        if failure is not None:
            log.error("terminal: reading input failed (%s)", type(failure).__name__)
            return f"terminal: reading input failed ({type(failure).__name__})"
        return "terminal: end of input"

    def ready(self) -> str | None:
        return None if self._taking else "not reading"

    async def run(self) -> None:
        """Answer each line in order until end of input."""
        screen = self._screen
        loop = asyncio.get_running_loop()
        if screen.interactive:
            screen.write("Talking with your companion. /help lists commands; Ctrl-D ends.\n")
        while self._taking:
            if screen.interactive:
                screen.write(PROMPT)
            line = await loop.run_in_executor(None, screen.stdin.readline)
            if not line:
                if screen.interactive:
                    screen.write("\n")
                return
            text = line.rstrip("\r\n")
            if not text.strip():
                continue
            # No message id: a line has no platform id to deduplicate by (and none survives a restart).
            await self._core.receive(InboundMessage(PLATFORM, PLATFORM, "owner", text, is_direct=True))


class TerminalSender:
    """Prints the core's answers; a file is saved beside the person. There are no outbox rows here:
    the terminal prints its replies (nothing is delivered later)."""

    name = PLATFORM
    typing_every: float | None = None  # no indicator: the prompt waits

    def __init__(self, screen: _Screen, files_dir: Path) -> None:
        self._screen = screen
        self._files_dir = files_dir

    async def send_answer(
        self,
        target: DeliveryTarget,
        text: str,
        *,
        confirm: Confirmation | None = None,
        files: Sequence[Attachment] = (),
    ) -> None:
        self._screen.write(text + "\n")
        for attachment in files:
            # The terminal's way of sending a file: save it beside the person.
            path = self._files_dir / Path(attachment.filename).name
            path.write_bytes(attachment.data)
            self._screen.write(f"[saved {path} ({len(attachment.data)} bytes)]\n")

    async def delete(self, target: DeliveryTarget, message_id: str | None) -> bool:
        """The terminal's own "delete the message": erase the echoed line that held the secret."""
        if self._screen.interactive:
            self._screen.write(_ERASE_PREVIOUS_LINE + PROMPT + "/private [hidden]\n")
        return True  # piped, the line was never shown

    async def show_typing(self, target: DeliveryTarget) -> None:
        return None

    async def send_delivery(self, delivery: OutboundDelivery) -> int:
        raise DeliveryFailed("the terminal takes no outbox rows", permanent=True, parts_sent=delivery.parts_sent)

    async def send_text(self, chat_id: str, text: str) -> str:
        raise DeliveryFailed("the terminal cannot be bound to", permanent=True, parts_sent=0)


def terminal_platform(
    core: ChatCore,
    edge: EdgeSettings,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    interactive: bool | None = None,
    files_dir: Path | None = None,
) -> Platform:
    """The terminal as a platform: stdin and stdout (default: the process's), `interactive` (default:
    whether stdin is a terminal) prompts and erases a secret's line, files are saved in `files_dir`
    (default: the working folder). `edge` is every platform's; the terminal neither retries nor waits."""
    source = stdin or sys.stdin
    screen = _Screen(source, stdout or sys.stdout, source.isatty() if interactive is None else interactive)
    return Platform(
        PLATFORM, TerminalIntake(core, screen), TerminalSender(screen, files_dir or Path.cwd()), streamer=None
    )
