"""`companion run`, `chat`, `doctor`, `backup`, `restore` and `report` on PostgreSQL (COMPANION_DATABASE_URL): real
processes on a real server, with the defaults as shipped. Restarts (a kill mid-turn, a reply left pending) are
the PostgreSQL cells of tests/bot/test_lifecycle_matrix_wire.py."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from adapters.storage.postgres.errors import parse_url
from adapters.storage.postgres.migrate import known_migrations
from bot.instance import LOCK_LOST
from tests.adapters.test_postgres_start import password_cluster  # noqa: F401 - its fixture, for a refused password
from tests.bot.test_instance import Output
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.ports import free_port
from tests.helpers.postgres import PostgresCluster
from tests.helpers.proc import companion_env, run_companion, spawn_companion
from tests.helpers.running import Running
from tests.helpers.telegram_gateway import gateway_env, polling, say, spawn, stop
from tests.helpers.wire_platforms import rows

pytestmark = pytest.mark.wire

# The test cluster lets its user in by trust and ignores a password; the URL carries one all the same, so that
# every line of every command can be searched for it.
PASSWORD = "pw-7f3a-never-shown"


def with_password(url: str) -> str:
    return url.replace("postgresql://companion@", f"postgresql://companion:{PASSWORD}@", 1)


def held(url: str) -> str:
    """How a refusal names the database: <host>/<database>."""
    target = parse_url(url)
    return f"{target.where}/{target.database}"


def never_shown(*outputs: str) -> None:
    for output in outputs:
        assert PASSWORD not in output


@pytest.fixture
def url(postgres_url: str) -> str:
    return with_password(postgres_url)


@pytest.fixture
def gateway_on_postgres(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path, url: str
) -> tuple[FakeTelegramServer, dict[str, str]]:
    """The fake Telegram server, and the environment of a gateway on it and on the test's PostgreSQL database."""
    telegram, model = telegram_servers
    return telegram, gateway_env(tmp_path, telegram, model, COMPANION_DATABASE_URL=url)


def test_a_telegram_turn_on_postgresql_is_answered_and_stored_there(
    gateway_on_postgres: tuple[FakeTelegramServer, dict[str, str]], tmp_path: Path, url: str
) -> None:
    telegram, env = gateway_on_postgres
    gateway = spawn(env)
    try:
        polling(telegram, gateway)
        assert say(telegram, gateway, "hello on postgres").startswith("fake reply")
        report = run_companion(["report"], env)  # beside the running gateway: no lock taken
    finally:
        code, stderr = stop(gateway)
    assert code == 0, stderr
    assert rows(url, "SELECT role, turn FROM messages ORDER BY id") == [("user", "done"), ("assistant", None)]
    assert rows(url, "SELECT text FROM messages WHERE role = 'user'") == [("hello on postgres",)]
    assert rows(url, "SELECT kind, status FROM deliveries") == [("reply", "sent")]
    assert report.returncode == 0, report.stderr
    never_shown(stderr, report.stdout, report.stderr)
    assert not (tmp_path / "companion.db").exists()  # nothing on SQLite


def test_one_companion_run_per_postgresql_database_and_what_may_run_beside_it(
    gateway_on_postgres: tuple[FakeTelegramServer, dict[str, str]], tmp_path: Path, url: str
) -> None:
    telegram, env = gateway_on_postgres
    first = spawn(env)
    try:
        polling(telegram, first)
        greeted = len(telegram.calls_of("getMe"))
        second = run_companion(["run"], env)  # refused at start-up, before it reaches Telegram
        chat = run_companion(["chat"], env, stdin="/mode\nhello from the terminal\n")
        restore = run_companion(["restore"], env)
        # The doctor of the database alone (no model server or platform to probe), beside the gateway.
        doctor = run_companion(["doctor"], companion_env(tmp_path, COMPANION_DATABASE_URL=url))
        assert say(telegram, first, "still answering").startswith("fake reply")
    finally:
        code, stderr = stop(first)
    assert code == 0, stderr
    assert (second.returncode, second.stderr.splitlines()) == (
        2,
        [f"companion: another companion run holds {held(url)} (pid {first.pid})"],
    )
    assert len(telegram.calls_of("getMe")) == greeted
    assert chat.returncode == 0, chat.stderr  # `companion chat` has a lock of its own, as on SQLite
    assert chat.stdout.startswith("You are in normal mode.") and "fake reply" in chat.stdout
    assert (restore.returncode, restore.stderr.splitlines()) == (
        2,
        [f"companion: companion run holds {held(url)} (pid {first.pid}); stop it before companion restore"],
    )
    assert doctor.returncode == 0, doctor.stdout
    section = doctor.stdout.split("\n\n")[2].splitlines()
    assert section[0] == f"database {url.replace(PASSWORD, '***')} (PostgreSQL)"
    assert section[1].startswith(f"  OK    reachable at {held(url)}, PostgreSQL 1")
    assert section[2:5] == [
        f"  OK    {len(known_migrations())} migration{'s' if len(known_migrations()) != 1 else ''} current",
        f"  --    a companion run holds this database (pid {first.pid})",
        "  --    0 private intervals open",
    ]
    assert section[5] == "  OK    COMPANION_KEY_DIR data/keys: ours, 0700, writable, 0 key file(s)"  # the gateway's
    never_shown(stderr, second.stderr, chat.stdout, chat.stderr, restore.stderr, doctor.stdout, doctor.stderr)


def test_a_gateway_that_loses_its_instance_lock_stops_with_one_line_and_the_next_start_serves(
    gateway_on_postgres: tuple[FakeTelegramServer, dict[str, str]], tmp_path: Path, url: str
) -> None:
    telegram, env = gateway_on_postgres
    with Running(env) as gateway:
        gateway.wait_running()
        # What a restart of PostgreSQL does to the lock's connection (the pool's connections reconnect).
        (ended,) = rows(
            url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ?",
            (f"companion run pid {gateway.proc.pid}",),
        )
        assert ended == (True,)
        code, stderr, said = gateway.exited()
    assert code == 1, stderr
    assert said == [
        "companion: the database connection holding the instance lock dropped (PostgreSQL restarted?); "
        "exiting so that a supervisor (Docker, systemd) starts it again"
    ]
    never_shown(stderr)
    again = spawn(env)
    try:
        polling(telegram, again)
        assert say(telegram, again, "hello again").startswith("fake reply")
    finally:
        code, stderr = stop(again)
    assert code == 0, stderr


def test_a_companion_chat_that_loses_its_instance_lock_ends_with_one_line(tmp_path: Path, url: str) -> None:
    chat = spawn_companion(["chat"], companion_env(tmp_path, COMPANION_DATABASE_URL=url))
    out, err = Output(chat.stdout), Output(chat.stderr)
    try:
        chat.stdin.write("/mode\n")
        chat.stdin.flush()
        assert out.until("You are in").startswith("You are in normal mode.")  # it holds the lock, and answers
        (ended,) = rows(
            url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ?",
            (f"companion chat pid {chat.pid}",),
        )
        assert ended == (True,)
        err.until("dropped")  # noticed: it takes no more lines
        # The line its input thread still waits for; then it ends (a thread blocked on input holds up an exit).
        chat.stdin.write("a line after the drop\n")
        chat.stdin.flush()
        chat.wait(30)
        said = err.until("companion:")
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.wait()
        chat.stdin.close()
        out.join()
        err.join()
    assert chat.returncode == 2
    assert said == f"companion: {LOCK_LOST}\n"
    never_shown(said)


def test_backup_on_postgresql_is_refused_in_one_line_and_restore_makes_a_restored_database_safe(
    tmp_path: Path, url: str
) -> None:
    # A port for `web-login`'s link (nothing listens: no gateway runs here).
    env = companion_env(tmp_path, COMPANION_DATABASE_URL=url, COMPANION_HTTP_PORT=str(free_port()))
    backup = run_companion(["backup", str(tmp_path / "backups") + "/"], env)
    assert (backup.returncode, backup.stdout) == (2, "")
    assert backup.stderr.splitlines() == [
        "companion: companion backup is for the SQLite file; on PostgreSQL (COMPANION_DATABASE_URL) use the "
        "server's own base backups, WAL archives or pg_dump, and never put COMPANION_KEY_DIR in them "
        "(docs/operations.md, Backups on PostgreSQL)"
    ]
    assert not (tmp_path / "backups").exists()
    with_path = run_companion(["restore", str(tmp_path / "a-backup.db")], env)
    assert with_path.returncode == 2 and "without a PATH" in with_path.stderr

    # What the operator's own backup brought back: a sign-in, a code (web-login's), an interval whose expiry passed meanwhile
    # (and its row), one still running, and an artifact past its retention.
    now = time.time()
    rows(
        url,
        "WITH c AS (INSERT INTO conversations (platform, chat_id, kind, created_at)"
        " VALUES ('telegram', '1', 'direct', ?) RETURNING id),"
        " s AS (INSERT INTO segments (conversation_id, anchor_message_id, started_at, last_activity_at, expires_at)"
        " SELECT id, 0, ?, ?, ? FROM c UNION ALL SELECT id, 0, ?, ?, ? FROM c RETURNING id, expires_at)"
        " SELECT count(*) FROM s",
        (now - 7200, now - 7200, now - 7200, now - 3600, now - 60, now - 60, now + 3600),
    )
    rows(
        url,
        "INSERT INTO messages (conversation_id, role, mode, text, capture, created_at, segment_id)"
        " SELECT conversation_id, 'user', 'private', ?, 'skipped', started_at, id FROM segments WHERE expires_at < ?",
        ("s1." + "A" * 40, now),  # sealed words, in shape (the schema takes no plain text in a private row)
    )
    rows(url, "INSERT INTO web_sessions (token_hash, created_at, expires_at) VALUES ('t', ?, ?)", (now, now + 9e3))
    login = run_companion(["web-login"], env)
    assert login.returncode == 0 and "/login#" in login.stdout, login.stderr
    assert rows(url, "SELECT count(*) FROM web_login_codes") == [(1,)]
    restored = run_companion(["restore"], env)
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout.splitlines() == [
        "made the restored database ready: 2 web sign-ins, 1 expired private intervals and 0 expired artifacts "
        "deleted; 1 intervals without their key masked"
    ]
    assert rows(url, "SELECT count(*) FROM segments WHERE expires_at > ?", (now,)) == [(1,)]
    # The one left has no key in COMPANION_KEY_DIR (the backup's keys were never copied): masked, closed.
    assert rows(url, "SELECT end_reason FROM segments") == [("key_lost",)]
    assert rows(url, "SELECT count(*) FROM messages") == [(0,)]
    assert rows(url, "SELECT (SELECT count(*) FROM web_sessions) + (SELECT count(*) FROM web_login_codes)") == [(0,)]
    never_shown(restored.stdout, restored.stderr)


FAILURES = ["unreachable", "password refused", "no database", "newer migration", "no driver", "not a url"]


@pytest.mark.parametrize("failure", FAILURES)
def test_companion_run_on_a_postgresql_it_cannot_use_stops_with_one_line_without_the_password(
    failure: str, postgres_cluster: PostgresCluster, url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    database = parse_url(url).database
    port = free_port()
    secured: PostgresCluster | None = None
    if failure == "password refused":
        secured = request.getfixturevalue("password_cluster")
    expected = {
        "unreachable": f"cannot reach PostgreSQL at 127.0.0.1:{port} (COMPANION_DATABASE_URL): connection refused",
        "password refused": f"PostgreSQL at {secured.socket_dir if secured else ''} (socket) refused the password "
        "for user companion (COMPANION_DATABASE_URL)",
        "no database": f"database nowhere does not exist on {postgres_cluster.socket_dir} (socket) "
        "(createdb nowhere, or name another in COMPANION_DATABASE_URL)",
        "newer migration": "the database has migration 0099_from_the_future.sql which this version of companion "
        "does not know; it was written by a newer version: upgrade companion, or restore a backup made by this version",
        "no driver": "COMPANION_DATABASE_URL is set, but the PostgreSQL driver is not installed: "
        "pip install 'companion[postgres]' (or -e '.[postgres]' in a checkout)",
        "not a url": "COMPANION_DATABASE_URL: must be a PostgreSQL URL, such as "
        "postgresql://user:password@host:5432/database (the value is not shown)",
    }[failure]
    if failure == "unreachable":
        url = f"postgresql://companion:{PASSWORD}@127.0.0.1:{port}/companion"
    elif secured is not None:
        url = secured.url("postgres", password=PASSWORD)  # not its password
    elif failure == "no database":
        url = url.replace(f"/{database}?", "/nowhere?")
    elif failure == "newer migration":
        rows(url, "INSERT INTO schema_migrations VALUES ('0099_from_the_future.sql', 0)")
    elif failure == "not a url":
        url = f"mysql://companion:{PASSWORD}@db.example.com/companion"
    # The HTTP service on a free port: something to serve, so `run` opens the store.
    env = companion_env(tmp_path, COMPANION_DATABASE_URL=url, COMPANION_HTTP_PORT=str(free_port()))
    if failure == "no driver":
        # The `postgres` extra missing: psycopg made unimportable in the child before `companion run` starts.
        code = "import sys; sys.modules['psycopg'] = None; from bot.cli import main; sys.exit(main(['run']))"
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
    else:
        done = run_companion(["run"], env)
    assert (done.returncode, done.stderr.splitlines()) == (2, [f"companion: {expected}"])
    never_shown(done.stdout, done.stderr)
    assert not (tmp_path / "companion.db").exists()
