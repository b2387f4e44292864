"""Backups without private rows; restores that can never bring one back."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time

import pytest

from adapters.storage.backup import BACKUP_PREFIX, backup, restore
from core.errors import MigrationError
from core.secrets import hash_passphrase
from tests.conftest import PASSPHRASE
from tests.helpers.chat import all_rows, say
from tests.helpers.proc import companion_env, run_companion

CANARY = b"BACKUP-CANARY-41"


async def private_history(companion, expiry: str = "1h") -> None:
    await say(companion, "normal history line")
    await say(companion, f"/private {PASSPHRASE} {expiry}")
    await say(companion, f"secret {CANARY.decode()}")
    await say(companion, "/normal")


async def test_a_backup_holds_no_private_row_and_no_private_byte(companion, store, tmp_path):
    await private_history(companion)
    result = backup(store.path, tmp_path / "backups", retention_days=14)
    assert result.path.name.startswith(BACKUP_PREFIX)
    assert CANARY not in result.path.read_bytes()
    with sqlite3.connect(result.path) as db:
        assert db.execute("SELECT count(*) FROM segments").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM messages WHERE mode = 'private'").fetchone() == (0,)
        assert db.execute("SELECT text FROM messages WHERE text = 'normal history line'").fetchone()
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert await all_rows(store, "SELECT count(*) FROM segments") == [(1,)]  # the live database is untouched


async def test_backups_older_than_the_retention_are_pruned(companion, store, tmp_path):
    folder = tmp_path / "backups"
    old = backup(store.path, folder, retention_days=14, now=time.time() - 20 * 86400).path
    os.utime(old, (time.time() - 20 * 86400,) * 2)
    unrelated = folder / "notes.txt"
    unrelated.write_text("keep me")
    result = backup(store.path, folder, retention_days=14)
    assert result.pruned == [old] and not old.exists() and unrelated.exists()


async def test_a_restore_drops_every_private_row_before_serving(companion, store, tmp_path):
    await private_history(companion, expiry="never")
    raw_copy = tmp_path / "raw-copy.db"  # e.g. a file-system snapshot, not our backup
    with sqlite3.connect(store.path) as live, sqlite3.connect(raw_copy) as dest:
        live.backup(dest)
    assert CANARY in raw_copy.read_bytes()
    target = tmp_path / "restored" / "companion.db"
    restore(raw_copy, target)
    assert CANARY not in target.read_bytes()
    with sqlite3.connect(target) as db:
        assert db.execute("SELECT count(*) FROM segments").fetchone() == (0,)


async def test_a_restore_never_brings_back_a_segment_that_expired_after_the_snapshot(companion, store, clock, tmp_path):
    await private_history(companion, expiry="1h")
    snapshot = tmp_path / "snapshot.db"
    with sqlite3.connect(store.path) as live, sqlite3.connect(snapshot) as dest:
        live.backup(dest)  # taken while the interval was alive
    clock.advance(3601)
    await companion.sweep()  # expired in the live database after the snapshot
    await store.aclose()
    restore(snapshot, store.path)
    await store.start()
    assert await all_rows(store, "SELECT count(*) FROM segments") == [(0,)]
    assert await all_rows(store, "SELECT count(*) FROM messages WHERE text LIKE '%BACKUP-CANARY%'") == [(0,)]


def test_restoring_a_backup_from_a_newer_version_is_refused(tmp_path):
    path = tmp_path / "future.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at REAL)")
        db.execute("INSERT INTO schema_migrations VALUES ('9999_future', 0)")
    with pytest.raises(MigrationError, match="9999_future"):
        restore(path, tmp_path / "live.db")
    assert not (tmp_path / "live.db").exists()


def test_backup_and_restore_commands_end_to_end(tmp_path):
    env = companion_env(tmp_path, COMPANION_PRIVATE_PASSPHRASE_HASH=hash_passphrase("pw"))
    chat = run_companion(["chat"], env, stdin=f"hello\n/private pw 1h\n{CANARY.decode()}\n")
    assert chat.returncode == 0
    made = run_companion(["backup", str(tmp_path / "bk") + "/"], env)
    assert made.returncode == 0 and "no private rows" in made.stdout
    (path,) = (tmp_path / "bk").iterdir()
    assert CANARY not in path.read_bytes()
    shutil.copy(path, tmp_path / "to-restore.db")
    restored = run_companion(["restore", str(tmp_path / "to-restore.db")], env)
    assert restored.returncode == 0, restored.stderr
    for file in tmp_path.glob("companion.db*"):
        assert CANARY not in file.read_bytes()
    after = run_companion(["chat"], env, stdin="/mode\n")
    assert after.stdout.startswith("You are in normal mode.")
