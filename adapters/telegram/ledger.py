"""Which Telegram updates are handled, kept so that a restart neither repeats nor skips one."""

from __future__ import annotations

import logging
from collections.abc import Iterable

log = logging.getLogger(__name__)


class UpdateLedger:
    """The handled update ids, compact enough to store after every update.

    `through`: every update fetched with an id up to it is handled. `above`: handled ids
    beyond it (a later chat finished first). `pending`: dispatched, not finished yet; never
    stored, so a crash leaves them to be delivered again. Stored as "through above..."
    (space-separated ids): no message content.
    """

    def __init__(self, through: int | None = None, above: Iterable[int] = ()) -> None:
        self.through = through
        self.above = set(above)
        self.pending: set[int] = set()

    @classmethod
    def parse(cls, value: str | None) -> UpdateLedger:
        try:
            ids = [int(part) for part in (value or "").split()]
        except ValueError:
            log.warning("telegram: the stored update ledger is malformed; starting from Telegram's offset")
            return cls()
        return cls(ids[0], ids[1:]) if ids else cls()

    def dump(self) -> str:
        if self.through is None and not self.above:
            return ""
        # Nothing settled yet: everything below the oldest update fetched was confirmed before.
        head = self.through if self.through is not None else min(self.pending | self.above) - 1
        return " ".join(str(i) for i in [head, *sorted(self.above)])

    @property
    def next_offset(self) -> int | None:
        """The getUpdates offset: confirms to Telegram exactly the updates settled as handled."""
        return None if self.through is None else self.through + 1

    def is_known(self, update_id: int) -> bool:
        return (
            (self.through is not None and update_id <= self.through)
            or update_id in self.pending
            or update_id in self.above
        )

    def begin(self, update_id: int) -> None:
        self.pending.add(update_id)

    def finish(self, update_id: int) -> None:
        self.pending.discard(update_id)
        self.above.add(update_id)
        floor = min(self.pending, default=None)
        settled = [i for i in self.above if floor is None or i < floor]
        if settled:
            self.through = max(settled) if self.through is None else max(self.through, *settled)
            self.above.difference_update(settled)
