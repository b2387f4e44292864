"""The interval keys' folder (`COMPANION_KEY_DIR`): one file a key, made durable, shredded in place, expired by name.

PostgreSQL's engine seals with these keys (adapters/storage/sealing.py `IntervalKeys`); the query classes
make one at each interval's open and shred it at its expiry or `/forget private`, before its rows, and
start-up reconciles the folder with the segments (adapters/storage/intervals.py). A key never reaches the
database: it lives in this folder and, once read, in the process's memory. Its file is
`<key_id>.<expires_at|never>.key`, 32 random bytes, mode 0600, in a folder of mode 0700; the name carries
the interval's expiry, so expiry shreds keys without asking the database (it holds while the database is
down). Every step is ordered so that a process killed anywhere leaves a folder `reconcile` can settle:
a file that holds no whole key (a create or a shred cut short) never loads as a key.

The calls block on fsync (milliseconds): an async caller runs them in a thread (`asyncio.to_thread`).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import re
import secrets
import stat
import threading
from collections.abc import Collection, Iterable
from pathlib import Path, PurePath

from core.values.errors import StoreError

KEY_BYTES = 32  # AES-256
NEVER = "never"
# Only files of exactly this shape are ours: anything else in the folder is never read, shredded or counted.
NAME = re.compile(r"(?P<key_id>[0-9a-f]{32})\.(?P<expires>never|[0-9]{1,20})\.key")
MOUNTINFO = Path("/proc/self/mountinfo")
COPY_ON_WRITE = frozenset({"btrfs", "zfs", "overlay", "bcachefs"})
IN_MEMORY = frozenset({"tmpfs", "ramfs"})
OK, FAIL, WARN, NOTE = "ok", "fail", "warn", "note"


class KeyDirError(StoreError):
    """The key folder cannot be used as it is (one line naming the setting and what to change)."""


@dataclasses.dataclass(frozen=True, slots=True)
class KeyName:
    """A key file's name: its key id, and the whole second its interval expires at (None: never)."""

    key_id: str
    expires_at: int | None

    @property
    def file(self) -> str:
        return f"{self.key_id}.{NEVER if self.expires_at is None else self.expires_at}.key"


def key_name(file: str) -> KeyName | None:
    """The name of a key file, or None for a file that is not one of ours."""
    match = NAME.fullmatch(file)
    if match is None:
        return None
    expires = match["expires"]
    return KeyName(match["key_id"], None if expires == NEVER else int(expires))


def expiry_second(expires_at: float | None) -> int | None:
    """The second a key file's name gives: rounded down, so a key may go a fraction of a second before
    its interval's rows, never after them (its rows then open to None: masked, the safe direction)."""
    return None if expires_at is None else math.floor(expires_at)


class KeyDir:
    """The key folder of one companion process: create, load on demand, shred, expire, reconcile.

    Keys first, rows after: a segment row is committed only after its key is durable (`create`), and a
    key is shredded before its rows are deleted (`shred`, `expire`); a crash between the two leaves an
    orphan key or a keyless segment, both settled by `reconcile` at the next start."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._keys: dict[str, bytes] = {}
        self._lock = threading.Lock()  # one change of the folder at a time, whichever thread asks

    def ensure(self) -> None:
        """Create the folder (0700) where it is missing; refuse one that is not ours or that others may read."""
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.stat(self.path)
        if not stat.S_ISDIR(info.st_mode):
            raise KeyDirError(f"COMPANION_KEY_DIR: {self.path} is not a folder; name a folder of its own")
        if info.st_uid != os.geteuid():
            raise KeyDirError(f"COMPANION_KEY_DIR: {self.path} belongs to uid {info.st_uid}, not to this user")
        if info.st_mode & 0o077:
            raise KeyDirError(
                f"COMPANION_KEY_DIR: {self.path} has mode {stat.S_IMODE(info.st_mode):04o}, so others may read "
                f"the keys; chmod 700 {self.path}"
            )

    def create(self, expires_at: float | None) -> str:
        """A new key for an interval expiring at `expires_at` (None: never); its id once it is durable.

        The file is created exclusively, written, fsynced, then the folder fsynced: when this returns, the
        key survives a power cut. The caller commits the segment row naming it only then."""
        name = KeyName(secrets.token_hex(16), expiry_second(expires_at))
        key = _new_key()
        with self._lock:
            fd = _open_new(self.path / name.file)
            try:
                _write_key(fd, key)
                _sync_file(fd)
            finally:
                os.close(fd)
            _sync_folder(self.path)
            self._keys[name.key_id] = key
        return name.key_id

    def key(self, key_id: str) -> bytes | None:
        """The key's 32 bytes, read from its file the first time; None when there is no whole key
        (shredded, lost with the folder, or a create or shred a crash cut short)."""
        key = self._keys.get(key_id)
        if key is not None:
            return key
        with self._lock:
            files = [name for name in self._names() if name.key_id == key_id]
            if len(files) != 1:
                return None
            key = _read_key(self.path / files[0].file)
            if key is not None:
                self._keys[key_id] = key
            return key

    def shred(self, key_id: str) -> bool:
        """Forget the key and destroy its file (zeros over it, fsync, unlink, fsync the folder); whether
        a file was there. Expiry and `/forget private` are to call it before deleting the interval's rows."""
        with self._lock:
            self._keys.pop(key_id, None)
            return bool(self._shred_all(name for name in self._names() if name.key_id == key_id))

    def expire(self, now: float) -> list[str]:
        """Shred every key whose name says its interval expired at `now` or before, asking no database;
        the ids shredded."""
        with self._lock:
            return self._shred_all(
                name for name in self._names() if name.expires_at is not None and name.expires_at <= now
            )

    def reconcile(self, live: Collection[str], *, spare_after: float | None = None) -> set[str]:
        """Settle the folder with the key ids of the segments that exist (`live`), at start, before any
        interval opens: shred every key no segment names (an orphan: a crash came between the key's creation
        and its segment's commit, or the segment went without it) and every file that holds no whole key.
        With `spare_after` (a wall-clock time), a key written at or after it is no orphan yet: another
        process on the same database may be about to commit its segment.
        Returns the live key ids left without a key (a crash between a shred and its rows' deletion, a lost
        folder): the caller masks their segments."""
        with self._lock:
            names = self._names()
            copies = collections.Counter(name.key_id for name in names)
            doomed: list[KeyName] = []
            for name in names:
                orphan = name.key_id not in live and not self._written_since(name, spare_after)
                if orphan or copies[name.key_id] > 1 or not self._load(name):
                    doomed.append(name)
            self._shred_all(doomed)
            kept = {name.key_id for name in names} - {name.key_id for name in doomed}
            return set(live) - kept

    def _written_since(self, name: KeyName, since: float | None) -> bool:
        if since is None:
            return False
        try:
            return os.stat(self.path / name.file, follow_symlinks=False).st_mtime >= since
        except OSError:
            return False

    def _load(self, name: KeyName) -> bool:
        key = _read_key(self.path / name.file)
        if key is not None:
            self._keys[name.key_id] = key
        return key is not None

    def _names(self) -> list[KeyName]:
        try:
            entries = list(os.scandir(self.path))
        except FileNotFoundError:
            return []  # the folder is gone: every key is lost, and every interval fails closed
        names = [key_name(entry.name) for entry in entries if entry.is_file(follow_symlinks=False)]
        return [name for name in names if name is not None]

    def _shred_all(self, names: Iterable[KeyName]) -> list[str]:
        shredded: list[str] = []
        for name in names:
            self._keys.pop(name.key_id, None)
            _shred_file(self.path / name.file)
            shredded.append(name.key_id)
        if shredded:
            _sync_folder(self.path)
        return shredded


# --- the steps, one function each: tests/adapters/test_keys.py kills a process after each -------------


def _new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def _open_new(path: Path) -> int:
    # O_EXCL: never over an existing key; 0600 (the umask only takes bits away).
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def _write_key(fd: int, key: bytes) -> None:
    view = memoryview(key)
    while view:
        view = view[os.write(fd, view) :]


def _sync_file(fd: int) -> None:
    os.fsync(fd)


def _sync_folder(folder: Path) -> None:
    # A new or removed name is durable only once its folder is synced, not when its file is.
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _overwrite(fd: int, size: int) -> None:
    # In place, never by truncation, which would free the key's blocks with its bytes still on them.
    zeros = bytes(max(size, KEY_BYTES))
    done = 0
    while done < len(zeros):
        done += os.pwrite(fd, zeros[done:], done)


def _unlink(path: Path) -> None:
    os.unlink(path)


def _shred_file(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _overwrite(fd, os.fstat(fd).st_size)
        _sync_file(fd)
    finally:
        os.close(fd)
    _unlink(path)


def _read_key(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    # Short: a create cut off before its write; all zeros: a shred cut off after its overwrite.
    if len(data) != KEY_BYTES or not any(data):
        return None
    return data


# --- what `companion doctor` says of the folder --------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class KeyDirCheck:
    """One finding about the key folder: `level` is OK, FAIL, WARN or NOTE; `text` in our words."""

    level: str
    text: str


def key_ids(path: Path) -> set[str]:
    """The key ids of the key files in the folder at `path`, by their names alone (no key is read); none
    when the folder is not there."""
    try:
        entries = list(os.scandir(path))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return set()
    names = (key_name(entry.name) for entry in entries if entry.is_file(follow_symlinks=False))
    return {name.key_id for name in names if name is not None}


def check_key_dir(path: Path, *, data_directory: Path | None = None, mountinfo: Path = MOUNTINFO) -> list[KeyDirCheck]:
    """Read-only checks of the key folder: exists, ours, 0700, writable, its key files 0600, not inside the
    database's data directory, and the file system under it. Creates, reads and changes nothing."""
    checks: list[KeyDirCheck] = []
    place = path.resolve()
    if not os.path.lexists(path):
        parent = _existing_ancestor(place)
        if os.access(parent, os.W_OK | os.X_OK):
            checks.append(KeyDirCheck(NOTE, f"{path} not created yet: the first start creates it (0700)"))
        else:
            checks.append(KeyDirCheck(FAIL, f"{path} cannot be created: {parent} is not writable by this user"))
        place = parent
    else:
        checks += _folder_checks(path)
    if data_directory is not None and place.is_relative_to(data_directory.resolve()):
        checks.append(
            KeyDirCheck(
                FAIL,
                f"{path} is inside the database's data directory {data_directory}: a base backup would carry "
                "the keys beside the sealed text; move COMPANION_KEY_DIR out of it",
            )
        )
    checks.append(_file_system_check(place, mountinfo))
    return checks


def _folder_checks(path: Path) -> list[KeyDirCheck]:
    try:
        info = os.stat(path)
    except OSError:
        return [KeyDirCheck(FAIL, f"{path} cannot be read (a link to nothing?)")]
    if not stat.S_ISDIR(info.st_mode):
        return [KeyDirCheck(FAIL, f"{path} is not a folder")]
    checks: list[KeyDirCheck] = []
    if info.st_uid != os.geteuid():
        checks.append(KeyDirCheck(FAIL, f"{path} belongs to uid {info.st_uid}, not to this user ({os.geteuid()})"))
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        checks.append(KeyDirCheck(FAIL, f"{path} has mode {mode:04o}: others may read the keys; chmod 700 {path}"))
    if not os.access(path, os.W_OK | os.X_OK):
        checks.append(KeyDirCheck(FAIL, f"{path} is not writable by this user: no private interval can open"))
    try:
        keys = [entry for entry in os.scandir(path) if entry.is_file(follow_symlinks=False) and key_name(entry.name)]
    except OSError:
        return [*checks, KeyDirCheck(FAIL, f"{path} cannot be read by this user")]
    loose = [entry for entry in keys if stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode) & 0o077]
    if loose:
        checks.append(KeyDirCheck(FAIL, f"{len(loose)} key file(s) in {path} may be read by others; chmod 600 them"))
    if not checks:
        checks.append(KeyDirCheck(OK, f"{path}: ours, 0700, writable, {len(keys)} key file(s)"))
    return checks


def _file_system_check(place: Path, mountinfo: Path) -> KeyDirCheck:
    kind = file_system_of(place, mountinfo)
    if kind is None:
        return KeyDirCheck(NOTE, f"the file system under {place} could not be read from {mountinfo}")
    if kind in COPY_ON_WRITE:
        return KeyDirCheck(
            WARN,
            f"{place} is on {kind}, copy-on-write: an overwritten key may survive in old blocks or snapshots; "
            "use tmpfs, ext4 or xfs",
        )
    if kind in IN_MEMORY:
        return KeyDirCheck(
            NOTE,
            f"{place} is on {kind}: keys end at a reboot, and with them every private interval (masked, then deleted)",
        )
    return KeyDirCheck(OK, f"{place} is on {kind}")


def file_system_of(place: Path, mountinfo: Path = MOUNTINFO) -> str | None:
    """The type of the file system mounted deepest above `place` (the last of equal mounts), from mountinfo."""
    try:
        lines = mountinfo.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    found: tuple[int, str] | None = None
    for line in lines:
        mount, separator, rest = line.partition(" - ")
        fields = mount.split()
        if not separator or len(fields) < 5 or not rest.split():
            continue
        point = PurePath(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4]))
        depth = len(point.parts)
        if place.is_relative_to(point) and (found is None or depth >= found[0]):
            found = (depth, rest.split()[0])
    return None if found is None else found[1]


def _existing_ancestor(place: Path) -> Path:
    for folder in place.parents:
        if folder.exists():
            return folder
    return Path("/")
