"""Capture: normal messages become daily notes, and stable facts join the normal pad.

Private text cannot reach this path: private messages are inserted 'skipped', and the
store's pending query also joins against the conversation kind and the segments.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime
from zoneinfo import ZoneInfo

from core.memory.context import split_facts
from core.ports.clock import Clock
from core.ports.model import BaseProvider
from core.ports.store.memory import CaptureStore
from core.values import copy
from core.values.errors import ProviderError, ProviderRejected
from core.values.model import ChatMessage, CompletionRequest, PendingCapture
from core.values.names import speaker

log = logging.getLogger(__name__)

LINE_CHARS = 2000
# Answers that say the request itself is unacceptable (too long, malformed): retrying is futile.
_REQUEST_REFUSED = frozenset({400, 413, 422})


class CaptureService:
    def __init__(
        self, store: CaptureStore, provider: BaseProvider, clock: Clock, timezone: str = "UTC", batch: int = 200
    ) -> None:
        self._store = store
        self._provider = provider
        self._clock = clock
        self._tz = ZoneInfo(timezone)
        self._batch = batch

    async def run_once(self) -> int:
        """Capture what is pending; returns how many messages were captured."""
        pending = await self._store.pending_capture(self._batch)
        groups: dict[tuple[int, str], list[PendingCapture]] = defaultdict(list)
        for item in pending:
            day = datetime.fromtimestamp(item.created_at, self._tz).strftime("%Y-%m-%d")
            groups[(item.person_id, day)].append(item)
        captured = 0
        for (person_id, day), items in groups.items():
            # Each message at most LINE_CHARS: one long message cannot make the note's request too big.
            lines = "\n".join(f"{speaker(i.role, person='Person')}: {i.text[:LINE_CHARS]}" for i in items)
            request = CompletionRequest(
                messages=(ChatMessage("system", copy.CAPTURE_INSTRUCTION), ChatMessage("user", lines)),
                purpose="capture",
                temperature=0.2,
            )
            try:
                completion = await self._provider.complete(request)
            except ProviderRejected as exc:
                if exc.status in _REQUEST_REFUSED:
                    # The same request would be refused again: these messages go without a note.
                    await self._store.skip_capture([i.message_id for i in items])
                    log.warning(
                        "capture for person %s refused (%s); %d messages skipped", person_id, exc.status, len(items)
                    )
                else:  # e.g. a rejected API key: fixed by the operator, then captured
                    log.warning("capture for person %s failed (%s); stays pending", person_id, exc.status)
                continue
            except ProviderError as exc:
                log.warning("capture for person %s failed (%s); stays pending", person_id, type(exc).__name__)
                continue
            note, facts = split_facts(completion.text, "NOTE", limit=2000)
            if not note:
                note = f"{len(items)} messages."
            await self._store.save_capture(
                person_id, day, note, facts, [i.message_id for i in items], self._clock.now()
            )
            captured += len(items)
        if captured:
            log.info("captured %d messages into %d notes", captured, len(groups))
        return captured
