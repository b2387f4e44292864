"""Where a canary typed in private mode may not be: the wall tests' (issue 22) shared look."""

from __future__ import annotations

import time
from dataclasses import dataclass

from adapters.storage.stores import Stores
from tests.helpers import engines


class ShiftedClock:
    """Real time plus an offset a test moves forward: the platforms' own timestamps (Telegram
    `date`, Discord snowflakes) stay comparable with it, and expiry can still be reached at once."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@dataclass(frozen=True)
class Traces:
    """Rows holding the canary where only normal mode's own words may be."""

    normal_rows: list[tuple]  # messages outside every interval (their text, or the words they keep for a mirror)
    recall: list[tuple]  # the recall index
    deliveries: list[tuple]  # outbox rows still holding it (any kind)
    mirrors: list[tuple]  # mirror rows, whatever their state (their text is cleared once sent)

    @property
    def anywhere(self) -> bool:
        return bool(self.normal_rows or self.recall or self.deliveries or self.mirrors)


async def traces(stores: Stores, canary: str) -> Traces:
    like = f"%{canary}%"
    columns = set(await engines.columns(stores, "messages"))
    said = " OR coalesce(said, '') LIKE :w" if "said" in columns else ""
    return Traces(
        normal_rows=[
            tuple(r)
            for r in await engines.rows(
                stores, f"SELECT id, text FROM messages WHERE segment_id IS NULL AND (text LIKE :w{said})", {"w": like}
            )
        ],
        recall=await engines.recall_entries(stores, like),
        deliveries=[
            tuple(r)
            for r in await engines.rows(stores, "SELECT id, kind, text FROM deliveries WHERE text LIKE ?", (like,))
        ],
        mirrors=[
            tuple(r)
            for r in await engines.rows(
                stores, "SELECT id, text FROM deliveries WHERE kind = 'mirror' AND coalesce(text, '') LIKE ?", (like,)
            )
        ],
    )


async def deliveries_after(stores: Stores, last_id: int) -> list[tuple]:
    """Every outbox row written after the one numbered `last_id`: (id, kind, segment, status)."""
    rows = await engines.rows(
        stores, "SELECT id, kind, segment_id, status FROM deliveries WHERE id > ? ORDER BY id", (last_id,)
    )
    return [tuple(r) for r in rows]


async def left_of_the_interval(stores: Stores, after: int, upto: int, *, restarted: bool) -> list[tuple]:
    """The outbox rows numbered after `after` up to `upto` still there. `restarted`: a restart ended the
    interval, and its constant answer to what it kept unread was written after that, in no interval
    and sent: it is left out (it holds no word, and no row of the interval stands for it)."""
    rows = [r for r in await deliveries_after(stores, after) if r[0] <= upto]
    if restarted:
        answers = [r for r in rows if r[2] is None and r[3] == "sent"][:1]
        assert answers, rows
        rows = [r for r in rows if r not in answers]
    return rows


async def last_delivery(stores: Stores) -> int:
    return (await engines.first(stores, "SELECT coalesce(max(id), 0) FROM deliveries"))[0]
