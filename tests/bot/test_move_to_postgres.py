"""`companion move-to-postgres` through the real command line onto a real PostgreSQL: the normal rows as they are,
the private intervals left behind and deleted from the file, and both ways it can fail half way."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from adapters.storage.move import MARKER, MOVE_PLAN, PAUSE_ENV, source_tables
from adapters.storage.postgres.engine import PostgresDatabase
from adapters.storage.postgres.instance import AdvisoryInstanceLock
from adapters.storage.privacy import CHECKPOINT_OWED
from adapters.storage.stores import Stores, open_stores
from core.values import copy
from core.values.model import Summary
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.proc import companion_env, run_companion, spawn_companion
from tests.helpers.running import Running
from tests.helpers.telegram_gateway import USER, gateway_env, polling, say, spawn, stop

pytestmark = pytest.mark.wire

CANARY = "plum-canary-7f3e"  # said in private mode only
PAD_CANARY = "fig-canary-91ab"  # remembered in private mode only
NORMAL = ("hello, the apple pie was good", "/remember my cat is called Miso", "what about the pear tart?")


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database a real `companion run` wrote on Telegram: normal turns, a normal memory, then a private interval
    (a private message and a private memory) left live when the gateway stopped. Each test moves a copy."""
    folder = tmp_path_factory.mktemp("populated")
    with FakeTelegramServer.run_in_thread() as telegram, FakeOpenAIServer.run_in_thread() as model:
        # The idle timeout off (as shipped it would end the interval after a while): the interval is live.
        gateway = spawn(gateway_env(folder, telegram, model, COMPANION_PRIVATE_IDLE_MINUTES="0"))
        try:
            polling(telegram, gateway)
            for text in NORMAL:
                say(telegram, gateway, text)
            say(telegram, gateway, "/private sesame")
            say(telegram, gateway, f"my secret is {CANARY}")
        finally:
            code, stderr = stop(gateway)
    assert code == 0, stderr
    asyncio.run(fold_summaries(folder / "companion.db"))
    return folder / "companion.db"


async def fold_summaries(path: Path) -> None:
    """What folds write after more turns than a test makes: a normal summary, and the interval's private summary
    with a fact for the private pad (the store's own write)."""
    async with open_stores(path) as stores:
        (found,) = await stores.database.engine.read(
            _statement(
                "SELECT s.id AS s, s.conversation_id AS c, c.person_id AS p FROM segments s"
                " JOIN conversations c ON c.id = s.conversation_id"
            )
        )
        ((segment, conversation, person),) = [(row["s"], row["c"], row["p"]) for row in found.rows]
        now = time.time()
        await stores.timeline.save_summary(conversation, Summary("they liked the apple pie", 2), now)
        await stores.timeline.save_summary(
            conversation,
            Summary(f"they told {CANARY}", 8),
            now,
            segment_id=segment,
            pad_person_id=person,
            pad_facts=(PAD_CANARY,),
        )


@pytest.fixture
def source(populated: Path, tmp_path: Path) -> Path:
    path = tmp_path / "companion.db"
    shutil.copyfile(populated, path)
    # The file holds the live interval before the move: its message, its summary, its pad entry.
    assert CANARY.encode() in path.read_bytes() and PAD_CANARY.encode() in path.read_bytes()
    return path


def env_for(source: Path, url: str | None = None, **extra: str) -> dict[str, str]:
    env = companion_env(source.parent, **extra)
    if url is not None:
        env["COMPANION_DATABASE_URL"] = url
    return env


def move(source: Path, url: str, **extra: str) -> subprocess.CompletedProcess:
    return run_companion(["move-to-postgres", url], env_for(source, **extra), timeout=120)


def pg(url: str, sql: str) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql.encode())
        return list(cursor.fetchall()) if cursor.description else []


def companion_tables(url: str) -> list[str]:
    rows = pg(url, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1")
    return [str(r[0]) for r in rows]


def every_text(url: str) -> str:
    """Every row of every table on the target, as text."""
    return "\n".join(str(row) for t in companion_tables(url) for row in pg(url, f'SELECT t::text FROM "{t}" t'))


def file_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


async def normal_history(stores: Stores) -> tuple[object, ...]:
    """What normal mode reads of the owner's conversation: the view, the pad, recall."""
    (conversation_id,) = [
        row["id"]
        for row in (
            await stores.database.engine.read(
                _statement("SELECT id FROM conversations WHERE chat_id = :c", c=str(USER))
            )
        )[0].rows
    ]
    person = (
        await stores.database.engine.read(
            _statement("SELECT person_id FROM conversations WHERE id = :c", c=conversation_id)
        )
    )[0].scalar
    view = await stores.timeline.view(conversation_id, visible_segment=None, after=0, limit=100)
    pad = await stores.timeline.normal_pad(int(person))
    recall = await stores.memory.recall(int(person), ("apple", "miso", "plum"))
    return (
        [(i.position, i.role, i.text) for i in view if not i.is_placeholder],
        [i for i in view if i.is_placeholder],
        [e.text for e in pad],
        sorted((h.source, h.ref, h.text) for h in recall),  # not the rank: each engine ranks its own way
    )


def _statement(sql: str, **params: object):
    from adapters.storage.engine import Fetch, Statement

    return Statement(sql, params, Fetch.ALL)


async def on_sqlite(path: Path) -> tuple[object, ...]:
    async with open_stores(path) as stores:
        return await normal_history(stores)


async def on_postgres(url: str) -> tuple[object, ...]:
    database = PostgresDatabase(url)
    await database.start()
    try:
        return await normal_history(Stores.over(database))
    finally:
        await database.aclose()


def test_every_table_of_either_schema_has_a_move_plan_entry(tmp_path: Path, postgres_url: str) -> None:
    asyncio.run(on_sqlite_schema(tmp_path / "schema.db"))
    with closing(sqlite3.connect(tmp_path / "schema.db")) as db, db:
        sqlite_tables = set(source_tables(db))
    postgres_tables = set(companion_tables(postgres_url))
    assert sqlite_tables - MOVE_PLAN.keys() == set()
    assert postgres_tables - MOVE_PLAN.keys() == set()
    assert MOVE_PLAN.keys() - sqlite_tables - postgres_tables == set()  # no entry for a table neither has


async def on_sqlite_schema(path: Path) -> None:
    async with open_stores(path):
        pass


def test_a_populated_database_moves_with_its_normal_history_and_no_private_interval(
    source: Path, empty_postgres_url: str
) -> None:
    before = asyncio.run(on_sqlite(source))
    normal, placeholders, pad, _ = before
    assert [text for _, role, text in normal if role == "user"][:1] == [NORMAL[0]]
    assert len(placeholders) == 1 and pad == ["my cat is called Miso"]
    with closing(sqlite3.connect(source)) as db, db:  # a signed-in browser, a code, a checkpoint owed
        db.execute("INSERT INTO web_sessions (token_hash, created_at, expires_at) VALUES ('t', 0, 9e12)")
        db.execute("INSERT INTO web_login_codes (code_hash, created_at, expires_at) VALUES ('c', 0, 9e12)")
        db.execute(f"INSERT INTO adapter_state (name, value, updated_at) VALUES ('{CHECKPOINT_OWED}', '1', 0)")
    shutil.copyfile(source, source.with_name("before.db"))

    moved = move(source, empty_postgres_url)

    assert moved.returncode == 0, moved.stderr
    lines = moved.stdout.splitlines()
    assert lines[0].startswith("") and " tables moved from " in lines[0]
    assert lines[1].startswith("1 private intervals left behind and deleted from ")
    assert lines[2].startswith("now set COMPANION_DATABASE_URL")
    after = asyncio.run(on_postgres(empty_postgres_url))
    assert after[0] == normal  # the same messages, ids and order
    assert after[1] == []  # no interval, not even its placeholder
    assert after[2:] == before[2:]
    stored = every_text(empty_postgres_url)
    assert CANARY not in stored and PAD_CANARY not in stored
    assert pg(empty_postgres_url, "SELECT mode, text FROM summaries") == [("normal", "they liked the apple pie")]
    for table in ("segments", "crossings", "web_sessions", "web_login_codes"):
        assert pg(empty_postgres_url, f"SELECT count(*) FROM {table}") == [(0,)], table
    assert pg(empty_postgres_url, "SELECT name FROM adapter_state WHERE name LIKE 'store:%'") == [(MARKER,)]
    # Every normal row is there as it was.
    with closing(sqlite3.connect(source.with_name("before.db"))) as db, db:
        for table in ("messages", "deliveries", "agent_runs", "pad_entries", "proactive_people", "adapter_state"):
            where = " WHERE segment_id IS NULL" if table in ("messages", "deliveries", "pad_entries") else ""
            if table == "adapter_state":
                where = " WHERE name NOT LIKE 'store:%'"
            (expected,) = db.execute(f"SELECT count(*) FROM {table}{where}").fetchone()
            assert expected > 0, table
            assert pg(empty_postgres_url, f"SELECT count(*) FROM {table}{where}") == [(expected,)], table
    # The file: its interval deleted with every private row, no private byte left.
    assert CANARY.encode() not in file_bytes(source) and PAD_CANARY.encode() not in file_bytes(source)
    with closing(sqlite3.connect(source)) as db, db:
        assert db.execute("SELECT count(*) FROM segments").fetchone() == (0,)


def test_after_the_move_a_gateway_on_postgresql_answers_from_the_normal_history_without_the_interval(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path, empty_postgres_url: str
) -> None:
    telegram, model = telegram_servers  # one fake Telegram throughout: its update ids go on across the move
    env = gateway_env(tmp_path, telegram, model, COMPANION_PRIVATE_IDLE_MINUTES="0")
    gateway = spawn(env)
    try:
        polling(telegram, gateway)
        say(telegram, gateway, NORMAL[0])
        say(telegram, gateway, "/private sesame")
        say(telegram, gateway, f"my secret is {CANARY}")
    finally:
        code, stderr = stop(gateway)
    assert code == 0, stderr
    moved = run_companion(["move-to-postgres", empty_postgres_url], env, timeout=120)
    assert moved.returncode == 0, moved.stderr

    on_postgres = {**env, "COMPANION_DATABASE_URL": empty_postgres_url, "COMPANION_KEY_DIR": str(tmp_path / "keys")}
    gateway = spawn(on_postgres)
    try:
        polling(telegram, gateway)
        assert say(telegram, gateway, "/mode").startswith("You are in normal mode")
        assert say(telegram, gateway, NORMAL[2]).startswith("fake reply")
    finally:
        code, stderr = stop(gateway)
    assert code == 0, stderr
    (asked,) = [raw for raw in model.raw_requests if NORMAL[2].encode() in raw]
    contents = [m["content"] for m in json.loads(asked)["messages"]]
    assert NORMAL[0] in contents  # the history moved with its conversation
    assert copy.PLACEHOLDER not in contents  # no interval left, not even its placeholder
    assert CANARY.encode() not in asked


def test_a_new_row_on_postgresql_takes_an_id_past_every_id_of_the_file(source: Path, empty_postgres_url: str) -> None:
    with closing(sqlite3.connect(source)) as db, db:
        (highest,) = db.execute("SELECT max(id) FROM messages").fetchone()  # the private messages' ids included
    assert move(source, empty_postgres_url).returncode == 0
    (conversation,) = pg(empty_postgres_url, "SELECT min(id) FROM conversations")[0]
    ((new_id,),) = pg(
        empty_postgres_url,
        "INSERT INTO messages (conversation_id, mode, role, text, capture, created_at)"
        f" VALUES ({conversation}, 'normal', 'user', 'later', 'pending', 0) RETURNING id",
    )
    assert new_id > highest


def test_a_target_holding_rows_is_refused_and_nothing_changes(source: Path, postgres_url: str) -> None:
    pg(postgres_url, "INSERT INTO people (display_name, created_at) VALUES ('someone', 0)")
    before = source.read_bytes()

    refused = move(source, postgres_url)

    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1].startswith("companion: ")
    assert "is not empty: 1 tables hold rows (people); nothing was moved" in refused.stderr.splitlines()[-1]
    assert source.read_bytes() == before
    assert pg(postgres_url, "SELECT count(*) FROM messages") == [(0,)]


def test_an_update_waiting_in_the_webhook_inbox_is_refused_and_nothing_changes(
    source: Path, empty_postgres_url: str
) -> None:
    # Telegram got its 200 for this update: left behind by the move, it would never be answered.
    with closing(sqlite3.connect(source)) as db, db:
        db.execute("INSERT INTO webhook_inbox (platform, update_id, body, received_at) VALUES ('telegram', 7, '{}', 0)")
    before = source.read_bytes()

    refused = move(source, empty_postgres_url)

    assert refused.returncode == 2
    assert "1 Telegram updates wait in the file's webhook inbox" in refused.stderr.splitlines()[-1]
    assert source.read_bytes() == before
    assert pg(empty_postgres_url, "SELECT to_regclass('messages')") == [(None,)]  # the copy's transaction undone


def test_a_table_without_a_move_plan_entry_stops_the_move_before_anything_is_copied(
    source: Path, empty_postgres_url: str
) -> None:
    with closing(sqlite3.connect(source)) as db, db:  # as a later migration might add it
        db.execute("CREATE TABLE intervals_elsewhere (id INTEGER PRIMARY KEY, text TEXT)")
    before = source.read_bytes()

    refused = move(source, empty_postgres_url)

    assert (refused.returncode, refused.stderr.splitlines()[-1]) == (
        2,
        "companion: MOVE_PLAN has no entry for the table intervals_elsewhere: nothing was moved",
    )
    assert source.read_bytes() == before
    assert companion_tables(empty_postgres_url) == []


def test_a_target_holding_another_files_move_is_refused(source: Path, empty_postgres_url: str, tmp_path: Path) -> None:
    other = tmp_path / "other" / "companion.db"
    other.parent.mkdir()
    shutil.copyfile(source, other)
    assert move(other, empty_postgres_url).returncode == 0
    with closing(sqlite3.connect(source)) as db, db:  # the first file and this one differ from here on
        db.execute("UPDATE people SET display_name = 'changed'")
    before = source.read_bytes()

    refused = move(source, empty_postgres_url)

    assert refused.returncode == 2
    assert "holds a move of another database" in refused.stderr.splitlines()[-1]
    assert source.read_bytes() == before  # its interval is not deleted: nothing of it was moved


def test_a_running_gateway_refuses_the_move(
    source: Path, empty_postgres_url: str, telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer]
) -> None:
    telegram, model = telegram_servers
    env = gateway_env(source.parent, telegram, model)
    with Running(env) as gateway:
        gateway.wait_running()
        refused = run_companion(["move-to-postgres", empty_postgres_url], env, timeout=120)
        assert refused.returncode == 2
        assert refused.stderr.splitlines() == [
            f"companion: `companion run` is using {source.resolve()} (pid {gateway.proc.pid}); "
            "stop it before `companion move-to-postgres`"
        ]
    assert companion_tables(empty_postgres_url) == []


def test_a_companion_serving_the_target_refuses_the_move(source: Path, empty_postgres_url: str) -> None:
    async def refused_while_held() -> subprocess.CompletedProcess:
        lock = AdvisoryInstanceLock(empty_postgres_url, "run")
        await lock.acquire()
        try:
            return await asyncio.to_thread(move, source, empty_postgres_url)
        finally:
            await lock.aclose()

    before = source.read_bytes()
    refused = asyncio.run(refused_while_held())
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1].startswith("companion: companion run holds ")
    assert refused.stderr.splitlines()[-1].endswith("; stop it before companion move-to-postgres")
    assert source.read_bytes() == before
    assert companion_tables(empty_postgres_url) == []


# --- failing half way ------------------------------------------------------------------------------------


class Paused:
    """The command stopped at a point of PAUSE_ENV: it said so on stderr and waits for a line on stdin."""

    def __init__(self, source: Path, url: str, at: str) -> None:
        self.proc = spawn_companion(["move-to-postgres", url], env_for(source, **{PAUSE_ENV: at}))
        line = self.proc.stderr.readline()
        assert line.strip() == f"paused at {at}", line + self.proc.stderr.read()

    def resume(self) -> tuple[int, str]:
        _, stderr = self.proc.communicate("\n", timeout=120)
        return self.proc.returncode, stderr

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=60)


@pytest.fixture
def paused() -> Iterator[list[Paused]]:
    made: list[Paused] = []
    yield made
    for each in made:
        if each.proc.poll() is None:
            each.kill()


def assert_rerun_moves(source: Path, url: str) -> None:
    again = move(source, url)
    assert again.returncode == 0, again.stderr
    assert " tables moved from " in again.stdout
    assert CANARY.encode() not in file_bytes(source)


def test_killed_after_some_tables_the_target_is_empty_the_file_unchanged_and_a_rerun_moves(
    source: Path, empty_postgres_url: str, paused: list[Paused]
) -> None:
    before = source.read_bytes()
    paused.append(stopped := Paused(source, empty_postgres_url, "after:messages"))
    assert pg(empty_postgres_url, "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction'") != [(0,)]

    stopped.kill()

    assert companion_tables(empty_postgres_url) == []  # the migrations too: one transaction
    assert source.read_bytes() == before
    assert_rerun_moves(source, empty_postgres_url)


def test_a_connection_dropped_mid_copy_rolls_back_whole_and_a_rerun_moves(
    source: Path, empty_postgres_url: str, paused: list[Paused]
) -> None:
    before = source.read_bytes()
    paused.append(stopped := Paused(source, empty_postgres_url, "in:messages"))
    (terminated,) = pg(
        empty_postgres_url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'companion move-to-postgres'",
    )
    assert terminated == (True,)

    code, stderr = stopped.resume()

    assert code == 2
    assert stderr.splitlines()[-1] == (
        "companion: PostgreSQL failed: terminating connection due to administrator command; "
        "the move did not complete: run it again"
    )
    assert companion_tables(empty_postgres_url) == []
    assert source.read_bytes() == before
    assert_rerun_moves(source, empty_postgres_url)


def test_killed_after_the_commit_a_rerun_finishes_and_the_file_keeps_no_private_byte(
    source: Path, empty_postgres_url: str, paused: list[Paused]
) -> None:
    paused.append(stopped := Paused(source, empty_postgres_url, "commit"))
    stopped.kill()
    (moved_rows,) = pg(empty_postgres_url, "SELECT count(*) FROM messages")[0]
    assert pg(empty_postgres_url, f"SELECT count(*) FROM adapter_state WHERE name = '{MARKER}'") == [(1,)]
    assert CANARY.encode() in file_bytes(source)  # step 4 had not run

    again = move(source, empty_postgres_url)

    assert again.returncode == 0, again.stderr
    assert "was moved by an earlier run" in again.stdout.splitlines()[0]
    assert again.stdout.splitlines()[1].startswith("1 private intervals left behind and deleted")
    assert CANARY.encode() not in file_bytes(source) and PAD_CANARY.encode() not in file_bytes(source)
    assert pg(empty_postgres_url, "SELECT count(*) FROM messages") == [(moved_rows,)]  # nothing copied twice
    third = move(source, empty_postgres_url)
    assert third.returncode == 0, third.stderr
    assert third.stdout.splitlines()[1].startswith("0 private intervals left behind")


def test_without_a_url_or_a_file_the_move_says_so_in_one_line(tmp_path: Path) -> None:
    env = companion_env(tmp_path)
    no_url = run_companion(["move-to-postgres"], env)
    assert (no_url.returncode, no_url.stderr.splitlines()) == (
        2,
        [
            "companion: name the PostgreSQL database: companion move-to-postgres "
            "postgresql://user:password@host/database (or set COMPANION_DATABASE_URL)"
        ],
    )
    no_file = run_companion(["move-to-postgres", "postgresql://companion:secret@/nowhere?host=/nonexistent"], env)
    assert (no_file.returncode, no_file.stderr.splitlines()) == (
        2,
        [f"companion: there is no database at {tmp_path / 'companion.db'} to move (COMPANION_DB_PATH)"],
    )
    assert not (tmp_path / "companion.db").exists()
