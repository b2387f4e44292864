from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from adapters.storage.stores import Stores, open_stores
from bot.bootstrap import build_companion
from core.privacy.secrets import hash_passphrase
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from tests.helpers.fakes import FakeClock, FakeProvider

PASSPHRASE = "sesame-open"

# Python's bytecode cache, allowed for the suite and everything it starts: a PYTHONDONTWRITEBYTECODE inherited
# from the shell (this machine's image and CI set it) would make each of the run's few hundred Python starts
# (the xdist workers, every `companion` subprocess, the fake servers' scripts) compile the tree from source
# again: about 5 CPU-seconds a worker's collection, 0.05-0.1 s a `companion run`. Set here, before xdist
# starts its workers, so they and every child inherit it. The caches go where Python puts them
# (`__pycache__`, ignored by git); bench/mutate.py's copies are new folders, so no mutant meets a stale one.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# `store_backend` (SQLite, and PostgreSQL for tests marked `engines`) and the PostgreSQL cluster of a worker.
pytest_plugins = ["tests.helpers.engine_fixtures"]


# Modules whose tests share a module fixture that takes seconds (a cluster and its replica, a gateway's
# database, a gateway with a browser and one page): under xdist one worker runs each of them whole.
ONE_WORKER = frozenset(
    {
        "tests/adapters/store/test_postgres_shredding.py",
        "tests/bot/test_move_to_postgres.py",
        "tests/bot/test_web_browser_wire.py",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """In xdist's workers (`pytest -n 4`), the longest tests first: those waiting out the shipped stop grace
    (`slow`), then those running `companion` in a subprocess (`wire`, a few seconds to half a minute each),
    then the rest (mostly milliseconds), each group in the order collected. Every worker sorts the same
    collection alike, as xdist requires; a run in one process keeps pytest's order."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return

    def group(item: pytest.Item) -> int:
        return 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("wire") else 2

    items[:] = sorted(items, key=group)  # stable: the order collected within each group


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`-n` with xdist's default distribution (`load`): each worker is given one more test (or one module of
    ONE_WORKER) when it has two or fewer left, in the order above, instead of a quarter of its share of the
    collection at once. The long tests then spread over every worker, and the run ends on short tests
    rather than on one worker's queue of long ones. (`xdist_group` marks would do ONE_WORKER's part, but
    pytest-xdist 3.8's `--dist loadgroup` cannot rename pytest 9's node ids, so it groups nothing.)"""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneAtATime(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER else nodeid

    return OneAtATime(config, log)


@pytest.fixture(scope="session")
def passphrase_hash() -> str:
    return hash_passphrase(PASSPHRASE)


@pytest.fixture
async def stores(store_backend, request, tmp_path):
    """Every query class over one database of the test's own (adapters/storage/stores.py): a SQLite file in
    `tmp_path`, or (a test marked `engines`, its postgres case) the worker's PostgreSQL database emptied; in the
    `postgres-shared` case of a test marked `privacy`, those of one of two processes registered on it, the
    other's check run after the test (tests/helpers/two_processes.py)."""
    # The plugin's (pytest_plugins): imported by now.
    from tests.helpers.engine_fixtures import BODY_FAILED, SHARED, TWO_PROCESSES

    if store_backend == SHARED:
        from tests.helpers.two_processes import Variant, two_processes

        url = request.getfixturevalue("emptied_postgres_url")
        clock, hashed = request.getfixturevalue("clock"), request.getfixturevalue("passphrase_hash")
        variant = Variant.of(request.node.nodeid)
        async with two_processes(url, tmp_path / "keys", clock, hashed, variant) as processes:
            request.node.stash[TWO_PROCESSES] = processes  # the test's model: the second reads at each call
            yield processes.a
            if not request.node.stash.get(BODY_FAILED, False):
                await processes.check()
        return
    if store_backend == "postgres":
        from adapters.storage.postgres.engine import PostgresDatabase

        keys = tmp_path / "keys"
        keys.mkdir(mode=0o700)
        opened = Stores.over(PostgresDatabase(request.getfixturevalue("emptied_postgres_url"), key_dir=keys))
        await opened.database.start()
        try:
            yield opened
        finally:
            await opened.database.aclose()
        return
    path = tmp_path / "companion.db"
    shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
    async with open_stores(path) as opened:
        yield opened


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated once per worker, closed (its WAL checkpointed into the file): each test's
    `stores` opens a copy of it, a few milliseconds, instead of running every migration again (0.1-0.3 s: each
    migration commits with an fsync). A test of migrating a new file opens one of its own."""
    path = tmp_path_factory.mktemp("sqlite-template") / "companion.db"

    async def migrate() -> None:
        async with open_stores(path):
            pass

    # In a thread of its own: a session fixture may be set up while a test's event loop runs.
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, migrate()).result()
    assert not path.with_name(path.name + "-wal").exists(), "the template's WAL was not checkpointed at close"
    return path


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def provider(request: pytest.FixtureRequest) -> FakeProvider:
    """The model; in the two-process case (`stores`), the second process reads each time it is asked."""
    made = FakeProvider()
    from tests.helpers.engine_fixtures import SHARED, TWO_PROCESSES

    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("store_backend") == SHARED:
        from tests.helpers.two_processes import watch

        watch(made, lambda: request.node.stash.get(TWO_PROCESSES, None))
    return made


@pytest.fixture
def make_companion(stores, provider, clock, passphrase_hash):
    made: list[Companion] = []

    async def make(**config) -> Companion:
        config.setdefault("passphrase_hash", passphrase_hash)
        companion = build_companion(stores, provider, CompanionConfig(**config), clock=clock)
        await companion.start()
        made.append(companion)
        return companion

    return make


@pytest.fixture
async def companion(make_companion) -> Companion:
    return await make_companion()
