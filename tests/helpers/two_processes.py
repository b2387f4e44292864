"""The privacy tests with two processes on one PostgreSQL database (issue 33 point 3): `store_backend`'s third
case, `postgres-shared`, for the tests marked `privacy` (tests/helpers/engine_fixtures.py).

Process A is the test's: its `stores` are those of a process of a shared database (COMPANION_SHARED_DATABASE), as
`companion run` opens them: registered in gateway_processes by its SharedInstanceLock (beating), its pools naming
it in `companion.process` (so the schema's fence fires on its writes), its chat claims on (the companion's turns
claim their conversation first), its key folder. Process B is a second gateway beside it on the same database:
its own registration, pools, model (a FakeProvider of its own), outbox and Companion (its nudges on), sharing the
clock, and A's whole key folder or one of its own (`Variant`). Both are in the test's own process: two Database
instances, two registry entries; what only a real OS process shows (a SIGKILL mid-interval) is
tests/bot/test_shared_database_wire.py's.

Each time A's model is asked (the test's `provider`: a turn of A half done, its interval live), B takes a turn
(`SecondProcess.while_first_answers`): its take-over job takes nothing, and nothing it reads in normal mode holds a
word of A's private rows. After the test's body (its own assertions passed), `SecondProcess.check` walks the
seed's guarantees from B's side, whatever state the test left (an interval open, closed, expired, forgotten):
  1. while A serves, B starts again (its crash recovery, its key folder reconciled), is sent a message of each
     direct conversation A holds (it neither answers nor stores it), and runs what a gateway runs on a schedule
     (take-over, the expiry sweep, capture, nudges, the outbox and its prune) and what it reads of other
     conversations (every conversation's normal context, every person's recall, notes and pad): B closes none of
     A's live intervals, takes none of A's conversations, and nothing B's model, senders or reads got, and no
     normal row after it, holds a word of A's private rows (as A wrote them, or sealed);
  2. A dies (its registration's connection ends, as a SIGKILL ends it) and B takes its conversations over, by a
     message of each reaching it (answered in normal mode) or by its take-over job first (`Variant`): every
     interval A had open lands in normal mode (closed, never resumed: B's valve settles them normal), B answers
     what was cut off, and again nothing B's model, senders or reads got, and no normal row, holds a private word.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from adapters.storage.postgres.engine import PostgresDatabase
from adapters.storage.postgres.processes import ALIVE, SharedInstanceLock
from adapters.storage.sealing import SealBroken
from adapters.storage.stores import Stores
from bot.bootstrap import build_companion
from core.delivery.outbox import Outbox
from core.memory.operations import words_of
from core.ports.model import PartialSink
from core.proactive.manners import Manners
from core.proactive.service import ProactiveConfig
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.values import copy
from core.values.model import Completion, CompletionRequest, Conversation, ConversationKey, InboundMessage
from tests.helpers import engines
from tests.helpers.fakes import FakeClock, FakeProvider, FakeSender, request_text

PLATFORMS = ("terminal", "telegram", "discord")  # what the privacy tests talk on; B serves them all
# The fake model's own lines (tests/helpers/fakes.py): the same in every process, words of nobody's.
CANNED = re.compile(r"reply \d+|SUMMARY:\nfolded\nFACTS:\n- none|folded")
AFTER = "a word to the process that took the conversation over"
SHORTEST = 8  # a private word shorter than this may be any normal line's part: not looked for


async def registered(url: str, keys: Path) -> tuple[SharedInstanceLock, Stores]:
    """A process of the shared database at `url`, as `companion run` opens its stores (bot/bootstrap.py
    `open_settings_stores` with `registered_process`): its lock acquired (the process registered, beating), its
    stores over a PostgresDatabase naming it, its keys in `keys`."""
    await asyncio.to_thread(keys.mkdir, mode=0o700, exist_ok=True)
    lock = SharedInstanceLock(url)
    await lock.acquire()
    try:
        stores = Stores.over(
            PostgresDatabase(url, key_dir=keys, process_id=lock.process_id), process_id=lock.process_id
        )
        await stores.database.start()
    except BaseException:
        await lock.aclose()
        raise
    return lock, stores


@dataclass(frozen=True)
class Variant:
    """How the two processes are set up, each way a deployment may be. `shared_keys`: B uses A's whole key folder
    (PRIVACY.md allows it: B could then open A's private words, and only the data layer keeps them from it), or
    one of its own (as recommended: B cannot open them, and A's intervals are keyless to it). `message_first`: once
    A died, a message of each of its conversations reaches B before B's take-over job runs (the turn's claim takes
    the conversation over), or after it."""

    shared_keys: bool
    message_first: bool

    @classmethod
    def of(cls, name: str) -> Variant:
        """The variant of a test, by its name: each of the four for about a quarter of the tests, the same at
        every run."""
        bits = zlib.crc32(name.encode())
        return cls(shared_keys=bool(bits & 1), message_first=bool(bits & 2))


@dataclass
class SecondProcess:
    """Process B: a second gateway on A's database (see the module's docstring)."""

    lock: SharedInstanceLock
    stores: Stores
    clock: FakeClock
    passphrase_hash: str
    variant: Variant
    provider: FakeProvider = field(default_factory=FakeProvider)
    senders: dict[str, FakeSender] = field(default_factory=dict)
    # What failed while A's model was answering (raised there, a failure could pass for the model's own).
    failures: list[Exception] = field(default_factory=list)

    async def while_first_answers(self, a: Stores) -> None:
        """B's turn while A's model answers (a turn of A half done, its interval live, what was said in it
        stored): its take-over job takes nothing of a live process, and nothing B reads in normal mode of any
        conversation or person holds a word of A's private rows."""
        claims = self.stores.claims
        assert claims is not None
        try:
            assert await claims.take_over_dead() == [], "a second process took over a live process's conversation"
            words = await private_words(a)
            read = "\n".join(await self.normal_reads(words.said))
            leaked = sorted(w for w in words.every if w in read)
            assert leaked == [], f"{len(leaked)} private words read by a second process while the first answered"
        except Exception as exc:  # kept for the check after the test (a cancellation goes on)
            self.failures.append(exc)

    async def start(self) -> Companion:
        """B's Companion started (as at a gateway's start: crash recovery, the key folder reconciled), every account
        of the database allowed."""
        accounts = await engines.rows(self.stores, "SELECT platform, platform_user_id FROM accounts")
        claims = self.stores.claims
        assert claims is not None
        # As bot/bootstrap.py builds a gateway's: it sends only for the conversations this process holds.
        outbox = Outbox(self.stores.outbox, self.clock, rand=lambda: 1.0, holds=claims.holds)
        for platform in PLATFORMS:
            outbox.register(self.senders.setdefault(platform, FakeSender(platform)))
        companion = build_companion(
            self.stores,
            self.provider,
            CompanionConfig(
                passphrase_hash=self.passphrase_hash,
                allowed_accounts=frozenset(f"{platform}:{user}" for platform, user in accounts),
                proactive=ProactiveConfig(Manners(quiet_hours=None)),
            ),
            clock=self.clock,
            outbox=outbox,
        )
        await companion.start()
        return companion

    async def check(self, a: Stores, a_lock: SharedInstanceLock) -> None:
        """The guarantees from B's side, A alive then dead (the module's docstring)."""
        a_id = a_lock.process_id
        assert a_id is not None
        if self.failures:
            raise self.failures[0]
        words = await private_words(a)
        held = await conversations_held_by(self.stores, a_id)
        open_before = await open_segments(self.stores, held)

        companion = await self.start()
        assert await companion.take_over_dead() == 0, "a second process took over a live process's conversations"
        await self.talk(companion, held, held_elsewhere=True)
        await self.run_jobs(companion)
        closed = [s for s in open_before if s in await ended_segments(self.stores)]
        assert closed == [], "a second process's start or jobs closed a live process's private interval"
        await self.no_private_word(words, "while the first process serves")

        await die(a_lock, self.stores)
        if self.variant.message_first:
            # A message of each reaches B before its take-over job runs: the turn's claim takes it over.
            await self.talk(companion, held, held_elsewhere=False)
        await companion.take_over_dead()
        assert await conversations_held_by(self.stores, a_id) == []
        assert await open_segments(self.stores, held) == [], "a dead process's private interval was resumed"
        for conversation_id in held:
            conversation = await conversation_of(self.stores, conversation_id)
            if conversation is not None:
                state = await companion.valve.settle(conversation)
                assert not state.is_private, "a dead process's private interval was resumed as private"
        if not self.variant.message_first:
            await self.talk(companion, held, held_elsewhere=False)
        await self.run_jobs(companion)
        await companion.drain()
        await self.no_private_word(words, "after the first process died")

    async def talk(self, companion: Companion, conversation_ids: list[int], *, held_elsewhere: bool) -> None:
        """A message from its person in each direct conversation of `conversation_ids`: while the other process
        holds them (`held_elsewhere`), B neither answers nor stores it; once B took them over, it answers in
        normal mode."""
        for platform, chat_id, user in await engines.rows(
            self.stores,
            "SELECT c.platform, c.chat_id, min(a.platform_user_id) FROM conversations c"
            " JOIN accounts a ON a.person_id = c.person_id AND a.platform = c.platform"
            " WHERE c.kind = 'direct' GROUP BY c.id, c.platform, c.chat_id ORDER BY c.id",
        ):
            conversation = await self.stores.timeline.conversation_at(ConversationKey(platform, chat_id))
            if conversation is None or conversation.id not in conversation_ids:
                continue
            before, stored = len(self.provider.requests), await engines.ids_saying(self.stores, "messages", AFTER)
            message = InboundMessage(platform, chat_id, user, AFTER, is_direct=True, sent_at=self.clock.now() + 1)
            reply = await companion.handle(message)
            replies = [r for r in self.provider.requests[before:] if r.purpose == "reply"]
            if held_elsewhere:
                assert reply is None and self.provider.requests[before:] == [], "a conversation held elsewhere ran here"
                assert await engines.ids_saying(self.stores, "messages", AFTER) == stored
                continue
            assert replies, "the process that took the conversation over did not answer it"
            assert copy.PRIVATE_SYSTEM_LINE not in request_text(replies[-1]), "a taken-over interval was resumed"

    async def run_jobs(self, companion: Companion) -> None:
        """What a gateway runs on a schedule (bot/bootstrap.py `scheduled_jobs`), once each."""
        await companion.sweep()
        await companion.capture.run_once()
        if companion.proactive is not None:
            await companion.proactive.tick()
        if companion.outbox is not None:
            await companion.outbox.dispatch_due()
            await companion.outbox.settle(1.0)
            await companion.outbox.prune()

    async def no_private_word(self, words: PrivateWords, when: str) -> None:
        """No word of A's private rows in what B's model and senders got, in what B reads of any conversation or
        person in normal mode, nor in any normal row."""
        seen = [request_text(r) for r in self.provider.requests]
        seen += [part for sender in self.senders.values() for _, part, _ in sender.sent]
        seen += await self.normal_reads(words.said)
        seen += await normal_rows(self.stores)
        everything = "\n".join(seen)
        leaked = sorted(w for w in words.every if w in everything)
        assert leaked == [], f"{len(leaked)} private words reached the second process or a normal row ({when})"

    async def normal_reads(self, words: frozenset[str]) -> list[str]:
        """What B reads in normal mode of every conversation and person: the context a normal turn reads,
        recall of every word of A's private rows (`words`), the notes, the normal pad and the analytics report."""
        timeline, memory = self.stores.timeline, self.stores.memory
        read: list[str] = [repr(await memory.report_rows())]
        conversations = await engines.rows(self.stores, "SELECT id, person_id FROM conversations")
        for conversation_id, person_id in conversations:
            reads = await timeline.context_reads(
                conversation_id, person_id=person_id, segment_id=None, limit=500, count_up_to=500
            )
            read += [item.text or "" for item in reads.items]
            read += [entry.text for entry in reads.normal_pad]
            read.append(reads.normal_summary.text if reads.normal_summary is not None else "")
        for (person_id,) in await engines.rows(self.stores, "SELECT id FROM people"):
            read += [note.text for note in await memory.notes(person_id, limit=500)]
            read += [entry.text for entry in await timeline.normal_pad(person_id)]
            asked = tuple(sorted({part for word in words for part in words_of(word)}))
            read += [hit.text for hit in await memory.recall(person_id, asked, limit=500)]
        return read


@dataclass
class TwoProcesses:
    """Process A (`a`, the test's stores, and its lock) and process B (`second`) on one database."""

    a: Stores
    a_lock: SharedInstanceLock
    second: SecondProcess

    async def check(self) -> None:
        await self.second.check(self.a, self.a_lock)


def watch(provider: FakeProvider, processes: Callable[[], TwoProcesses | None]) -> None:
    """B takes its turn (`SecondProcess.while_first_answers`) each time A's model (`provider`) is asked, before it
    answers, once `processes` gives the two (the test's `stores` made them)."""
    complete = provider.complete

    async def watched(request: CompletionRequest, *, partial: PartialSink | None = None) -> Completion:
        if (both := processes()) is not None:
            await both.second.while_first_answers(both.a)
        return await complete(request, partial=partial)

    provider.complete = watched  # type: ignore[method-assign]


@asynccontextmanager
async def two_processes(
    url: str, keys: Path, clock: FakeClock, passphrase_hash: str, variant: Variant
) -> AsyncIterator[TwoProcesses]:
    """A and B, both registered on the database at `url`: A's keys in `keys`, B's there too or beside it (`variant`;
    made here); `check` is the caller's to run. Both closed (deregistered) at the end."""
    a_lock, a = await registered(url, keys)
    try:
        b_lock, b = await registered(url, keys if variant.shared_keys else keys.with_name(keys.name + "-b"))
        try:
            yield TwoProcesses(a, a_lock, SecondProcess(b_lock, b, clock, passphrase_hash, variant))
        finally:
            await b.database.aclose()
            await b_lock.aclose()
    finally:
        await a.database.aclose()
        await a_lock.aclose()


@dataclass(frozen=True)
class PrivateWords:
    """The words of A's private rows: as said (opened with A's keys) and as stored (sealed)."""

    said: frozenset[str]
    sealed: frozenset[str]

    @property
    def every(self) -> frozenset[str]:
        return self.said | self.sealed


async def private_words(stores: Stores) -> PrivateWords:
    """Every private row's words (messages, summaries, pad entries), opened with the keys of `stores`' process
    and as stored (sealed), but those any normal row or constant line holds too (they tell nothing apart), the
    fake model's canned lines and the shortest."""
    said: set[str] = set()
    sealed: set[str] = set()
    for table, segment_id, stored in await engines.rows(
        stores,
        " UNION ALL ".join(
            f"SELECT '{table}' AS t, segment_id, text FROM {table} WHERE segment_id IS NOT NULL"
            for table in ("messages", "summaries", "pad_entries")
        ),
    ):
        opened = None
        # A row a test planted sealed for another column or interval does not open: its stored form is enough.
        with contextlib.suppress(SealBroken):
            opened = engines.opened(stores, segment_id, f"{table}.text", stored)
        if opened != stored:
            sealed.add(stored or "")
        said.add(opened or "")
    common = "\n".join([*await normal_rows(stores), *(v for v in vars(copy).values() if isinstance(v, str))])

    def telling(words: set[str]) -> frozenset[str]:
        return frozenset(w for w in words if len(w) >= SHORTEST and not CANNED.fullmatch(w) and w not in common)

    return PrivateWords(telling(said), telling(sealed))


async def normal_rows(stores: Stores) -> list[str]:
    """The words of every normal row that lasts: messages and summaries outside every interval, notes, pad."""
    found = await engines.rows(
        stores,
        "SELECT text FROM messages WHERE segment_id IS NULL UNION ALL"
        " SELECT text FROM summaries WHERE segment_id IS NULL UNION ALL"
        " SELECT text FROM pad_entries WHERE segment_id IS NULL UNION ALL SELECT text FROM notes",
    )
    return [row[0] or "" for row in found]


async def conversations_held_by(stores: Stores, process_id: int) -> list[int]:
    found = await engines.rows(
        stores, "SELECT conversation_id FROM chat_claims WHERE holder = ? ORDER BY conversation_id", (process_id,)
    )
    return [int(row[0]) for row in found]


async def open_segments(stores: Stores, conversation_ids: list[int]) -> list[int]:
    found = await engines.rows(stores, "SELECT id, conversation_id FROM segments WHERE ended_at IS NULL ORDER BY id")
    return [int(row[0]) for row in found if row[1] in conversation_ids]


async def ended_segments(stores: Stores) -> list[int]:
    return [int(row[0]) for row in await engines.rows(stores, "SELECT id FROM segments WHERE ended_at IS NOT NULL")]


async def conversation_of(stores: Stores, conversation_id: int) -> Conversation | None:
    found = await engines.rows(stores, "SELECT platform, chat_id FROM conversations WHERE id = ?", (conversation_id,))
    return await stores.timeline.conversation_at(ConversationKey(found[0][0], found[0][1])) if found else None


async def die(lock: SharedInstanceLock, other: Stores) -> None:
    """A process dies: its registration's connection ends (a SIGKILL's effect on the database: its key released
    at once, so the others count it dead), its pools left as they are. Returns once `other` counts it dead."""
    held = lock._held
    assert held is not None
    await held.conn.close()
    async with asyncio.timeout(30):
        while True:
            if not await engines.rows(
                other, f"SELECT 1 FROM gateway_processes p WHERE p.id = ? AND {ALIVE}", (lock.process_id,)
            ):
                break
            await asyncio.sleep(0.01)  # its server process exits (its key released) a moment after the close
