"""`companion doctor` on PostgreSQL (COMPANION_DATABASE_URL): each finding of its section, read without a write or
a lock, and the key folder (COMPANION_KEY_DIR) checked beside it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from adapters.storage.postgres.instance import AdvisoryInstanceLock
from adapters.storage.postgres.migrate import known_migrations
from bot.cli import _check_db_path
from bot.doctor import FAIL, INFO, OK, WARN, Report, diagnose
from bot.settings import Settings
from core.values.errors import StoreError
from tests.helpers.ports import free_port
from tests.helpers.postgres import PostgresCluster
from tests.helpers.wire_platforms import rows

PASSWORD = "pw-doctor-9c1e"
SHIPPED = len(known_migrations())


def migrations(count: int) -> str:
    return f"{count} migration{'s' if count != 1 else ''}"


def settings_on(tmp_path: Path, url: str, **values: Any) -> Settings:
    values.setdefault("key_dir", tmp_path / "keys")
    return Settings(_env_file=None, db_path=tmp_path / "companion.db", database_url=url, **values)


async def doctor(settings: Settings) -> Report:
    return await diagnose(settings, check_path=_check_db_path)


def section(report: Report) -> list[tuple[str, str]]:
    (found,) = [s for s in report.sections if s.title.endswith("(PostgreSQL)") or "COMPANION_DATABASE_URL" in s.title]
    return [(line.status, line.text) for line in found.lines]


def visitor_url(cluster: PostgresCluster, url: str) -> str:
    """The same database as a user who owns nothing in it and was granted nothing."""
    cluster.execute("DO $$ BEGIN CREATE ROLE visitor LOGIN; EXCEPTION WHEN duplicate_object THEN END $$")
    return cluster.url(url.split("/")[3].split("?")[0], user="visitor")


async def test_a_migrated_database_is_reachable_current_and_its_open_intervals_counted(
    tmp_path: Path, postgres_url: str
) -> None:
    rows(
        postgres_url,
        "WITH c AS (INSERT INTO conversations (platform, chat_id, kind, created_at) VALUES ('t', '1', 'direct', 1)"
        " RETURNING id) INSERT INTO segments (conversation_id, anchor_message_id, started_at, last_activity_at)"
        " SELECT id, 0, 1, 1 FROM c",
    )
    report = await doctor(settings_on(tmp_path, postgres_url))
    lines = section(report)
    assert lines[0][0] == OK and lines[0][1].startswith("reachable at ") and ", PostgreSQL 1" in lines[0][1]
    assert lines[1:3] == [(OK, f"{migrations(SHIPPED)} current"), (INFO, "1 private interval open")]
    assert report.problems == 0


async def test_the_doctor_on_an_empty_database_says_what_the_start_will_apply_and_creates_nothing(
    tmp_path: Path, empty_postgres_url: str
) -> None:
    report = await doctor(settings_on(tmp_path, empty_postgres_url))
    assert (OK, f"{migrations(SHIPPED)} to apply at the next start") in section(report)
    assert rows(empty_postgres_url, "SELECT to_regclass('schema_migrations')") == [(None,)]  # the migrator's table
    assert not (tmp_path / "keys").exists()


async def test_a_user_who_may_not_create_the_tables_is_told_what_to_grant(
    tmp_path: Path, postgres_cluster: PostgresCluster, empty_postgres_url: str
) -> None:
    report = await doctor(settings_on(tmp_path, visitor_url(postgres_cluster, empty_postgres_url)))
    database = empty_postgres_url.split("/")[3].split("?")[0]
    assert (
        FAIL,
        "user visitor may not create tables in schema public, so the migrations cannot run: "
        "GRANT CREATE ON SCHEMA public TO visitor",
    ) in section(report), database


async def test_a_user_without_rights_on_the_tables_is_told_what_to_grant(
    tmp_path: Path, postgres_cluster: PostgresCluster, postgres_url: str
) -> None:
    report = await doctor(settings_on(tmp_path, visitor_url(postgres_cluster, postgres_url)))
    (lacking,) = [text for status, text in section(report) if status == FAIL and "lacks rights" in text]
    assert lacking.startswith("user visitor lacks rights on ")
    assert lacking.endswith(
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public, and USAGE ON ALL SEQUENCES IN SCHEMA "
        "public, TO visitor"
    )


async def test_a_gateway_holding_the_database_is_named_and_its_lock_stays_its_own(
    tmp_path: Path, postgres_url: str
) -> None:
    gateway = AdvisoryInstanceLock(postgres_url, "run")
    await gateway.acquire()
    try:
        report = await doctor(settings_on(tmp_path, postgres_url))
        assert (INFO, f"a companion run holds this database (pid {os.getpid()})") in section(report)
        with pytest.raises(StoreError, match=r"^another companion run holds"):
            await AdvisoryInstanceLock(postgres_url, "run").acquire()
    finally:
        await gateway.aclose()
    report = await doctor(settings_on(tmp_path, postgres_url))
    assert not [text for _, text in section(report) if "holds this database" in text]


async def test_an_unreachable_server_is_one_fail_line_without_the_password(
    tmp_path: Path, psycopg_driver: None
) -> None:
    port = free_port()
    report = await doctor(settings_on(tmp_path, f"postgresql://companion:{PASSWORD}@127.0.0.1:{port}/companion"))
    assert section(report)[0] == (
        FAIL,
        f"cannot reach PostgreSQL at 127.0.0.1:{port} (COMPANION_DATABASE_URL): connection refused",
    )
    assert PASSWORD not in report.render()
    assert "postgresql://companion:***@127.0.0.1" in report.render()


async def test_a_database_of_a_newer_companion_says_upgrade(tmp_path: Path, postgres_url: str) -> None:
    rows(postgres_url, "INSERT INTO schema_migrations VALUES ('0099_from_the_future.sql', 0)")
    report = await doctor(settings_on(tmp_path, postgres_url))
    assert [text for status, text in section(report) if status == FAIL] == [
        "written by a newer companion (migration 0099_from_the_future.sql): upgrade companion, or restore a backup "
        "made by this version"
    ]


async def test_the_key_folder_is_checked_beside_the_database(
    tmp_path: Path, postgres_cluster: PostgresCluster, postgres_url: str
) -> None:
    keys = tmp_path / "open-keys"
    keys.mkdir(mode=0o755)
    keys.chmod(0o755)
    report = await doctor(settings_on(tmp_path, postgres_url, key_dir=keys))
    assert (FAIL, f"COMPANION_KEY_DIR {keys} has mode 0755: others may read the keys; chmod 700 {keys}") in section(
        report
    )
    # Inside the server's data directory (which the test's superuser may read), a base backup would carry the keys.
    inside = postgres_cluster.data / "companion-keys"
    report = await doctor(settings_on(tmp_path, postgres_url, key_dir=inside))
    assert [text for status, text in section(report) if status == FAIL and "data directory" in text]
    assert not inside.exists()


async def test_intervals_without_their_key_and_keys_no_interval_names_are_counted_never_named(
    tmp_path: Path, postgres_url: str
) -> None:
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    held, lost, orphan = "a" * 32, "b" * 32, "c" * 32
    for key_id in (held, orphan):
        (keys / f"{key_id}.never.key").write_bytes(os.urandom(32))
    rows(
        postgres_url,
        "WITH c AS (INSERT INTO conversations (platform, chat_id, kind, created_at) VALUES ('t', '1', 'direct', 1)"
        " RETURNING id) INSERT INTO segments (conversation_id, anchor_message_id, started_at, last_activity_at, key_id)"
        f" SELECT id, 0, 1, 1, k FROM c, (VALUES ('{held}'), ('{lost}')) AS keys (k)",
    )
    lines = section(await doctor(settings_on(tmp_path, postgres_url)))
    assert [(status, text.split(":")[0]) for status, text in lines if "key" in text and "KEY_DIR " not in text] == [
        (WARN, "1 private interval without its key in COMPANION_KEY_DIR"),
        (INFO, "1 key file no interval names"),
    ]
    assert not [text for _, text in lines if held in text or lost in text or orphan in text]


async def test_without_cryptography_the_doctor_says_what_to_install(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "cryptography", None)
    report = await doctor(settings_on(tmp_path, postgres_url))
    assert [text for status, text in section(report) if status == FAIL] == [
        "the cryptography package is missing, so the store cannot seal private intervals and will not start: "
        "pip install 'companion[postgres]'"
    ]
