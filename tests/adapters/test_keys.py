"""The interval keys' folder: a key durable before its interval, shredded without a trace, expired by its name alone,
and a folder a killed process leaves always settled by reconcile."""

from __future__ import annotations

import base64
import os
import stat

import pytest

from adapters.storage.keys import FAIL, NOTE, OK, WARN, KeyDir, KeyDirError, check_key_dir, file_system_of
from tests.helpers import stopping


@pytest.fixture
def folder(tmp_path):
    return tmp_path / "keys"


@pytest.fixture
def keys(folder) -> KeyDir:
    made = KeyDir(folder)
    made.ensure()
    return made


def key_files(folder) -> list[str]:
    return sorted(os.listdir(folder))


def traces(key: bytes) -> list[bytes]:
    """The forms a key's bytes could take in a file: raw, hex, base64 and base64url."""
    return [key, key.hex().encode(), base64.b64encode(key), base64.urlsafe_b64encode(key)]


def held_anywhere(folder, key: bytes) -> list[str]:
    return [name for name in os.listdir(folder) if any(t in (folder / name).read_bytes() for t in traces(key))]


def test_a_key_file_is_32_random_bytes_only_we_may_read(keys, folder):
    key_id = keys.create(expires_at=1_800_000_000.0)
    other = keys.create(expires_at=None)
    assert key_files(folder) == sorted([f"{key_id}.1800000000.key", f"{other}.never.key"])
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    for name in key_files(folder):
        assert stat.S_IMODE(os.stat(folder / name).st_mode) == 0o600
    first = (folder / f"{key_id}.1800000000.key").read_bytes()
    assert len(first) == 32 and first == keys.key(key_id)
    assert first != (folder / f"{other}.never.key").read_bytes()


def test_a_key_outlives_a_restart_and_is_read_when_first_asked(keys, folder):
    key_id = keys.create(expires_at=None)
    key = keys.key(key_id)
    restarted = KeyDir(folder)
    assert restarted._keys == {}
    assert restarted.key(key_id) == key
    assert restarted.key("0" * 32) is None


def test_a_key_folder_others_may_read_is_refused(folder):
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)  # noqa: S103 - the mode under test
    with pytest.raises(KeyDirError, match="COMPANION_KEY_DIR"):
        KeyDir(folder).ensure()


def test_a_shredded_key_leaves_no_byte_of_itself_in_the_key_folder(keys, folder):
    kept = keys.create(expires_at=None)
    key_id = keys.create(expires_at=None)
    key = keys.key(key_id)
    path = folder / f"{key_id}.never.key"
    held = os.open(path, os.O_RDONLY)  # the file's own blocks, still readable after its name is gone
    try:
        assert keys.shred(key_id) is True
        assert os.fstat(held).st_nlink == 0
        assert os.pread(held, 64, 0) == bytes(32)  # overwritten in place, not replaced
    finally:
        os.close(held)
    assert key_files(folder) == [f"{kept}.never.key"]
    assert held_anywhere(folder, key) == []
    assert keys.key(key_id) is None  # nor in memory
    assert KeyDir(folder).key(key_id) is None
    assert keys.shred(key_id) is False


def test_a_shred_forgets_the_key_even_when_its_file_is_already_gone(keys, folder):
    key_id = keys.create(expires_at=None)
    (folder / f"{key_id}.never.key").unlink()  # removed by hand while the key was in memory
    assert keys.key(key_id) is not None
    assert keys.shred(key_id) is False
    assert keys.key(key_id) is None


def test_an_expired_key_is_shredded_by_its_name_alone(keys, folder):
    now = 1_000.0
    due = keys.create(expires_at=999.0)  # fewer digits than `now`: the names are compared as numbers
    due_now = keys.create(expires_at=1_000.0)
    later = keys.create(expires_at=10_000.0)
    never = keys.create(expires_at=None)
    due_key = keys.key(due)
    assert sorted(keys.expire(now)) == sorted([due, due_now])
    assert keys.key(due) is None and keys.key(due_now) is None  # nor in memory
    assert held_anywhere(folder, due_key) == []
    assert key_files(folder) == sorted([f"{later}.10000.key", f"{never}.never.key"])
    # A process that never saw these keys, and no database, shreds by the names alone.
    assert KeyDir(folder).expire(20_000.0) == [later]
    assert key_files(folder) == [f"{never}.never.key"]


def test_a_key_is_never_named_to_outlive_its_interval(keys, folder):
    key_id = keys.create(expires_at=1_000.9)
    assert key_files(folder) == [f"{key_id}.1000.key"]
    assert keys.expire(1_000.5) == [key_id]


def test_reconcile_shreds_orphans_and_names_keyless_segments(keys, folder):
    live = keys.create(expires_at=None)
    orphan = keys.create(expires_at=None)  # its segment row never committed
    orphan_key = keys.key(orphan)
    lost = "ab" * 16  # a segment whose key file is gone (a folder restored elsewhere, say)
    restarted = KeyDir(folder)
    assert restarted.reconcile({live, lost}) == {lost}
    assert key_files(folder) == [f"{live}.never.key"]
    assert held_anywhere(folder, orphan_key) == []
    assert restarted.key(live) == keys.key(live)


def test_a_cut_short_or_zeroed_key_file_never_loads_and_reconcile_settles_it(keys, folder):
    half = "a" * 32
    zeroed = "b" * 32
    (folder / f"{half}.never.key").write_bytes(os.urandom(16))  # a create cut off mid-write
    (folder / f"{zeroed}.never.key").write_bytes(bytes(32))  # a shred cut off after its overwrite
    fresh = KeyDir(folder)
    assert fresh.key(half) is None and fresh.key(zeroed) is None
    assert fresh.reconcile({half, zeroed}) == {half, zeroed}
    assert key_files(folder) == []


def test_files_that_are_not_keys_are_never_read_or_shredded(keys, folder):
    (folder / "notes.txt").write_bytes(b"not a key")
    (folder / "KEY.never.key").write_bytes(os.urandom(32))  # not a key id of ours
    keys.expire(10**12)
    keys.reconcile(set())
    assert key_files(folder) == ["KEY.never.key", "notes.txt"]


def test_create_and_shred_sync_the_key_and_its_folder_before_they_return(keys, folder, monkeypatch):
    """What a power cut would do cannot be tested here; the order of the calls that make it safe can."""
    events: list[str] = []
    real_fsync, real_write, real_pwrite, real_unlink = os.fsync, os.write, os.pwrite, os.unlink

    def fsync(fd):
        events.append("fsync folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def write(fd, data):
        events.append("write")
        return real_write(fd, data)

    def pwrite(fd, data, offset):
        events.append("zeros" if not any(data) else "pwrite")
        return real_pwrite(fd, data, offset)

    def unlink(path, *args, **kwargs):
        events.append("unlink")
        real_unlink(path, *args, **kwargs)

    for name, spy in {"fsync": fsync, "write": write, "pwrite": pwrite, "unlink": unlink}.items():
        monkeypatch.setattr(os, name, spy)
    key_id = keys.create(expires_at=None)
    assert events == ["write", "fsync file", "fsync folder"]
    events.clear()
    keys.shred(key_id)
    assert events == ["zeros", "fsync file", "unlink", "fsync folder"]


# --- a process killed after each step -----------------------------------------------------------------

KNOWN_KEY = bytes(range(1, 33))
# What the child runs once the step is wrapped: a create (of KNOWN_KEY), or a shred of the key id given.
_CHILD = """
from pathlib import Path
import adapters.storage.keys as k

command, folder = sys.argv[3:5]
k._new_key = lambda: bytes(range(1, 33))
keys = k.KeyDir(Path(folder))
if command == "create":
    keys.create(None)
else:
    keys.shred(sys.argv[5])
"""
CREATE_STEPS = ["_open_new", "_write_key", "_sync_file", "_sync_folder"]
SHRED_STEPS = ["_overwrite", "_sync_file", "_unlink", "_sync_folder"]


def kill_after(stage: str, *args: str) -> None:
    stopping.kill_after("adapters.storage.keys", stage, _CHILD, *args)


@pytest.mark.wire
@pytest.mark.parametrize("stage", CREATE_STEPS)
def test_a_create_killed_at_any_step_leaves_the_whole_key_or_nothing_that_loads(keys, folder, stage):
    kill_after(stage, "create", str(folder))
    [name] = key_files(folder)
    key_id = name.split(".")[0]
    loaded = KeyDir(folder).key(key_id)
    assert loaded in (None, KNOWN_KEY)
    if stage == "_open_new":
        assert loaded is None  # an empty file is no key
    if stage == "_sync_folder":
        assert loaded == KNOWN_KEY  # durable: its segment row may commit now
    # create never returned, so no segment row names the key: an orphan, shredded at the next start.
    assert KeyDir(folder).reconcile(set()) == set()
    assert key_files(folder) == []


@pytest.mark.wire
@pytest.mark.parametrize("stage", SHRED_STEPS)
def test_a_shred_killed_at_any_step_never_leaves_a_key_that_loads(keys, folder, stage):
    key_id = keys.create(expires_at=None)
    key = keys.key(key_id)
    kill_after(stage, "shred", str(folder), key_id)
    restarted = KeyDir(folder)
    assert restarted.key(key_id) is None
    assert held_anywhere(folder, key) == []
    # Its segment row may still exist (keys first, rows after): keyless, so the caller deletes it.
    assert restarted.reconcile({key_id}) == {key_id}
    assert key_files(folder) == []


# --- what the doctor is told -----------------------------------------------------------------------------


def mountinfo(tmp_path, *mounts: tuple[str, str]):
    path = tmp_path / "mountinfo"
    path.write_text(
        "".join(
            f"{n} 1 0:{n} / {point.replace(' ', chr(92) + '040')} rw,relatime - {kind} dev rw\n"
            for n, (point, kind) in enumerate(mounts, start=20)
        )
    )
    return path


def test_the_doctor_fails_a_key_folder_others_may_read_or_inside_the_data_directory(tmp_path):
    data = tmp_path / "pgdata"
    inside = data / "keys"
    inside.mkdir(parents=True, mode=0o700)
    os.chmod(inside, 0o750)  # noqa: S103 - the mode under test
    info = mountinfo(tmp_path, ("/", "ext4"))
    checks = check_key_dir(inside, data_directory=data, mountinfo=info)
    failed = [c.text for c in checks if c.level == FAIL]
    assert any("0750" in t for t in failed) and any("data directory" in t for t in failed)
    os.chmod(inside, 0o700)
    good = tmp_path / "keys"
    good.mkdir(mode=0o700)
    assert [c.level for c in check_key_dir(good, data_directory=data, mountinfo=info)] == [OK, OK]


def test_the_doctor_warns_of_copy_on_write_and_notes_tmpfs_under_the_key_folder(tmp_path):
    folder = tmp_path / "a b" / "keys"
    (tmp_path / "a b").mkdir()
    (tmp_path / "a").mkdir()
    info = mountinfo(tmp_path, ("/", "ext4"), (str(tmp_path / "a b"), "btrfs"), (str(tmp_path / "a"), "tmpfs"))
    assert file_system_of(folder, info) == "btrfs"
    checks = check_key_dir(folder, mountinfo=info)  # not created yet: the folder it would be made in counts
    assert [c.level for c in checks] == [NOTE, WARN]
    assert check_key_dir(tmp_path / "a" / "keys", mountinfo=info)[-1].level == NOTE
    assert check_key_dir(tmp_path / "x", mountinfo=tmp_path / "none")[-1].level == NOTE
