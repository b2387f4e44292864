"""The terminal chat: one line a message on stdin, one reply on stdout; works piped."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import TextIO

from core.ports import MessageHandler
from core.values.copy import HANDLER_FAILED
from core.values.model import InboundMessage, Reply

log = logging.getLogger(__name__)

PROMPT = "you> "
_ERASE_PREVIOUS_LINE = "\x1b[1A\x1b[2K"


class TerminalChat:
    """The person at the terminal is the owner; the chat is one-to-one."""

    name = "terminal"

    def __init__(
        self,
        handler: MessageHandler,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        interactive: bool | None = None,
        files_dir: Path | None = None,
    ) -> None:
        self._handler = handler
        self._stdin = stdin or sys.stdin
        self._stdout = stdout or sys.stdout
        self._interactive = self._stdin.isatty() if interactive is None else interactive
        self._count = 0
        self._files_dir = files_dir or Path.cwd()

    async def run(self) -> None:
        """Answer each line in order until end of input."""
        loop = asyncio.get_running_loop()
        if self._interactive:
            self._write("Talking with your companion. /help lists commands; Ctrl-D ends.\n")
        while True:
            if self._interactive:
                self._write(PROMPT)
            line = await loop.run_in_executor(None, self._stdin.readline)
            if not line:
                if self._interactive:
                    self._write("\n")
                return
            text = line.rstrip("\r\n")
            if not text.strip():
                continue
            self._count += 1
            try:
                reply = await self._handler(
                    # No message id: a line has no platform id to deduplicate by (and none survives a restart).
                    InboundMessage("terminal", "terminal", "owner", text, is_direct=True)
                )
            except Exception as exc:  # noqa: BLE001 - one failed turn must not end the chat
                log.error("terminal: turn %d failed in the core (%s)", self._count, type(exc).__name__)
                reply = Reply(HANDLER_FAILED)
            if reply is None:
                continue
            if reply.delete_inbound and self._interactive:
                # The terminal's own "delete the message": erase the echoed line that held the passphrase.
                self._write(_ERASE_PREVIOUS_LINE + PROMPT + "/private [hidden]\n")
            self._write(reply.text + "\n")
            for attachment in reply.attachments:
                # The terminal's way of sending a file: save it beside the person.
                path = self._files_dir / Path(attachment.filename).name
                path.write_bytes(attachment.data)
                self._write(f"[saved {path} ({len(attachment.data)} bytes)]\n")

    def _write(self, text: str) -> None:
        self._stdout.write(text)
        self._stdout.flush()
