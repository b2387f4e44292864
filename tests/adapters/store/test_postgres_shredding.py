"""Issue 31 point 3 on a real PostgreSQL: once an interval ends, nothing PostgreSQL wrote holds its words or its key."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import re
import secrets
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from adapters.storage.sealing import SEALED_FIELDS
from adapters.storage.stores import Stores
from core.memory.context import ContextBudget
from core.values.errors import StoreError
from core.values.model import (
    Completion,
    CompletionRequest,
    ConversationKey,
    DeliveryTarget,
    OutboundDelivery,
    Summary,
)
from tests.helpers.engine_fixtures import did_not_start, need_psycopg
from tests.helpers.fakes import FakeClock, FakeProvider, request_text
from tests.helpers.postgres import KEEPING_EVERY_BYTE, CopiesOf, PostgresCluster, PostgresUnavailable, holding

# One cluster and its replica for the whole module (seconds each to start): under xdist one worker runs the
# whole module (tests/conftest.py: ONE_WORKER), or each worker given one of its tests would start its own.

T = TypeVar("T")
NOW = 1_000_000.0
HOUR = 3600.0
REPLICA_PORT = 5433  # its own socket file, in its own folder
TARGET = DeliveryTarget("telegram", "1")
# The places of a private word (issue31-design.md section 4, "What is sealed"), each written through the store.
# Each canary is short: stored as it is, never compressed (pglz), so a word that was not sealed is found as written.
PLACES = (
    "inbound",
    "said",
    "edited",
    "message",
    "reply",
    "delivery",
    "appended",
    "streamed",
    "summary",
    "pad",
    "crossing",
)
SEALED = re.compile(rb"s1\.[A-Za-z0-9_-]{38,}")
PLACEHOLDER = "(the placeholder)"
SMALL_BUDGET = ContextBudget(total_tokens=320, fold_min=2, fold_batch=6)  # folds within a few turns


@dataclass
class Kept:
    """The module's cluster keeping every byte (a WAL archive, statements logged whole) and its streaming replica."""

    cluster: PostgresCluster
    copies: CopiesOf
    replica: PostgresCluster
    folders: pytest.TempPathFactory

    def places(self, *taken: Path) -> dict[str, Path]:
        """Every place PostgreSQL keeps bytes, the copies `taken` while an interval lived among them."""
        cluster, replica = self.cluster, self.replica
        return {
            "the primary's data directory (pg_wal too)": cluster.data,
            "the WAL archive": cluster.archive_dir,
            "the primary's server log": cluster.log_path,
            # Not the replica's server log: a standby runs none of the statements, so no control could show the
            # scan would find a word there.
            "the replica's data directory": replica.data,
            **{f"{path.name}, taken while it lived": path for path in taken},
        }


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kept]:
    cluster = PostgresCluster(settings=KEEPING_EVERY_BYTE, archive=True)
    try:
        need_psycopg()
        cluster.start()
        copies = CopiesOf(cluster)
        replica = copies.replica(port=REPLICA_PORT)
    except PostgresUnavailable as exc:
        cluster.stop()
        did_not_start(exc)
    try:
        yield Kept(cluster, copies, replica, tmp_path_factory)
    finally:
        for server in (replica, cluster):
            server.halt("immediate")  # its folder goes next: nothing to write out first
            server.stop()


def run(work: Callable[[], Awaitable[T]]) -> T:
    """A coroutine run to its end in a loop of its own (module fixtures are not async)."""
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, work()).result()


async def opened(kept: Kept, database: str, key_dir: Path) -> Stores:
    """The store over `database` of the kept cluster, sealing with the keys of `key_dir`, started."""
    from adapters.storage.postgres.engine import PostgresDatabase

    stores = Stores.over(PostgresDatabase(kept.cluster.url(database), key_dir=key_dir))
    await stores.database.start()
    return stores


# --- an interval, written through the store -----------------------------------------------------------


@dataclass
class Interval:
    """A private interval with a canary in every place a private word goes, and a normal canary beside it."""

    chat: str
    conversation_id: int
    person_id: int
    segment_id: int
    words: dict[str, str]
    normal: str
    keys: dict[str, bytes] = field(default_factory=dict)  # its key file's name: the 32 bytes, read while it lived

    def needles(self, label: str) -> dict[str, bytes]:
        """Its words and its key in every form a key is written down (raw, hex, base64, base64url)."""
        found = {f"{label}: the private word of {place}": word.encode() for place, word in self.words.items()}
        for name, key in self.keys.items():
            found |= {
                f"{label}: key {name} ({form})": needle
                for form, needle in (
                    ("raw", key),
                    ("hex", key.hex().encode()),
                    ("HEX", key.hex().upper().encode()),
                    ("base64", base64.b64encode(key).rstrip(b"=")),
                    ("base64url", base64.urlsafe_b64encode(key).rstrip(b"=")),
                )
            }
        return found


async def picked(stores: Stores, interval: Interval, now: float) -> list[OutboundDelivery]:
    """The deliveries of the interval's conversation the outbox would hand to its sender now."""
    return [
        delivery
        for conversation, upto in await stores.outbox.due(frozenset({"telegram"}), now)
        if conversation == interval.conversation_id
        for delivery in await stores.outbox.pending_of(conversation, upto, now)
    ]


def key_files(key_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in key_dir.glob("*.key")} if key_dir.exists() else {}


async def live_interval(stores: Stores, key_dir: Path, chat: str, *, expires_at: float | None) -> Interval:
    """A direct conversation with a normal message, then an interval with a private word in every place:
    an inbound message (with the words a mirror would copy), its edit, a message, a reply and its pending
    delivery with a line appended, a summary fold with a private pad fact, and a crossing's destination."""
    timeline = stores.timeline
    account = await timeline.ensure_account("telegram", chat, None, NOW)
    conversation = await timeline.ensure_conversation(
        ConversationKey("telegram", chat), "direct", account.person_id, NOW
    )
    c = conversation.id
    normal = f"normal-{chat}-{secrets.token_hex(8)}"
    await timeline.add_message(c, "user", normal, NOW)
    before = key_files(key_dir)
    segment = (await stores.modes.open_segment(c, NOW + 1, expires_at)).id
    keys = {name: key for name, key in key_files(key_dir).items() if name not in before}
    canary = secrets.token_hex(8)
    words = {place: f"private-{place}-{canary}" for place in PLACES}
    inbound = await timeline.add_inbound(
        c,
        words["inbound"],
        NOW + 2,
        segment_id=segment,
        account_id=account.id,
        platform_message_id=f"{chat}-1",
        said=words["said"],
    )
    assert inbound is not None
    assert await stores.quotes.edit_message(inbound, segment, words["edited"], NOW + 3, said=words["said"])
    await timeline.add_message(c, "user", words["message"], NOW + 4, segment_id=segment)
    reply = await timeline.record_reply(
        c, words["delivery"], NOW + 5, stored_text=words["reply"], segment_id=segment, answers=inbound, target=TARGET
    )
    assert reply.delivery_id is not None
    await stores.outbox.append_text(reply.delivery_id, words["appended"])
    stream = await stores.outbox.open_stream(c, TARGET, NOW + 5, segment_id=segment)
    streamed = await timeline.record_reply(
        c, words["streamed"], NOW + 5, stored_text=None, segment_id=segment, target=TARGET, stream=stream.delivery_id
    )
    assert streamed.delivery_id == stream.delivery_id
    await timeline.save_summary(
        c,
        Summary(words["summary"], inbound),
        NOW + 6,
        segment_id=segment,
        pad_person_id=account.person_id,
        pad_facts=(words["pad"],),
    )
    await stores.lifetime.request_crossing(segment, words["crossing"], NOW + 7, NOW + HOUR)
    return Interval(chat, c, account.person_id, segment, words, normal, keys)


async def read_back(stores: Stores, interval: Interval, now: float) -> set[str]:
    """The private words private mode reads back of its interval (its view, summary, pad and pending reply)."""
    c, segment = interval.conversation_id, interval.segment_id
    texts = [item.text for item in await stores.timeline.view(c, visible_segment=segment, after=0, limit=50)]
    summary = await stores.timeline.private_summary(segment)
    texts += [summary.text] if summary else []
    texts += [entry.text for entry in await stores.timeline.private_pad(interval.person_id, c)]
    texts += [delivery.text for delivery in await picked(stores, interval, now)]
    return {place for place, word in interval.words.items() if any(word in (text or "") for text in texts)}


def sealed_values(*places: Path) -> set[bytes]:
    """Every sealed value ("s1." and base64url) in the files of `places`."""
    found: set[bytes] = set()
    for root in places:
        for path in [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]:
            found |= set(SEALED.findall(path.read_bytes()))
    return found


def opened_by(values: set[bytes], keys: list[bytes], segments: list[int]) -> set[int]:
    """The segments of which some value opens under one of `keys`: AES-256-GCM, the nonce first, the column and
    segment as associated data (adapters/storage/sealing.py's format, read here on its own)."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    opened = set()
    for key in keys:
        cipher = AESGCM(key)
        for value in values:
            body = value[3:]
            raw = base64.urlsafe_b64decode(body + b"=" * (-len(body) % 4))
            for segment in segments:
                for column in SEALED_FIELDS:
                    try:
                        cipher.decrypt(raw[:12], raw[12:], f"{column}:{segment}".encode())
                    except InvalidTag:
                        continue
                    opened.add(segment)
    return opened


# --- one database: two intervals live, copied, then one expired and one forgotten --------------------------


@dataclass
class Ended:
    """What the scans found while the intervals lived and after they ended, and what the keys opened."""

    places: list[str]
    expired: Interval
    forgotten: Interval
    read_back: dict[str, set[str]]  # chat: the places of the words private mode read back while it lived
    live: set[tuple[str, str]]  # (place, needle) found while they lived
    after: set[tuple[str, str]]  # ... after they ended
    in_key_folder: set[tuple[str, str]]  # ... in the key folder while they lived
    key_folder_after: set[tuple[str, str]]  # ... after
    key_files_after: set[str]
    opened_live: set[int]  # segments whose sealed values in the copies opened under the keys while they lived
    opened_after: set[int]  # ... under every key the companion holds after


@pytest.fixture(scope="module")
def ended(kept: Kept) -> Ended:
    return run(lambda: end_two_intervals(kept))


async def end_two_intervals(kept: Kept) -> Ended:
    database = kept.cluster.create_database(name="shredding")
    key_dir = kept.folders.mktemp("shredding") / "keys"
    stores = await opened(kept, database, key_dir)
    try:
        expired = await live_interval(stores, key_dir, "10", expires_at=NOW + HOUR)
        forgotten = await live_interval(stores, key_dir, "20", expires_at=None)
        read = {i.chat: await read_back(stores, i, NOW + 10) for i in (expired, forgotten)}
        backup = kept.copies.base_backup("base backup")
        dumps = kept.copies.dumps(database, "dumps")
        kept.copies.flush(kept.replica)
        places = kept.places(backup, dumps)
        needles = {
            **expired.needles("expired"),
            **forgotten.needles("forgotten"),
            "normal": expired.normal.encode(),
        }
        live = holding(places, needles)
        in_key_folder = holding({"the key folder": key_dir}, needles)
        values = sealed_values(backup, dumps, kept.replica.data)
        segments = [expired.segment_id, forgotten.segment_id]
        opened_live = opened_by(values, list(key_files(key_dir).values()), segments)

        # The interval's end as the companion ends it: the sweep's expiry, and `/forget private`.
        await stores.modes.delete_expired_segments(NOW + 2 * HOUR)
        await stores.lifetime.delete_segments_of(forgotten.conversation_id, NOW + 2 * HOUR)

        kept.copies.flush(kept.replica)
        after = holding(places, needles)
        held = list(key_files(key_dir).values()) + held_in_memory(stores)
        return Ended(
            places=list(places),
            expired=expired,
            forgotten=forgotten,
            read_back=read,
            live=live,
            after=after,
            in_key_folder=in_key_folder,
            key_folder_after=holding({"the key folder": key_dir}, needles),
            key_files_after=set(key_files(key_dir)),
            opened_live=opened_live,
            opened_after=opened_by(values, held, segments),
        )
    finally:
        await stores.database.aclose()


def held_in_memory(stores: Stores) -> list[bytes]:
    """The keys the store's key folder keeps in memory (a key shredded must be gone from there too)."""
    keys = getattr(stores.database, "keys", None)
    return list(getattr(keys, "_keys", {}).values())


def private_found(found: set[tuple[str, str]], label: str) -> set[tuple[str, str]]:
    return {(place, needle) for place, needle in found if needle.startswith(f"{label}:")}


READ_BACK = {"edited", "message", "reply", "delivery", "appended", "streamed", "summary", "pad"}


def test_postgres_never_receives_a_private_word_or_a_key(ended: Ended) -> None:
    # Private mode reads its history while it lives ...
    assert ended.read_back == {ended.expired.chat: READ_BACK, ended.forgotten.chat: READ_BACK}
    # ... and no place PostgreSQL writes holds a word of it or its key, live ...
    assert private_found(ended.live, "expired") | private_found(ended.live, "forgotten") == set()
    # ... where the same scan finds a normal word in every place, and the key in the key folder.
    assert {place for place, needle in ended.live if needle == "normal"} == set(ended.places)
    assert len(ended.expired.keys) == len(ended.forgotten.keys) == 1  # a key of its own each, made at its open
    assert {needle for _, needle in ended.in_key_folder if needle.endswith("(raw)")} == {
        f"{label}: key {name} (raw)"
        for label, interval in (("expired", ended.expired), ("forgotten", ended.forgotten))
        for name in interval.keys
    }


@pytest.mark.parametrize("which", ["expired", "forgotten"])
def test_an_ended_interval_cannot_be_read_back_from_anything_postgres_wrote(ended: Ended, which: str) -> None:
    """After its expiry (the sweep's) and after `/forget private`: its key is gone from the folder and from
    memory, no sealed value of it in the copies taken while it lived opens with any key the companion holds,
    and neither its words nor its key are in any place PostgreSQL wrote."""
    interval: Interval = getattr(ended, which)
    assert not set(interval.keys) & ended.key_files_after
    assert private_found(ended.key_folder_after, which) == set()
    assert interval.segment_id in ended.opened_live  # the copies hold its sealed words, and its key opened them
    assert interval.segment_id not in ended.opened_after
    assert private_found(ended.after, which) == set()
    assert {place for place, needle in ended.after if needle == "normal"} == set(ended.places)


# --- the ways it fails: PostgreSQL down at expiry, a key lost, PostgreSQL crashed --------------------------


async def test_expiry_shreds_the_key_while_postgres_is_down(kept: Kept, tmp_path: Path) -> None:
    key_dir = tmp_path / "keys"
    stores = await opened(kept, kept.cluster.create_database(name="down"), key_dir)
    try:
        interval = await live_interval(stores, key_dir, "30", expires_at=NOW + HOUR)
        assert interval.keys
        kept.cluster.halt()
        try:
            with pytest.raises(StoreError):
                await stores.modes.delete_expired_segments(NOW + 2 * HOUR)
            # Keys first: shredded by its name's expiry, PostgreSQL never asked.
            assert key_files(key_dir) == {}
        finally:
            kept.cluster.resume()
        # Back up, its rows are still there and open to nothing: private mode would read none of it ...
        assert await read_back(stores, interval, NOW + 10) == set()
        assert not await sealed_shown(stores, interval)
        assert await picked(stores, interval, NOW + 10) == []  # its reply is never sent
        # ... normal mode sees its one placeholder, and the next sweep deletes it.
        assert await normal_view(stores, interval) == [interval.normal, PLACEHOLDER]
        assert await stores.modes.delete_expired_segments(NOW + 2 * HOUR) == 1
    finally:
        await stores.database.aclose()


async def test_a_lost_key_masks_its_interval_and_never_exposes_it(kept: Kept, tmp_path: Path) -> None:
    key_dir = tmp_path / "keys"
    database = kept.cluster.create_database(name="lost")
    stores = await opened(kept, database, key_dir)
    try:
        interval = await live_interval(stores, key_dir, "40", expires_at=None)
    finally:
        await stores.database.aclose()  # the companion gone mid-interval: its segment is still open
    for name in interval.keys:
        (key_dir / name).unlink()  # and its key folder lost (a container without the volume, a restore elsewhere)
    stores = await opened(kept, database, key_dir)  # the next start
    try:
        await stores.modes.reconcile_keys(NOW + 20)
        c = interval.conversation_id
        assert await stores.modes.open_segment_of(c) is None  # closed: the conversation reads as normal mode
        assert await read_back(stores, interval, NOW + 20) == set()
        assert not await sealed_shown(stores, interval)
        assert await picked(stores, interval, NOW + 20) == []  # its reply is never sent
        assert await normal_view(stores, interval) == [interval.normal, PLACEHOLDER]
        # A new interval of the same conversation reads none of the old one's private pad.
        later = await stores.modes.open_segment(c, NOW + 30, None)
        reads = await stores.timeline.context_reads(
            c, person_id=interval.person_id, segment_id=later.id, limit=50, count_up_to=50
        )
        assert reads.private_pad == []
        assert await stores.timeline.private_pad(interval.person_id, c) == []
    finally:
        await stores.database.aclose()


async def test_a_postgres_crash_mid_interval_lands_in_normal_mode(kept: Kept, tmp_path: Path) -> None:
    key_dir = tmp_path / "keys"
    from core.privacy.secrets import hash_passphrase
    from core.privacy.valve import ModeValve

    stores = await opened(kept, kept.cluster.create_database(name="crash"), key_dir)
    try:
        interval = await live_interval(stores, key_dir, "50", expires_at=None)
        (conversation,) = [
            found
            for found in await stores.timeline.conversations_of(interval.person_id)
            if found.id == interval.conversation_id
        ]
        valve = ModeValve(
            stores.modes, stores.passphrase_attempts, FakeClock(NOW + 10), passphrase_hash=hash_passphrase("x")
        )
        assert (await valve.settle(conversation)).is_private
        kept.cluster.halt("immediate")  # `pg_ctl stop -m immediate`: no checkpoint, a crash recovery next
        try:
            state = await valve.settle(conversation)
            assert not state.is_private  # every failure is normal mode
        finally:
            kept.cluster.resume()
        # What the crash recovery replayed holds no word of it; with its key kept, private mode reads it again.
        kept.copies.flush(kept.replica)
        places = kept.places()
        assert private_found(holding(places, interval.needles("crashed")), "crashed") == set()
        assert {place for place, _ in holding(places, {"normal": interval.normal.encode()})} == set(places)
        assert await read_back(stores, interval, NOW + 20) == READ_BACK
        assert await normal_view(stores, interval) == [interval.normal, PLACEHOLDER]
    finally:
        await stores.database.aclose()


async def normal_view(stores: Stores, interval: Interval) -> list[str]:
    """Normal mode's view of the conversation: its messages' texts, and PLACEHOLDER for each interval."""
    items = await stores.timeline.view(interval.conversation_id, visible_segment=None, after=0, limit=50)
    return [PLACEHOLDER if item.is_placeholder else item.text for item in items]


async def sealed_shown(stores: Stores, interval: Interval) -> bool:
    """Whether private mode's view of the interval shows anything sealed (a masked row must not show)."""
    items = await stores.timeline.view(interval.conversation_id, visible_segment=interval.segment_id, after=0, limit=50)
    return any(SEALED.search((item.text or "").encode()) for item in items)


# --- the whole companion over the store ------------------------------------------------------------------


class EchoingProvider(FakeProvider):
    """A model that repeats the private word it was given: its answers and its folds (summary and pad fact) carry
    the canary, so the companion's own writes of them are searched too."""

    def __init__(self, canary: str) -> None:
        super().__init__()
        self.canary = canary

    async def _answer(self, request: CompletionRequest) -> Completion:
        if self.canary not in request_text(request):
            return await super()._answer(request)
        self.requests.append(request)
        if request.purpose == "summary":
            return Completion(f"SUMMARY:\nfolded-{self.canary}\nFACTS:\n- fact-{self.canary}")
        return Completion(f"answer-{self.canary}")


async def test_a_private_conversation_leaves_no_word_in_anything_postgres_wrote(kept: Kept, tmp_path: Path) -> None:
    """The companion's own turns (as `companion run` builds it, in-process): the passphrase that opened the
    interval reaches PostgreSQL never; the words, the model's answers and its folds only sealed while it lives, and
    nothing of them once `/forget private` ended it."""
    from bot.bootstrap import build_companion
    from core.privacy.secrets import hash_passphrase
    from core.turn.config import CompanionConfig
    from tests.helpers.chat import say

    stores = await opened(kept, kept.cluster.create_database(name="companion"), tmp_path / "keys")
    canary, passphrase, normal = (f"{kind}-{secrets.token_hex(8)}" for kind in ("private", "pass", "normal"))
    provider = EchoingProvider(canary)
    config = CompanionConfig(passphrase_hash=hash_passphrase(passphrase), budget=SMALL_BUDGET)
    companion = build_companion(stores, provider, config, clock=FakeClock())
    await companion.start()
    try:
        await say(companion, f"hello {normal}")
        await say(companion, f"/private {passphrase} 7d")
        for turn in range(8):
            await say(companion, f"{turn} {canary} " + "p" * 60)
            await companion.drain()  # the folds of the private summary and pad
        for lasting in ("remember", "goal", "remind"):  # refused while private: none may carry the words anywhere
            await say(companion, f"/{lasting} {lasting}-{canary}")
        # Private mode read its own history back: its answers, its summary and its pad fact, opened.
        read = "\n".join(request_text(request) for request in provider.replies())
        assert all(f"{kind}-{canary}" in read for kind in ("answer", "folded", "fact"))
        needles = {"the private words": canary.encode(), "the passphrase": passphrase.encode()}
        kept.copies.flush(kept.replica)
        places = kept.places()
        assert holding(places, needles) == set()  # live: sealed, and the passphrase nowhere
        await say(companion, "/forget private")
        kept.copies.flush(kept.replica)
        assert holding(places, needles) == set()
        assert {place for place, _ in holding(places, {"normal": normal.encode()})} == set(places)
    finally:
        await companion.stop(1.0)
        await stores.database.aclose()
