"""Backups without private rows; restores that can never bring one back."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

from adapters.storage import backup as backup_module
from adapters.storage.backup import BACKUP_PREFIX, backup, restore
from core.privacy.secrets import hash_passphrase
from core.values.errors import MigrationError
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows, say
from tests.helpers.proc import ROOT, companion_env, run_companion
from tests.helpers.reader import files_holding

CANARY = b"BACKUP-CANARY-41"

# A backup or restore in a child process that stops for good right after the named stage
# (`_written` is the copy's progress callback: one page written, the rest not yet).
_STOPPING = """
import sys, time
from pathlib import Path
import adapters.storage.backup as b

command, source, target, stage = sys.argv[1:5]
b._PAGES_PER_STEP = 1
original = getattr(b, stage)
def stopping(*args, **kwargs):
    result = original(*args, **kwargs)
    print(stage, flush=True)
    time.sleep(600)  # the test SIGKILLs it here
    return result
setattr(b, stage, stopping)
if command == "backup":
    b.backup(Path(source), Path(target), retention_days=0, now=0.0)  # not the next backup's name
else:
    b.restore(Path(source), Path(target))
"""
STAGES = {
    "backup": ["_remove_leftovers", "_copy_into_memory", "_drop_private_rows", "_written", "_write_file", "_prune"],
    "restore": ["_copy_into_memory", "_remove_leftovers", "_drop_private_rows", "_written", "_write_file"],
}


def kill_at(command: str, source, target, stage: str) -> None:
    """Run `command` in a child process and SIGKILL it right after `stage`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-c", _STOPPING, command, str(source), str(target), stage],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        try:
            marker = proc.stdout.readline().strip()
            assert marker == stage, f"{command} never reached {stage}: {'' if marker else proc.stderr.read()}"
        finally:
            proc.kill()  # SIGKILL: no finally, no atexit, no cleanup in the child
            proc.wait()


async def private_history(companion, expiry: str = "1h") -> None:
    await say(companion, "normal history line")
    await say(companion, f"/private {PASSPHRASE} {expiry}")
    await say(companion, f"secret {CANARY.decode()}")
    await say(companion, "/normal")


async def test_a_backup_holds_no_private_row_and_no_private_byte(companion, stores, tmp_path):
    await private_history(companion)
    result = backup(engines.sqlite_file(stores), tmp_path / "backups", retention_days=14)
    assert result.path.name.startswith(BACKUP_PREFIX)
    assert CANARY not in result.path.read_bytes()
    with sqlite3.connect(result.path) as db:
        assert db.execute("SELECT count(*) FROM segments").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM messages WHERE mode = 'private'").fetchone() == (0,)
        assert db.execute("SELECT text FROM messages WHERE text = 'normal history line'").fetchone()
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert await all_rows(stores, "SELECT count(*) FROM segments") == [(1,)]  # the live database is untouched


async def test_a_backup_and_a_restore_carry_no_line_withdrawing_what_an_ended_interval_showed(
    companion, stores, tmp_path
):
    await private_history(companion)  # its /normal closed the interval
    conversation = (await all_rows(stores, "SELECT id FROM conversations"))[0][0]
    await engines.plant(
        stores,  # what /normal left of an answer shown while written, not withdrawn yet
        "INSERT INTO deliveries (conversation_id, kind, platform, chat_id, nonce, text, retracts, streamed_ids,"
        " next_attempt_at, created_at) VALUES (?, 'reply', 'terminal', '1', 'n', '(withdrawn)', 1, '7001', 0, 0)",
        (conversation,),
    )
    result = backup(engines.sqlite_file(stores), tmp_path / "backups", retention_days=14)
    target = tmp_path / "restored" / "companion.db"
    restore(engines.sqlite_file(stores), target)
    for copy in (result.path, target):
        with sqlite3.connect(copy) as db:
            assert db.execute("SELECT count(*) FROM deliveries WHERE retracts = 1").fetchone() == (0,)
    assert await all_rows(stores, "SELECT count(*) FROM deliveries WHERE retracts = 1") == [(1,)]  # the live one stays


async def test_backups_older_than_the_retention_are_pruned(companion, stores, tmp_path):
    folder = tmp_path / "backups"
    old = backup(engines.sqlite_file(stores), folder, retention_days=14, now=time.time() - 20 * 86400).path
    os.utime(old, (time.time() - 20 * 86400,) * 2)
    unrelated = folder / "notes.txt"
    unrelated.write_text("keep me")
    result = backup(engines.sqlite_file(stores), folder, retention_days=14)
    assert result.pruned == [old] and not old.exists() and unrelated.exists()


async def test_a_restore_drops_every_private_row_before_serving(companion, stores, tmp_path):
    await private_history(companion, expiry="never")
    raw_copy = tmp_path / "raw-copy.db"  # e.g. a file-system snapshot, not our backup
    with sqlite3.connect(engines.sqlite_file(stores)) as live, sqlite3.connect(raw_copy) as dest:
        live.backup(dest)
    assert CANARY in raw_copy.read_bytes()
    target = tmp_path / "restored" / "companion.db"
    restore(raw_copy, target)
    assert CANARY not in target.read_bytes()
    with sqlite3.connect(target) as db:
        assert db.execute("SELECT count(*) FROM segments").fetchone() == (0,)


async def test_a_restore_never_brings_back_a_segment_that_expired_after_the_snapshot(
    companion, stores, clock, tmp_path
):
    await private_history(companion, expiry="1h")
    snapshot = tmp_path / "snapshot.db"
    with sqlite3.connect(engines.sqlite_file(stores)) as live, sqlite3.connect(snapshot) as dest:
        live.backup(dest)  # taken while the interval was alive
    clock.advance(3601)
    await companion.sweep()  # expired in the live database after the snapshot
    await stores.database.aclose()
    restore(snapshot, engines.sqlite_file(stores))
    await stores.database.start()
    assert await all_rows(stores, "SELECT count(*) FROM segments") == [(0,)]
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE text LIKE '%BACKUP-CANARY%'") == [(0,)]


async def test_a_restore_never_brings_back_an_artifact_past_its_retention(make_companion, stores, clock, tmp_path):
    # A restore applies retention by the wall clock: the artifacts are made at wall-clock times.
    made = (time.time() - 2 * 86400, time.time() - 3600)  # past its one-day retention; within it
    clock.t = made[0]
    companion = await make_companion(allow_private_export=True, artifact_retention_seconds=86400.0)
    for created_at in made:
        clock.t = created_at
        await say(companion, f"/private {PASSPHRASE} never")
        await say(companion, "/export")
        assert (await say(companion, "/export confirm")).text.startswith("Created non-private artifact")
        await say(companion, "/normal")
    assert len(await all_rows(stores, "SELECT id FROM artifacts")) == 2
    snapshot = tmp_path / "snapshot.db"
    with sqlite3.connect(engines.sqlite_file(stores)) as live, sqlite3.connect(snapshot) as dest:
        live.backup(dest)  # taken while the first artifact was still kept
    await stores.database.aclose()
    restore(snapshot, engines.sqlite_file(stores))
    await stores.database.start()
    assert await all_rows(stores, "SELECT id FROM artifacts") == [(2,)]


async def test_restoring_our_own_backup_applies_the_artifacts_retention(make_companion, stores, clock, tmp_path):
    clock.t = time.time() - 2 * 86400  # the artifact's one-day retention ended a day ago; no sweep ran since
    companion = await make_companion(allow_private_export=True, artifact_retention_seconds=86400.0)
    await say(companion, f"/private {PASSPHRASE} never")
    await say(companion, "/export")
    await say(companion, "/export confirm")
    await say(companion, "/normal")
    assert await all_rows(stores, "SELECT count(*) FROM artifacts") == [(1,)]
    result = backup(engines.sqlite_file(stores), tmp_path / "backups", retention_days=0)
    await stores.database.aclose()
    restore(result.path, engines.sqlite_file(stores))
    await stores.database.start()
    assert await all_rows(stores, "SELECT count(*) FROM artifacts") == [(0,)]


def test_restoring_a_backup_from_a_newer_version_is_refused(tmp_path):
    path = tmp_path / "future.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at REAL)")
        db.execute("INSERT INTO schema_migrations VALUES ('9999_future', 0)")
    with pytest.raises(MigrationError, match="9999_future"):
        restore(path, tmp_path / "live.db")
    assert not (tmp_path / "live.db").exists()


@pytest.mark.wire
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


@pytest.mark.wire
@pytest.mark.parametrize("command", ["backup", "restore"])
async def test_a_backup_or_restore_killed_at_any_stage_leaves_no_private_byte_in_any_file(
    companion, stores, tmp_path, command
):
    await private_history(companion, expiry="never")
    if command == "backup":
        source, folder = engines.sqlite_file(stores), tmp_path / "backups"
        target = folder
    else:
        source = tmp_path / "raw-copy.db"  # e.g. a file-system snapshot, private rows and all
        with sqlite3.connect(engines.sqlite_file(stores)) as live, sqlite3.connect(source) as dest:
            live.backup(dest)
        folder = tmp_path / "restored"
        target = folder / "companion.db"
    assert files_holding(sorted(source.parent.glob(f"{source.name}*")), CANARY), "no private row to leak"
    left_partial = []
    for stage in STAGES[command]:
        assert callable(getattr(backup_module, stage)), stage
        kill_at(command, source, target, stage)
        files = list(folder.iterdir()) if folder.exists() else []
        assert files_holding(files, CANARY) == [], f"killed after {stage}"
        left_partial += [stage for p in files if p.name.endswith((".partial", ".restoring"))]
        # The next run removes what the killed one left, and writes nothing private either.
        if command == "backup":
            backup(source, target, retention_days=0)
            assert [p.name for p in folder.iterdir() if not p.name.endswith(".db")] == [], f"after {stage}"
        else:
            restore(source, target)
            assert sorted(p.name for p in folder.iterdir()) == ["companion.db"], f"after {stage}"
        assert files_holding(list(folder.iterdir()), CANARY) == []
    assert "_write_file" in left_partial, "no kill left a partial file; the test proves nothing"


async def test_a_backup_and_a_restore_hold_no_web_session_or_sign_in_code(stores, tmp_path):
    from adapters.storage.web import WebQueries

    web = WebQueries(stores.database.engine)
    await web.save_login_code("a" * 64, time.time(), time.time() + 600)
    await web.exchange_login_code("a" * 64, "b" * 64, time.time(), time.time() + 3600)
    await web.save_login_code("c" * 64, time.time(), time.time() + 600)
    result = backup(engines.sqlite_file(stores), tmp_path / "backups", retention_days=14)
    with sqlite3.connect(result.path) as db:
        assert db.execute("SELECT count(*) FROM web_sessions").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM web_login_codes").fetchone() == (0,)
    await stores.database.aclose()
    restore(result.path, engines.sqlite_file(stores))
    with sqlite3.connect(engines.sqlite_file(stores)) as db:
        assert db.execute("SELECT count(*) FROM web_sessions").fetchone() == (0,)
