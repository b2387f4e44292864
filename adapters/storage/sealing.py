"""Sealing of a private interval's words before they are stored: `Plaintext` (SQLite) or `IntervalKeys` (PostgreSQL).

Every engine carries one (`Database.sealer`, adapters/storage/engine.py); the query classes seal each
private row's words on write and open them on read, and nothing above adapters/ knows. `IntervalKeys`
seals each value with AES-256-GCM under its interval's own key (adapters/storage/keys.py keeps the keys,
never the database), so once the key is shredded nothing the database wrote (its files, WAL, backups,
dumps, replicas) can be read back. `cryptography` is imported by `IntervalKeys` when one is built, never
at this module's import: the SQLite path imports this module for `Plaintext` and needs no `postgres` extra.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
import secrets
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Protocol

from core.values.errors import StoreError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

# The columns that hold words in a row of an interval (issue31-design.md section 4, "What is sealed").
# A value is sealed for one of them and opens only there: the name is in the associated data.
SEALED_FIELDS = frozenset(
    {"messages.text", "summaries.text", "pad_entries.text", "deliveries.text", "crossings.destination"}
)

PREFIX = "s1."  # the format's version: a later cipher or layout gets "s2."
NONCE_BYTES = 12  # 96 bits, GCM's own size: a random nonce per value never repeats in practice under one key
TAG_BYTES = 16
# What a schema CHECK asks of a private row's text (PostgreSQL's `~` and Python's re.fullmatch read it
# alike): the prefix, then base64url without padding of nonce || ciphertext || tag, at least the 28 bytes
# of an empty text (38 characters). It proves the shape, not the sealing: a plain text typed in this exact
# shape would pass it, which is why every private write goes through `seal` whatever the CHECK says.
SEALED_PATTERN = r"^s1\.[A-Za-z0-9_-]{38,}$"
_SEALED = re.compile(SEALED_PATTERN)


class KeyLost(StoreError):
    """A private value cannot be sealed: its interval's key is gone (shredded, lost, or never bound).
    Nothing is written; an interval without its key is closed and deleted (fail closed)."""


class SealBroken(StoreError):
    """A stored value does not open under the key of the interval and column it is read for: moved to
    another row, altered, or never sealed. Its text is never returned."""


class Sealer(Protocol):
    """What the query classes call on every write and every read of a private row's words, and on each
    step of an interval's life (its key made before its segment row, shredded before its rows).

    `keyed`: whether stored words differ from the words (then SQL cannot compare them: the query classes
    compare in Python, inside the transaction) and intervals have keys to make, bind and shred."""

    keyed: bool

    def seal(self, segment_id: int, field: str, text: str) -> str:
        """The stored form of `text` for column `field` ("table.column") of interval `segment_id`.

        Raises:
            KeyLost: the interval has no key (nothing may be written for it).
        """
        ...

    def open(self, segment_id: int, field: str, stored: str) -> str | None:
        """The text `seal` was given for this interval and column, or None when the interval's key is gone.

        Raises:
            SealBroken: `stored` was not sealed for this interval and column (or was altered).
        """
        ...

    def has_key(self, segment_id: int) -> bool:
        """Whether interval `segment_id` can be sealed and opened (False: masked, fail closed)."""
        ...

    def bind(self, segment_id: int, key_id: str | None) -> None:
        """Interval `segment_id` is sealed under key `key_id` (its segment row's `key_id`)."""
        ...

    def unbind(self, segment_id: int) -> None:
        """Forget a deleted interval's key id."""
        ...

    async def create(self, expires_at: float | None) -> str | None:
        """A new key, durable when this returns, for an interval about to open (None: no keys here).

        Raises:
            KeyLost: no key can be made (no key folder, or it cannot be written): no interval may open.
        """
        ...

    async def shred(self, key_ids: Iterable[str]) -> None:
        """Destroy these keys: what they sealed never opens again, wherever a copy of it lies."""
        ...

    async def expire(self, now: float) -> list[str]:
        """Shred every key whose interval expired by `now`, asking no database; the ids shredded."""
        ...

    async def reconcile(self, live: Collection[str], *, spare_after: float | None = None) -> set[str]:
        """At start: shred every key no segment names (but those written at or after `spare_after`, wall
        clock: another process may be about to commit their segments); the `live` key ids left without a key."""
        ...


class Plaintext:
    """The identity: SQLite keeps private text in plain text until expiry (PRIVACY.md), deleted with
    `secure_delete` and the owed checkpoint. It has no keys: every interval is always readable."""

    keyed = False

    def seal(self, segment_id: int, field: str, text: str) -> str:
        return text

    def open(self, segment_id: int, field: str, stored: str) -> str | None:
        return stored

    def has_key(self, segment_id: int) -> bool:
        return True

    def bind(self, segment_id: int, key_id: str | None) -> None:
        pass

    def unbind(self, segment_id: int) -> None:
        pass

    async def create(self, expires_at: float | None) -> str | None:
        return None

    async def shred(self, key_ids: Iterable[str]) -> None:
        pass

    async def expire(self, now: float) -> list[str]:
        return []

    async def reconcile(self, live: Collection[str], *, spare_after: float | None = None) -> set[str]:
        return set()


class Unkeyed(Plaintext):
    """PostgreSQL without a key folder (no `key_dir`): it seals nothing and opens nothing, so no private word
    is ever written (the schema's CHECKs would refuse it in plain text anyway) and no interval opens; the
    rest of the store (normal mode, migrations, doctor) works. Binding and shredding are Plaintext's no-ops."""

    keyed = True

    def seal(self, segment_id: int, field: str, text: str) -> str:
        raise KeyLost("no key folder (COMPANION_KEY_DIR): private mode is unavailable")

    def open(self, segment_id: int, field: str, stored: str) -> str | None:
        return None

    def has_key(self, segment_id: int) -> bool:
        return False

    async def create(self, expires_at: float | None) -> str | None:
        raise KeyLost("no key folder (COMPANION_KEY_DIR): private mode is unavailable")

    async def reconcile(self, live: Collection[str], *, spare_after: float | None = None) -> set[str]:
        return set(live)


class KeySource(Protocol):
    """Where `IntervalKeys` finds a key's 32 bytes by its id, and makes and shreds keys
    (adapters/storage/keys.py `KeyDir`; its calls block on fsync, so they run in a thread here)."""

    def key(self, key_id: str) -> bytes | None: ...

    def create(self, expires_at: float | None) -> str: ...

    def shred(self, key_id: str) -> bool: ...

    def expire(self, now: float) -> list[str]: ...

    def reconcile(self, live: Collection[str], *, spare_after: float | None = None) -> set[str]: ...


class IntervalKeys:
    """AES-256-GCM under one key per interval. `bind` names the key of each segment (its `key_id`
    column); a segment that is not bound, or whose key is gone, seals nothing and opens to None.

    No cipher object outlives a call: the only copy of a key the companion keeps is the key source's,
    so a shred there leaves no key here to use."""

    keyed = True

    def __init__(self, keys: KeySource) -> None:
        # Here, not at the module's top: only a store that seals needs the `postgres` extra.
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aesgcm: type[AESGCM] = AESGCM
        self._invalid_tag: type[Exception] = InvalidTag
        self._keys = keys
        self._key_ids: dict[int, str] = {}

    def bind(self, segment_id: int, key_id: str | None) -> None:
        """Seal and open interval `segment_id` under key `key_id` (read from its segment row; None: it has none)."""
        if key_id is None:
            self._key_ids.pop(segment_id, None)
        else:
            self._key_ids[segment_id] = key_id

    def unbind(self, segment_id: int) -> None:
        """Forget a deleted interval's key id."""
        self._key_ids.pop(segment_id, None)

    def seal(self, segment_id: int, field: str, text: str) -> str:
        cipher = self._cipher(segment_id)
        if cipher is None:
            raise KeyLost(f"segment {segment_id} has no key")
        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = cipher.encrypt(nonce, text.encode("utf-8"), _place(segment_id, field))
        return PREFIX + base64.urlsafe_b64encode(nonce + sealed).rstrip(b"=").decode("ascii")

    def open(self, segment_id: int, field: str, stored: str) -> str | None:
        place = _place(segment_id, field)
        cipher = self._cipher(segment_id)
        if cipher is None:
            return None
        if _SEALED.fullmatch(stored) is None:
            raise SealBroken(f"{field} of segment {segment_id} is not sealed")
        body = stored[len(PREFIX) :]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            text = cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], place)
        except (binascii.Error, self._invalid_tag) as exc:
            raise SealBroken(f"{field} of segment {segment_id} does not open under its key") from exc
        return text.decode("utf-8")

    def has_key(self, segment_id: int) -> bool:
        key_id = self._key_ids.get(segment_id)
        return key_id is not None and self._keys.key(key_id) is not None

    async def create(self, expires_at: float | None) -> str:
        try:
            return await asyncio.to_thread(self._keys.create, expires_at)
        except OSError as exc:
            raise KeyLost(f"no key could be made in the key folder ({type(exc).__name__})") from exc

    async def shred(self, key_ids: Iterable[str]) -> None:
        wanted = list(key_ids)
        if wanted:
            await asyncio.to_thread(lambda: [self._keys.shred(key_id) for key_id in wanted])

    async def expire(self, now: float) -> list[str]:
        return await asyncio.to_thread(self._keys.expire, now)

    async def reconcile(self, live: Collection[str], *, spare_after: float | None = None) -> set[str]:
        return await asyncio.to_thread(lambda: self._keys.reconcile(live, spare_after=spare_after))

    def _cipher(self, segment_id: int) -> AESGCM | None:
        key_id = self._key_ids.get(segment_id)
        key = self._keys.key(key_id) if key_id is not None else None
        if key is None:
            return None
        return self._aesgcm(key)


def sealed(sealer: Sealer, segment_id: int | None, field: str, text: str) -> str:
    """What is stored of `text` in column `field` of a row of `segment_id`: sealed in a private row,
    as it is in a normal one (segment None)."""
    return text if segment_id is None else sealer.seal(segment_id, field, text)


def opened(sealer: Sealer, segment_id: int | None, field: str, stored: str | None) -> str | None:
    """The words of a stored value read from a row of `segment_id`: opened in a private row (None when its
    interval's key is gone: the row is left out, never shown), as stored in a normal one."""
    if stored is None or segment_id is None:
        return stored
    return sealer.open(segment_id, field, stored)


def _place(segment_id: int, field: str) -> bytes:
    """The associated data: a value sealed for one interval and column fails the tag anywhere else."""
    if field not in SEALED_FIELDS:
        raise ValueError(f"{field!r} is not a sealed column")  # a wiring mistake, caught before any key is used
    return f"{field}:{segment_id}".encode("ascii")
