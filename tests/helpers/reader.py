"""A second process that holds a read snapshot of a SQLite database open, as a backup tool,
`companion chat` or a curious `sqlite3` shell would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_HOLD = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN")
db.execute("SELECT count(*) FROM messages").fetchone()  # the snapshot starts at the first read
print("holding", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
db.close()
"""


class SnapshotReader:
    """`with SnapshotReader(path) as reader:` holds `BEGIN; SELECT ...` open until `release()`."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.proc: subprocess.Popen | None = None

    script = _HOLD

    def __enter__(self) -> SnapshotReader:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self.script, str(self.db_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        if line.strip() != "holding":
            self.proc.kill()
            raise RuntimeError(f"the other process did not start: {self.proc.communicate()[1]}")
        return self

    def release(self) -> None:
        """End the read transaction and exit, so the next checkpoint can finish."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.communicate("release\n", timeout=30)

    def __exit__(self, *exc_info: object) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()  # waits, and closes the pipes


_GREP = """
import sys
needle = sys.argv[1].encode()
for path in sys.argv[2:]:
    with open(path, "rb") as f:
        if needle in f.read():
            print(path)
"""


def files_holding(paths: list[Path], needle: bytes) -> list[Path]:
    """The files among `paths` whose raw bytes contain `needle`, read by a child process: closing
    a descriptor of an open database in this process would drop SQLite's POSIX locks on it
    (sqlite.org/howtocorrupt.html, 2.2), and another process could then delete the WAL."""
    if not paths:
        return []
    found = subprocess.run(
        [sys.executable, "-c", _GREP, needle.decode(), *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [Path(line) for line in found.stdout.splitlines()]


_WRITE = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
db.execute("INSERT OR REPLACE INTO adapter_state (name, value, updated_at) VALUES ('held', 'x', 0)")
print("holding", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
db.close()
"""


class WriteHolder(SnapshotReader):
    """`with WriteHolder(path) as holder:` holds the database's write lock (BEGIN IMMEDIATE and
    an uncommitted write) until `release()`, as a backup or a second process writing would."""

    script = _WRITE
