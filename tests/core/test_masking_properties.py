"""Property tests: for every interleaving of normal talk, entries, exits, expiries, idles,
crashes and restarts, normal mode never receives private text, sees exactly one placeholder
per interval, and keeps its own history on both sides."""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.storage.stores import Stores, sqlite_stores
from bot.bootstrap import build_companion
from core.memory.context import ContextBudget
from core.turn.config import CompanionConfig
from core.values import copy
from core.values.model import InboundMessage
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.engine_fixtures import SHARED
from tests.helpers.fakes import FakeClock, FakeProvider, placeholders, request_text
from tests.helpers.two_processes import Variant, two_processes, watch

pytestmark = [pytest.mark.engines, pytest.mark.privacy]

_HASH: list[str] = []


def passphrase_hash() -> str:
    if not _HASH:
        from core.privacy.secrets import hash_passphrase

        _HASH.append(hash_passphrase(PASSPHRASE))
    return _HASH[0]


OPS = st.lists(
    st.one_of(
        st.just(("talk",)),
        st.just(("talk",)),
        st.tuples(st.just("enter"), st.sampled_from(["45s", "1h", "never"])),
        st.just(("exit",)),
        st.tuples(st.just("advance"), st.sampled_from([5.0, 50.0, 700.0, 4000.0])),
        st.just(("restart",)),
        st.just(("sweep",)),
    ),
    min_size=1,
    max_size=22,
)


async def scenario(
    ops, budget: ContextBudget, exact: bool, database: Path | str, *, shared: Variant | None = None
) -> None:
    """One example on a database of its own: a copy of the migrated SQLite template (`database`, a path), or the
    worker's PostgreSQL database emptied (its URL); `shared`, there, its companion one of two processes set up
    so, the other's check run after the example (tests/helpers/two_processes.py)."""
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as folder:
        if shared:
            async with two_processes(
                str(database), Path(folder) / "keys", clock, passphrase_hash(), shared
            ) as processes:
                await run_ops(processes.a, ops, budget, exact, clock, lambda made: watch(made, lambda: processes))
                await processes.check()
            return
        if isinstance(database, Path):
            shutil.copyfile(database, Path(folder) / "db")
            stores = sqlite_stores(Path(folder) / "db")
        else:
            from adapters.storage.postgres.engine import PostgresDatabase

            stores = Stores.over(PostgresDatabase(database, key_dir=Path(folder)))
        await stores.database.start()
        try:
            await run_ops(stores, ops, budget, exact, clock)
        finally:
            await stores.database.aclose()


def explore(store_backend: str, request: pytest.FixtureRequest, examples: int, budget: ContextBudget, exact: bool):
    """`examples` interleavings on SQLite; a quarter of them on PostgreSQL, an eighth with two processes on it. The
    interleavings are the valve's and the context's (Python, the same on both engines), explored in full on
    SQLite; on PostgreSQL the examples check that its SQL keeps the same wall (masked view, placeholders, expiry's
    cascade), at two to three times an SQLite example's cost (a pool per example, a round trip per statement: 10
    examples 3.6 s, SQLite's 40 5.7 s); with two processes, that the second one's start, jobs, reads and
    take-over keep it too (a registration and a second process's check per example)."""
    two = store_backend == SHARED
    postgres = two or store_backend == "postgres"
    database = request.getfixturevalue("worker_database" if postgres else "sqlite_template")

    @settings(
        max_examples=examples // 8 if two else examples // 4 if postgres else examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(OPS, st.builds(Variant, st.booleans(), st.booleans()))
    def check(ops, variant):
        shared = variant if two else None
        asyncio.run(scenario(ops, budget, exact, database.emptied() if postgres else database, shared=shared))

    check()


async def run_ops(stores, ops, budget: ContextBudget, exact: bool, clock: FakeClock, watch=None) -> None:
    provider = FakeProvider()
    if watch is not None:
        watch(provider)  # two processes: the second reads at each of the first's model calls
    config = CompanionConfig(passphrase_hash=passphrase_hash(), private_idle_seconds=600.0, budget=budget)
    companion = build_companion(stores, provider, config, clock=clock)
    await companion.start()
    counter = itertools.count()
    canaries: list[str] = []
    normal_lines: list[str] = []

    async def say(text: str):
        reply = await companion.handle(InboundMessage("terminal", "terminal", "owner", text, is_direct=True))
        await companion.drain()  # let any fold finish before the next step
        return reply

    for op in ops:
        kind = op[0]
        if kind == "talk":
            conversation = await stores.timeline.ensure_conversation(
                InboundMessage("terminal", "terminal", "owner", "", True).key, "direct", None, clock.now()
            )
            private = (await companion.valve.settle(conversation)).is_private
            if private:
                text = f"CANARY{next(counter)}X"
                canaries.append(text)
            else:
                text = f"normal line {next(counter)}"
            before = len(provider.requests)
            await say(text)
            request = next(r for r in provider.requests[before:] if r.purpose == "reply")
            in_private = copy.PRIVATE_SYSTEM_LINE in request_text(request)
            if not in_private:
                normal_lines.append(text)
                check_normal_request(request, canaries, normal_lines, exact, await count_segments(stores))
            else:
                assert private
        elif kind == "enter":
            await say(f"/private {PASSPHRASE} {op[1]}")
        elif kind == "exit":
            await say("/normal")
        elif kind == "advance":
            clock.advance(op[1])
        elif kind == "restart":
            companion = build_companion(stores, provider, config, clock=clock)
            await companion.start()
        elif kind == "sweep":
            await companion.sweep()
        # The normal summary is what normal mode reads later: it must never hold private text.
        for row in await engines.rows(stores, "SELECT text FROM summaries WHERE mode = 'normal'"):
            assert not any(c in row[0] for c in canaries)
    for request in provider.requests:
        if request.purpose == "transition":
            assert not any(c in request_text(request) for c in canaries)


async def count_segments(stores) -> int:
    return (await engines.first(stores, "SELECT count(*) FROM segments"))[0]


def check_normal_request(request, canaries, normal_lines, exact: bool, segments: int) -> None:
    text = request_text(request)
    assert not any(c in text for c in canaries), "private text reached a normal-mode request"
    users = [m.content for m in request.messages if m.role == "user"]
    if exact:
        assert placeholders(request) == segments  # exactly one per interval that still exists
        assert users == normal_lines  # normal history on both sides of every interval
    else:
        assert placeholders(request) <= segments
        assert users and users[-1] == normal_lines[-1]


def test_normal_mode_never_sees_private_text_and_sees_one_placeholder_per_interval(store_backend, request):
    explore(store_backend, request, 40, ContextBudget(total_tokens=100_000), exact=True)


def test_folding_under_a_tight_budget_never_carries_private_text_into_normal_mode(store_backend, request):
    explore(store_backend, request, 25, ContextBudget(total_tokens=300, fold_min=2, fold_batch=4), exact=False)
