"""Normal-mode memory's ports: the pad, recall, goals, follow-ups and notes; the daily capture; the
run record (adapters.storage.memory.MemoryQueries implements all)."""

from __future__ import annotations

from typing import Protocol

from core.values.model import FollowUp, Goal, Note, PendingCapture, RecallHit, RunRecord


class MemoryStore(Protocol):
    """Normal-mode memory (the memory tools and commands, the owner's pages). Every lasting write
    (adding, changing or forgetting memory, goals and follow-ups) raises PrivateWriteRefused while
    the originating conversation (`origin`) has an open segment, and changes nothing; a False or 0
    result means only that there was nothing to change."""

    async def remember(self, person_id: int, origin: int, text: str, now: float) -> int: ...

    async def forget_pad_entry(self, person_id: int, origin: int, entry_id: int) -> int: ...

    async def forget_pad_matching(self, person_id: int, origin: int, text: str) -> int: ...

    async def recall(self, person_id: int, words: tuple[str, ...], limit: int = 8) -> list[RecallHit]:
        """Ranked full-text recall of normal memory and messages matching any of `words` (each a
        plain word: the adapter writes its engine's query syntax); never a private row."""
        ...

    async def add_goal(self, person_id: int, origin: int, title: str, due_at: float | None, now: float) -> int: ...

    async def goals(self, person_id: int, *, include_closed: bool = False) -> list[Goal]: ...

    async def update_goal(
        self,
        person_id: int,
        origin: int,
        goal_id: int,
        now: float,
        *,
        status: str | None = None,
        title: str | None = None,
    ) -> bool: ...

    async def add_followup(
        self, person_id: int, origin: int, kind: str, text: str, due_at: float | None, now: float
    ) -> int: ...

    async def followups(self, person_id: int) -> list[FollowUp]: ...

    async def set_followup_status(
        self, person_id: int, origin: int, followup_id: int, status: str, now: float
    ) -> bool: ...

    async def notes(self, person_id: int, limit: int = 20) -> list[Note]:
        """The person's newest daily notes, newest first (made from normal messages only)."""
        ...

    async def forget_note(self, person_id: int, origin: int, note_id: int) -> int:
        """Delete one of the person's daily notes (and its recall entry); 0: no such note."""
        ...


class CaptureStore(Protocol):
    """The daily capture's reads and writes (core.memory.capture.CaptureService)."""

    async def pending_capture(self, limit: int) -> list[PendingCapture]: ...

    async def save_capture(
        self, person_id: int, day: str, note: str, facts: tuple[str, ...], message_ids: list[int], now: float
    ) -> int: ...

    async def skip_capture(self, message_ids: list[int]) -> None: ...


class RunLog(Protocol):
    """The structural record of a normal turn (core.turn.responder.Responder): a run, or a tool
    operation outside a segment, raises PrivateWriteRefused while its conversation has an open
    segment."""

    async def record_tool_operation(
        self,
        conversation_id: int,
        segment_id: int | None,
        tool: str,
        status: str,
        args_bytes: int,
        result_bytes: int,
        now: float,
        *,
        server: str | None = None,
    ) -> None: ...

    async def save_run(self, run: RunRecord) -> None: ...
