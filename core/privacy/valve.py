"""The valve between normal and private mode: entry verified, exit free, every failure lands normal."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from core.ports.clock import Clock
from core.ports.store.attempts import AttemptLog
from core.ports.store.modes import ModeStore
from core.privacy.lockout import Lockout
from core.privacy.secrets import InvalidPassphraseHash, PassphraseHash
from core.values.durations import describe_seconds, parse_expiry
from core.values.model import Account, Conversation, Segment
from core.values.modes import NORMAL, UNREADABLE, ModeState, NormalState, PrivateState

log = logging.getLogger(__name__)

# How long a mode read may take before the message that asked is not used (normal mode, asked again): it
# bounds a store that hangs, not one that is busy. At 2 s a PostgreSQL gateway answering 200 conversations
# at once turned 1-5 % of their messages away while its event loop was behind (docs/benchmarks.md).
MODE_READ_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class EntryResult:
    entered: bool
    text: str


class ModeValve:
    """Reads and changes the mode of a conversation.

    The mode state is the conversation's open segment in the store; start-up closes
    every open segment, so boot always lands in normal mode. Reading the state fails
    toward normal on any error, timeout or malformed value. Only `enter` can open a
    segment, and only after the passphrase is verified; everything automatic
    (idle timeout, expiry, a group context) can only close one.
    """

    def __init__(
        self,
        store: ModeStore,
        attempts: AttemptLog,
        clock: Clock,
        *,
        passphrase_hash: str | None,
        default_expiry: str = "24h",
        idle_seconds: float | None = 30 * 60.0,
        read_timeout: float = MODE_READ_SECONDS,
        ended: Callable[[int], None] | None = None,
    ) -> None:
        self._store = store
        # Told the conversation each time one of its intervals ended here (the outbox: a send of it
        # still running is cancelled, what it showed is withdrawn). bot/bootstrap.py wires it.
        self._ended = ended
        self._clock = clock
        self._lockout = Lockout(
            "Private mode entry",
            "private mode",
            "passphrase",
            "That passphrase is not right.",
            attempts,
        )
        self._idle = idle_seconds
        self._read_timeout = read_timeout
        self._default_expiry = default_expiry
        self._hash: PassphraseHash | None = None
        self.unavailable_reason: str | None = None
        if not passphrase_hash:
            self.unavailable_reason = "no passphrase is configured (set COMPANION_PRIVATE_PASSPHRASE_HASH to what `companion passphrase` prints)"
        else:
            try:
                self._hash = PassphraseHash.parse(passphrase_hash)
            except InvalidPassphraseHash as exc:
                self.unavailable_reason = f"the configured passphrase hash is not valid ({exc})"
        # Conversations whose exit could not be written yet: they read as normal regardless.
        self._leaving: set[int] = set()
        # Conversations whose last mode read here found no segment open, and none opened here since: a
        # message of theirs may assume normal mode (`assumes_normal`), which its write then proves.
        self._read_normal: set[int] = set()

    @property
    def available(self) -> bool:
        return self._hash is not None

    # --- reading ----------------------------------------------------------

    def assumes_normal(self, conversation: Conversation) -> bool:
        """Whether a message of `conversation` may go without its mode read: its last read here found
        normal mode and nothing here opened a segment since. Only a hint: the store's write of the message
        refuses it whole while a segment is open (`InboxStore.add_inbound(assumed_normal=True)`), and the
        turn then settles the mode as usual; so a segment opened elsewhere (another process, a restart's
        take-over) costs that turn one trip more, never its wall."""
        return conversation.id in self._read_normal and conversation.id not in self._leaving

    async def settle(self, conversation: Conversation) -> ModeState:
        """The mode of `conversation` now, after closing a segment whose time is over (expiry, idle,
        a malformed row, a group): a read that may write. Never raises; every failure is normal mode."""
        self._read_normal.discard(conversation.id)  # until this read says so again
        if conversation.id in self._leaving:
            await self._retry_leave(conversation)
            return NORMAL
        try:
            # The bound in this task (no task of its own for the read, as wait_for would make).
            async with asyncio.timeout(self._read_timeout):
                segment = await self._store.open_segment_of(conversation.id)
        except Exception as exc:  # noqa: BLE001 - the failure direction is the point
            log.warning(
                "mode read failed for conversation %s (%s); normal mode, message not used",
                conversation.id,
                type(exc).__name__,
            )
            return UNREADABLE
        if segment is None:
            self._read_normal.add(conversation.id)
            return NORMAL
        if not _well_formed(segment):
            log.warning("segment %s has a malformed state; normal mode", segment.id)
            await self._close_quietly(segment, "malformed")
            return NORMAL
        if not conversation.is_direct:
            await self._close_quietly(segment, "group")
            return NORMAL
        now = self._clock.now()
        if segment.expires_at is not None and now >= segment.expires_at:
            await self._close_quietly(segment, "expired")
            try:  # its life is over: delete it now rather than at the next sweep
                await self._store.delete_expired_segments(now)
            except Exception as exc:  # noqa: BLE001 - the sweep retries; the turn must go on in normal mode
                log.warning("deleting expired segments failed (%s); the sweep retries", type(exc).__name__)
            self._tell_ended(conversation.id)
            return NormalState(notice="Private mode ended: its time ran out. You are in normal mode now.")
        if self._idle is not None and now - segment.last_activity_at >= self._idle:
            await self._close_quietly(segment, "idle")
            return NormalState(
                notice=f"Private mode ended after {describe_seconds(self._idle)} without messages. "
                "You are in normal mode now.",
            )
        return PrivateState(segment)

    def ends_at(self, segment: Segment) -> float | None:
        """When the segment will end by itself if nothing else happens (expiry or idle)."""
        ends = [t for t in (segment.expires_at,) if t is not None]
        if self._idle is not None:
            ends.append(segment.last_activity_at + self._idle)
        return min(ends) if ends else None

    async def lasting(self, conversation: Conversation) -> Segment | None:
        """A read that writes nothing, safe outside the conversation's lane: its open segment while
        that has not ended by itself by now (expiry, idle); None otherwise, and on any failure. It
        closes nothing: `settle` does, in the lane."""
        try:
            # The bound in this task (no task of its own for the read, as wait_for would make).
            async with asyncio.timeout(self._read_timeout):
                segment = await self._store.open_segment_of(conversation.id)
        except Exception as exc:  # noqa: BLE001 - the failure direction is the point
            log.warning("mode read failed for conversation %s (%s)", conversation.id, type(exc).__name__)
            return None
        if segment is None or not _well_formed(segment) or conversation.id in self._leaving:
            return None
        ends = self.ends_at(segment)
        return segment if ends is None or self._clock.now() < ends else None

    # --- entering (verified) ----------------------------------------------

    async def enter(
        self, conversation: Conversation, account: Account, passphrase: str, expiry_text: str | None
    ) -> EntryResult:
        """Verify and open a private segment. Bad input changes nothing."""
        if not conversation.is_direct:
            return EntryResult(
                False,
                "Private mode is only possible in a one-to-one chat with me, not in a group "
                "or channel. Nothing changed.",
            )
        if self._hash is None:
            return EntryResult(False, f"Private mode is unavailable: {self.unavailable_reason}.")
        if not passphrase:
            return EntryResult(False, "Usage: /private PASSPHRASE [EXPIRY], for example /private my-secret 2h.")
        try:
            lifetime = parse_expiry(expiry_text or self._default_expiry)
        except ValueError as exc:
            # parse_expiry's words never quote the text; the first letter is raised for a sentence.
            return EntryResult(False, f"{str(exc)[:1].upper()}{str(exc)[1:]}; nothing changed.")
        now = self._clock.now()
        locked, attempts = await self._lockout.refusal(account.id, now)
        if locked is not None:
            return EntryResult(False, locked)
        current = await self.settle(conversation)
        if current.is_private:
            return EntryResult(False, "You are already in private mode. /normal leaves it.")
        ok = await asyncio.to_thread(self._hash.verify, passphrase)
        if not ok:
            line, tries = await self._lockout.failed(account.id, now, attempts)
            log.info("private-mode entry refused for account %s (attempt %d)", account.id, tries)
            return EntryResult(False, line)
        await self._lockout.succeeded(account.id)
        expires_at = None if lifetime is None else now + lifetime
        self._read_normal.discard(conversation.id)
        segment = await self._store.open_segment(conversation.id, now, expires_at)
        log.info("private segment %s opened in conversation %s", segment.id, conversation.id)
        life = (
            "it is kept until you delete it"
            if lifetime is None
            else f"it is deleted after {describe_seconds(lifetime)}"
        )
        return EntryResult(True, f"Private mode is on; {life}. /normal leaves it.")

    # --- leaving (never verified, never fails) -----------------------------

    async def leave(self, conversation: Conversation, reason: str = "user") -> bool:
        """Close the open segment, if any. Returns whether private mode was on (best knowledge).
        If the store fails, the conversation is held in normal mode and the close is retried."""
        try:
            closed = await asyncio.wait_for(
                self._store.close_open_segments(conversation.id, self._clock.now(), reason), self._read_timeout
            )
        except Exception as exc:  # noqa: BLE001 - leaving never fails: held in normal mode, retried
            log.warning(
                "closing the segment of conversation %s failed (%s); held in normal mode",
                conversation.id,
                type(exc).__name__,
            )
            self._leaving.add(conversation.id)
            return True
        self._leaving.discard(conversation.id)
        if closed > 0:
            self._tell_ended(conversation.id)
        return closed > 0

    async def _retry_leave(self, conversation: Conversation) -> None:
        try:
            await asyncio.wait_for(
                self._store.close_open_segments(conversation.id, self._clock.now(), "user"), self._read_timeout
            )
        except Exception:  # noqa: BLE001 - still held in normal mode; the next turn retries
            return
        self._leaving.discard(conversation.id)
        self._tell_ended(conversation.id)

    async def _close_quietly(self, segment: Segment, reason: str) -> None:
        try:
            await self._store.close_segment(segment.id, self._clock.now(), reason)
            log.info("private segment %s closed (%s)", segment.id, reason)
        except Exception as exc:  # noqa: BLE001 - the conversation is held in normal mode until it closes
            log.warning("closing segment %s failed (%s)", segment.id, type(exc).__name__)
            self._leaving.add(segment.conversation_id)
            return
        if reason != "expired":  # an expired one is told once deleted (see `settle`)
            self._tell_ended(segment.conversation_id)

    def _tell_ended(self, conversation_id: int) -> None:
        if self._ended is None:
            return
        try:
            self._ended(conversation_id)
        except Exception as exc:  # noqa: BLE001 - the interval ended in the store whatever the listener does
            log.warning("telling that an interval ended failed (%s)", type(exc).__name__)


def _well_formed(segment: Segment) -> bool:
    def number(value: object) -> bool:
        return isinstance(value, (int, float)) and math.isfinite(value)

    return (
        number(segment.started_at)
        and number(segment.last_activity_at)
        and (segment.expires_at is None or number(segment.expires_at))
    )
