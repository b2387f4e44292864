"""The webhook inbox (issue 33): each delivered update stored durably before the 200, taken in order, its body deleted once handled.

SQL of `webhook_inbox` (migrations 0017). On PostgreSQL every body is sealed before it is sent, under a
transit key of the key folder (`TransitKeys`: `COMPANION_KEY_DIR/transit/`, adapters/storage/keys.py's
`KeyDir`), whatever the update holds: the inbox cannot know a private message from a normal one, and
PostgreSQL's WAL and backups keep what they were sent. A transit key seals for TRANSIT_SEAL_SECONDS,
expires by its name TRANSIT_LIFE_SECONDS after it was made, and is shredded sooner once no row names
it (`tidy`). A row whose key is gone is dropped, fail closed, with a log line of its ids alone. On
SQLite the body is kept as it came and deleted with secure_delete on (adapters/storage/database.py).

A handled row keeps its ids for TOMBSTONE_SECONDS, body deleted: Telegram delivers an update again when
its 200 was lost on the way, and the tombstone makes that a no-op as for an update still waiting.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from adapters.storage.engine import Database as Engine
from adapters.storage.engine import Fetch, Statement
from adapters.storage.keys import KeyDir, KeyDirError, key_ids
from adapters.storage.sealing import NONCE_BYTES, PREFIX, SEALED_PATTERN, KeyLost, SealBroken

log = logging.getLogger(__name__)

TRANSIT_SEAL_SECONDS = 600.0  # a transit key seals new bodies this long, then a new one is made
TRANSIT_LIFE_SECONDS = 3600.0  # and expires by its name this long after it was made
TOMBSTONE_SECONDS = 86400.0  # Telegram keeps an undelivered update at most a day
SPARE_SECONDS = 60.0  # a key's last body may take this long to reach the database
_SEALED = re.compile(SEALED_PATTERN)
# A shared database's transit folder: its mark (a file of the folder, never read as a key) and the database's copy.
FOLDER_MARK = "shared-database"
CHANNEL = "companion_webhook_inbox"  # NOTIFY'd at each update stored on a shared database
TRANSIT_STATE = "webhook:transit-folder"
TRANSIT_NOT_SHARED = (
    "COMPANION_SHARED_DATABASE: another live process stores Telegram's webhook updates under another transit key "
    "folder; every process must use one COMPANION_KEY_DIR/transit/ (the same COMPANION_KEY_DIR on one host, or "
    "that folder on a shared mount)"
)


@dataclass(frozen=True, slots=True)
class InboxRow:
    """One stored update: its id, its JSON body, opened, and its chat (None: an update of no chat)."""

    update_id: int
    body: str
    chat_id: str | None = None


class TransitKeys:
    """The webhook bodies' keys: AES-256-GCM, one key per TRANSIT_SEAL_SECONDS, the row's platform and update
    id in the associated data (a body moved to another row does not open). Keys live in `keys` only.

    Args:
        keys: the transit folder (`KeyDir(COMPANION_KEY_DIR / "transit")`).
    """

    def __init__(self, keys: KeyDir) -> None:
        self.keys = keys
        self._current: str | None = None
        self._sealing_until = 0.0
        self._making = asyncio.Lock()

    async def current(self, now: float) -> str:
        """The key id new bodies are sealed under at `now` (made, durable, when the last one's turn is over)."""
        async with self._making:
            if self._current is None or now >= self._sealing_until or self.keys.key(self._current) is None:
                try:
                    self._current = await asyncio.to_thread(self.keys.create, now + TRANSIT_LIFE_SECONDS)
                except OSError as exc:
                    raise KeyLost(f"no transit key could be made in the key folder ({type(exc).__name__})") from exc
                self._sealing_until = now + TRANSIT_SEAL_SECONDS
            return self._current

    def seal(self, key_id: str, place: str, text: str) -> str:
        key = self.keys.key(key_id)
        if key is None:
            raise KeyLost("the transit key is gone")
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        fresh = secrets.token_bytes(NONCE_BYTES)  # a random nonce per body, as sealing.py's
        sealed = AESGCM(key).encrypt(fresh, text.encode("utf-8"), place.encode("ascii"))
        return PREFIX + base64.urlsafe_b64encode(fresh + sealed).rstrip(b"=").decode("ascii")

    def open(self, key_id: str, place: str, stored: str) -> str | None:
        """The body sealed for `place`, or None when its key is gone.

        Raises:
            SealBroken: not sealed for this row, or altered.
        """
        key = self.keys.key(key_id)
        if key is None:
            return None
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if _SEALED.fullmatch(stored) is None:
            raise SealBroken("a webhook body is not sealed")
        body = stored[len(PREFIX) :]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            return AESGCM(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], place.encode("ascii")).decode("utf-8")
        except (binascii.Error, InvalidTag) as exc:
            raise SealBroken("a webhook body does not open under its transit key") from exc

    async def tidy(self, needed: Collection[str], now: float) -> int:
        """Shred every transit key expired by `now`, and every one no row names that no process can be sealing
        with any more (made over TRANSIT_SEAL_SECONDS and a minute ago: a body sealed under a newer one may be
        on its way to the database); how many were shredded."""
        expired = await asyncio.to_thread(self.keys.expire, now)
        before = key_count(self.keys)
        await asyncio.to_thread(
            lambda: self.keys.reconcile(set(needed), spare_after=now - TRANSIT_SEAL_SECONDS - SPARE_SECONDS)
        )
        return len(expired) + max(before - key_count(self.keys), 0)


class InboxQueries:
    """The webhook inbox of one database (adapters/telegram/webhook.py `WebhookInbox` is its port).

    Args:
        engine: the store's engine.
        transit: the transit keys (PostgreSQL); None on SQLite, where bodies are kept as they came.
        wall: the wall clock (a row's `received_at`, a key's expiry).
        process_id: this process's row in gateway_processes on a shared database: `take` leaves out the rows
            of chats another live process holds (their holder takes them). None: alone, every row is taken.
    """

    def __init__(
        self,
        engine: Engine,
        transit: TransitKeys | None,
        *,
        wall: Callable[[], float] = time.time,
        process_id: int | None = None,
    ) -> None:
        self._engine = engine
        self._transit = transit
        self._wall = wall
        self._process_id = process_id

    async def put(self, platform: str, update_id: int, body: str, chat_id: str | None = None) -> bool:
        """Store an update durably (committed and fsynced when this returns); False: it was there already.

        Raises:
            KeyLost: PostgreSQL without a usable key folder: nothing is stored.
        """
        now = self._wall()
        key_id: str | None = None
        stored = body
        if self._transit is not None:
            key_id = await self._transit.current(now)
            stored = self._transit.seal(key_id, _place(platform, update_id), body)
        elif self._engine.sealer.keyed:
            raise KeyLost("no key folder (COMPANION_KEY_DIR): no webhook update can be stored")
        # A shared database: the other processes' readers woken at the commit (`arrivals`), the holder among them.
        told = [] if self._process_id is None else [Statement(f"SELECT pg_notify('{CHANNEL}', :p)", {"p": platform})]
        inserted, *_ = await self._engine.write(
            Statement(
                "INSERT INTO webhook_inbox (platform, update_id, chat_id, body, key_id, received_at)"
                " VALUES (:platform, :update_id, :chat_id, :body, :key_id, :now)"
                " ON CONFLICT (platform, update_id) DO NOTHING",
                {
                    "platform": platform,
                    "update_id": update_id,
                    "chat_id": chat_id,
                    "body": stored,
                    "key_id": key_id,
                    "now": now,
                },
                Fetch.ROWCOUNT,
            ),
            *told,
            durable=True,
        )
        return inserted.rowcount == 1

    def arrivals(self) -> AsyncIterator[None] | None:
        """A shared PostgreSQL database: one item each time (or so) another process stored an update, from a
        connection of its own LISTENing on CHANNEL (ends with an error when that connection fails). None: alone,
        where the reader is woken by this process's own `put`."""
        listen = getattr(self._engine, "listen", None)  # PostgreSQL's engine (adapters/storage/postgres/engine.py)
        if self._process_id is None or listen is None:
            return None
        arrivals: AsyncIterator[None] = listen(CHANNEL, f"companion run inbox {self._process_id}")
        return arrivals

    async def take(self, platform: str, limit: int, skip: Collection[int] = ()) -> list[InboxRow]:
        """Up to `limit` stored updates of `platform` not in `skip`, by update id, their bodies opened. A row
        whose transit key is gone, or whose body does not open, is deleted (fail closed; logged by ids). On a
        shared database the rows of a chat whose conversation another process holds are not read (nor
        opened): that process takes them, in their order (`_HELD_ELSEWHERE`)."""
        params: dict[str, object] = {"platform": platform, "limit": limit + len(skip)}
        elsewhere = ""
        if self._process_id is not None:
            params["me"] = self._process_id
            elsewhere = f" AND NOT {_HELD_ELSEWHERE}"
        (found,) = await self._engine.read(
            Statement(
                "SELECT update_id, chat_id, body, key_id FROM webhook_inbox i WHERE platform = :platform"
                f" AND body IS NOT NULL{elsewhere} ORDER BY update_id LIMIT :limit",
                params,
                Fetch.ALL,
            )
        )
        taken: list[InboxRow] = []
        for row in found.rows:
            update_id = int(row["update_id"])
            if update_id in skip or len(taken) >= limit:
                continue
            body = self._opened(platform, update_id, row["body"], row["key_id"])
            if body is None:
                log.warning("inbox: %s update %s dropped: its transit key is gone", platform, update_id)
                await self.done(platform, update_id)
                continue
            chat = row["chat_id"]
            taken.append(InboxRow(update_id, body, None if chat is None else str(chat)))
        return taken

    async def done(self, platform: str, update_id: int) -> None:
        """A handled update: its body deleted, its ids kept as a tombstone (a redelivery stays a no-op)."""
        await self._engine.write(
            Statement(
                "UPDATE webhook_inbox SET body = NULL, key_id = NULL, handled_at = :now"
                " WHERE platform = :platform AND update_id = :update_id",
                {"platform": platform, "update_id": update_id, "now": self._wall()},
            )
        )

    async def depth(self, platform: str) -> int:
        """How many updates of `platform` wait in the inbox."""
        (found,) = await self._engine.read(
            Statement(
                "SELECT COUNT(*) AS n FROM webhook_inbox WHERE platform = :platform AND body IS NOT NULL",
                {"platform": platform},
                Fetch.ONE,
            )
        )
        return int(found.scalar or 0)

    async def tidy(self) -> None:
        """Delete the tombstones past TOMBSTONE_SECONDS; shred the transit keys no row needs any more, and those
        expired by their names (none on SQLite)."""
        now = self._wall()
        await self._engine.write(
            Statement("DELETE FROM webhook_inbox WHERE handled_at < :before", {"before": now - TOMBSTONE_SECONDS})
        )
        if self._transit is None:
            return
        (found,) = await self._engine.read(
            Statement("SELECT DISTINCT key_id FROM webhook_inbox WHERE key_id IS NOT NULL", {}, Fetch.ALL)
        )
        needed = {str(row["key_id"]) for row in found.rows if row["key_id"] is not None}
        shredded = await self._transit.tidy(needed, now)
        if shredded:
            log.info("inbox: %d transit keys shredded", shredded)

    async def bind_transit_folder(self, *, others_alive: bool) -> None:
        """A shared database: every process must open every stored body (any of them may take a chat over), so
        they share one transit folder. Its file FOLDER_MARK names it by a random token, which the database
        keeps too (adapter_state TRANSIT_STATE); a process whose folder names another token, or none, while
        another process is alive is refused. Alone, this folder becomes the database's: rows sealed under
        another folder's keys are then dropped when taken (fail closed).

        Raises:
            KeyDirError: another live process uses another transit folder (one line).
        """
        if self._transit is None:
            return
        folder = self._transit.keys.path
        mark = await asyncio.to_thread(_read_mark, folder)
        (found,) = await self._engine.read(
            Statement("SELECT value FROM adapter_state WHERE name = :name", {"name": TRANSIT_STATE}, Fetch.ONE)
        )
        known = None if found.one is None else str(found.one["value"])
        if mark is not None and mark == known:
            return
        if known is not None and others_alive:
            raise KeyDirError(TRANSIT_NOT_SHARED)
        if mark is None:
            mark = secrets.token_hex(16)
            await asyncio.to_thread(_write_mark, folder, mark)
        if known is None:
            statement = (
                "INSERT INTO adapter_state (name, value, updated_at) VALUES (:name, :value, :now)"
                " ON CONFLICT (name) DO NOTHING"
            )
        else:
            statement = "UPDATE adapter_state SET value = :value, updated_at = :now WHERE name = :name"
        _, after = await self._engine.write(
            Statement(statement, {"name": TRANSIT_STATE, "value": mark, "now": self._wall()}),
            Statement("SELECT value FROM adapter_state WHERE name = :name", {"name": TRANSIT_STATE}, Fetch.ONE),
        )
        if after.one is None or str(after.one["value"]) != mark:  # another process bound its folder first
            raise KeyDirError(TRANSIT_NOT_SHARED)
        log.info("inbox: this transit folder is the shared database's")

    def _opened(self, platform: str, update_id: int, stored: str, key_id: str | None) -> str | None:
        if self._transit is None:
            return stored
        if key_id is None:
            return None
        try:
            return self._transit.open(key_id, _place(platform, update_id), stored)
        except SealBroken:
            return None


# A row's chat claimed, and not by this process (a shared database: adapters/storage/claims.py). A live holder
# takes its rows; a dead or stopped one's conversations are taken over by the take-over job within its tick, with
# their recovery and their cut-off turns answered (core/turn/companion.py `take_over_dead`), and are then this
# process's. A chat never claimed (a new one) is open to all: the core's claim at its turn decides.
_HELD_ELSEWHERE = """EXISTS (SELECT 1 FROM conversations c JOIN chat_claims h ON h.conversation_id = c.id
  WHERE c.platform = i.platform AND c.chat_id = i.chat_id AND h.holder IS DISTINCT FROM :me)"""


def _read_mark(folder: Path) -> str | None:
    try:
        text = (folder / FOLDER_MARK).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if re.fullmatch(r"[0-9a-f]{32}", text) else None


def _write_mark(folder: Path, mark: str) -> None:
    """The folder's mark, written whole (a temporary file renamed) and durable."""
    temporary = folder / f".{FOLDER_MARK}.{secrets.token_hex(4)}"
    with open(temporary, "w", encoding="ascii") as handle:
        handle.write(mark)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, folder / FOLDER_MARK)
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def key_count(keys: KeyDir) -> int:
    return len(key_ids(keys.path))


def _place(platform: str, update_id: int) -> str:
    """The associated data of a body: sealed for one row, it opens nowhere else."""
    return f"webhook_inbox.body:{platform}:{update_id}"
