"""The ports of how private intervals and artifacts end: forgetting, expiry of artifacts, export and
confirmed crossings (adapters.storage.privacy.LifetimeQueries implements all)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from core.values.model import TimelineItem


class ForgetStore(Protocol):
    """`/forget private`: every private interval of a conversation goes, with what it holds."""

    async def delete_segments_of(self, conversation_id: int, now: float) -> int: ...


class ArtifactExpiry(Protocol):
    """Exported artifacts past their retention go (core.turn.recovery.Recovery)."""

    async def delete_expired_artifacts(self, now: float) -> int: ...


class ExportStore(Protocol):
    """`/export` and the confirmed crossing of a private interval's text out of it."""

    def export_items(self, conversation_id: int, *, visible_segment: int | None) -> AsyncIterator[TimelineItem]: ...

    async def segment_items(self, segment_id: int) -> list[TimelineItem]: ...

    async def request_crossing(self, segment_id: int, destination: str, now: float, confirm_by: float) -> int: ...

    async def confirm_crossing(
        self,
        segment_id: int,
        conversation_id: int,
        filename: str,
        content: str,
        now: float,
        expires_at: float | None,
    ) -> int | None: ...
