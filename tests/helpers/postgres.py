"""A real PostgreSQL cluster for the tests: a scratch folder, the server's own user, a unix socket only."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from urllib.parse import quote

BIN_ENV = "COMPANION_TEST_PG_BIN"
# In CI (`.ci/run`) a cluster that does not start is an error; elsewhere its tests skip, saying how.
REQUIRE_ENV = "COMPANION_TEST_REQUIRE_POSTGRES"
HOW_TO_GET_IT = "apt-get install postgresql-15 (`.ci/run` does)"
SUPERUSER = "companion"
START_SECONDS = 60.0  # initdb and the first start on a busy 2-core machine
STOP_SECONDS = 20.0
DEFAULT_PORT = 5432  # on a unix socket only, the port is the socket file's name (`.s.PGSQL.<port>`)

# Fast and disposable: nothing a test writes has to survive a power loss.
FAST = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "16MB",
    "max_connections": "100",  # three gateways of 17 connections each (tests/bot/test_shared_telegram_wire.py)
}


# Every byte kept, as an operator's careful cluster keeps it (tests/adapters/store/test_postgres_shredding.py):
# durable commits, full pages and the WAL a replica and an archive need, every statement logged with its
# parameters whole. With `archive=True` the cluster also copies each finished WAL segment into `archive`.
KEEPING_EVERY_BYTE = {
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "wal_level": "replica",
    "max_wal_senders": "4",
    "log_statement": "all",
    "log_parameter_max_length": "-1",
    "log_min_duration_statement": "0",
}


class PostgresUnavailable(Exception):
    """The cluster could not start; the message is one line saying why."""


def required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in {"", "0"}


def find_bindir() -> Path:
    """COMPANION_TEST_PG_BIN, else the highest /usr/lib/postgresql/*/bin, else `pg_config --bindir`."""
    named = os.environ.get(BIN_ENV)
    if named:
        candidates = [Path(named)]
    else:
        versions = Path("/usr/lib/postgresql").glob("*/bin")
        candidates = sorted(versions, key=lambda p: _version_key(p.parent.name), reverse=True)
        pg_config = shutil.which("pg_config")
        if pg_config:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True)
                candidates.append(Path(out.stdout.strip()))
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "postgres").is_file():
            return bindir
    where = named or "/usr/lib/postgresql/*/bin or pg_config --bindir"
    raise PostgresUnavailable(f"no initdb and postgres in {where}")


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


class PostgresCluster:
    """initdb and postgres in a folder of their own, reached by the socket in that folder only (no TCP port, so
    clusters of several xdist workers never clash). As root the server runs as `postgres` (it refuses root).

    `settings` are `-c` options on top of FAST; `password` makes the superuser's login need it (scram-sha-256)
    instead of `trust`.
    """

    def __init__(
        self,
        *,
        settings: Mapping[str, str] | None = None,
        password: str | None = None,
        bindir: Path | None = None,
        port: int = DEFAULT_PORT,
        archive: bool = False,
    ) -> None:
        self.settings = {**FAST, **(settings or {})}
        self.password = password
        self.port = port
        self.archive = archive
        self._bindir = bindir
        self.folder: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._names = itertools.count(1)

    # --- lifecycle ----------------------------------------------------------

    def start(self) -> PostgresCluster:
        """initdb, start, wait until it accepts connections.

        Raises:
            PostgresUnavailable: the binaries are missing, or initdb or the server failed (one line why).
        """
        if self._process is not None:
            return self
        try:
            folder = self._make_folder()
            owner = _server_user()
            init = [str(self.bindir / "initdb"), "-D", str(self.data), "-U", SUPERUSER, "-E", "UTF8", "--locale=C"]
            init.append("--no-sync")
            if self.password is None:
                init += ["-A", "trust"]
            else:
                secret = folder / "pwfile"
                secret.write_text(self.password + "\n", encoding="utf-8")
                if owner is not None:
                    os.chown(secret, owner.pw_uid, owner.pw_gid)
                init += ["-A", "scram-sha-256", f"--pwfile={secret}"]
            done = subprocess.run(init, capture_output=True, text=True, timeout=START_SECONDS, **_as(owner))
            if done.returncode != 0:
                raise PostgresUnavailable(f"initdb failed: {_last_line(done.stderr or done.stdout)}")
            self.resume()
        except PostgresUnavailable:
            self.stop()
            raise
        except (OSError, subprocess.SubprocessError) as exc:
            self.stop()
            raise PostgresUnavailable(f"{type(exc).__name__}: {exc}") from exc
        return self

    @property
    def bindir(self) -> Path:
        if self._bindir is None:
            self._bindir = find_bindir()
        return self._bindir

    def _make_folder(self) -> Path:
        # Not pytest's tmp_path: root's 0700 tree is closed to the server's user.
        folder = Path(tempfile.mkdtemp(prefix="companion-pg-"))
        self.folder = folder
        atexit.register(self._kill)
        owner = _server_user()
        if owner is not None:
            os.chown(folder, owner.pw_uid, owner.pw_gid)
        if self.archive:
            self.archive_dir.mkdir()
            if owner is not None:
                os.chown(self.archive_dir, owner.pw_uid, owner.pw_gid)
        return folder

    def resume(self) -> None:
        """Start the server on the data folder as it is (after `start`, `halt` or `crash`), and wait until it
        accepts connections; the server log goes on where it was.

        Raises:
            PostgresUnavailable: the server did not start (one line why).
        """
        if self.running:
            return
        command = [str(self.bindir / "postgres"), "-D", str(self.data), "-k", str(self.socket_dir)]
        command += ["-c", "listen_addresses=", "-p", str(self.port)]
        settings = dict(self.settings)
        if self.archive:
            settings |= {"archive_mode": "on", "archive_command": f"cp %p {self.archive_dir}/%f"}
        for name, value in settings.items():
            command += ["-c", f"{name}={value}"]
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, **_as(_server_user()))
        self._wait_ready(self.bindir)

    def halt(self, mode: str = "fast") -> None:
        """Stop the server and keep its folder (`resume` starts it again): "fast" as `pg_ctl stop -m fast`
        (SIGINT), "immediate" as `pg_ctl stop -m immediate` (SIGQUIT: no checkpoint, a crash recovery at the
        next start)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGQUIT if mode == "immediate" else signal.SIGINT)
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_SECONDS)

    def _wait_ready(self, bindir: Path) -> None:
        deadline = time.monotonic() + START_SECONDS
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise PostgresUnavailable(f"postgres exited: {_last_line(self.server_log())}")
            probe = [str(bindir / "pg_isready"), "-q", "-h", str(self.socket_dir), "-p", str(self.port)]
            ready = subprocess.run(
                [*probe, "-U", SUPERUSER, "-d", "postgres"],
                capture_output=True,
                timeout=10,
            )
            if ready.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise PostgresUnavailable(f"postgres did not accept connections: {_last_line(self.server_log())}")
            time.sleep(0.05)

    def stop(self) -> None:
        """A fast shutdown (SIGINT, as `pg_ctl stop -m fast`), then the folder removed; safe to call twice."""
        self.halt()
        folder, self.folder = self.folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def _kill(self) -> None:
        """At interpreter exit, whatever happened: an immediate shutdown (SIGQUIT), then the folder."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGQUIT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(STOP_SECONDS)
            if self._process.poll() is None:
                self._process.kill()
        self.stop()

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- where it is --------------------------------------------------------

    @property
    def data(self) -> Path:
        assert self.folder is not None, "the cluster is not started"
        return self.folder / "data"

    @property
    def socket_dir(self) -> Path:
        assert self.folder is not None, "the cluster is not started"
        return self.folder

    @property
    def log_path(self) -> Path:
        assert self.folder is not None, "the cluster is not started"
        return self.folder / "server.log"

    @property
    def archive_dir(self) -> Path:
        """Where `archive_command` copies each finished WAL segment (with `archive=True`)."""
        assert self.folder is not None, "the cluster is not started"
        return self.folder / "archive"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def server_log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def url(self, database: str = "postgres", *, user: str = SUPERUSER, password: str | None = None) -> str:
        """A postgresql:// URL reaching this cluster's socket (the folder as `host`, percent-encoded)."""
        secret = f":{quote(password, safe='')}" if password is not None else ""
        port = "" if self.port == DEFAULT_PORT else f"&port={self.port}"
        return f"postgresql://{quote(user, safe='')}{secret}@/{quote(database, safe='')}?host={quote(str(self.socket_dir), safe='')}{port}"

    # --- databases ----------------------------------------------------------

    def execute(self, sql: str, database: str = "postgres") -> list[tuple[object, ...]]:
        """One statement as the superuser, autocommit (CREATE DATABASE may not run in a transaction)."""
        import psycopg

        with psycopg.connect(self.url(database, password=self.password), autocommit=True) as conn:
            cursor = conn.execute(sql.encode())  # bytes: psycopg's LiteralString check is for typed callers
            return list(cursor.fetchall()) if cursor.description else []

    def create_database(self, template: str | None = None, *, name: str | None = None) -> str:
        """A new database (`t_<n>`, or `name`), copied from `template` when given; returns its name."""
        import psycopg

        name = name or f"t_{next(self._names)}"
        copy = f" TEMPLATE {template} STRATEGY FILE_COPY" if template else ""
        deadline = time.monotonic() + STOP_SECONDS
        while True:
            try:
                self.execute(f"CREATE DATABASE {name}{copy}")
                return name
            except psycopg.errors.ObjectInUse:
                # The template's last connection is still going away (a pool just closed).
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def drop_database(self, name: str) -> None:
        self.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    @contextlib.contextmanager
    def database(self, template: str | None = None) -> Iterator[str]:
        """A database for one test (its URL), dropped after it even when connections are left open."""
        name = self.create_database(template)
        try:
            yield self.url(name, password=self.password)
        finally:
            self.drop_database(name)


class CopiesOf:
    """What an operator keeps of a cluster beside it, taken by PostgreSQL's own tools run as the server's user:
    base backups, dumps and a streaming replica. Each lands in a folder of the cluster's own (`taken`)."""

    def __init__(self, cluster: PostgresCluster) -> None:
        self.cluster = cluster

    def tool(self, name: str, *args: str) -> bytes:
        """Run a client program of the cluster's binaries against it; its standard output.

        Raises:
            PostgresUnavailable: it failed (its last line of error).
        """
        cluster = self.cluster
        run = _as(_server_user())
        env = dict(run.pop("env", None) or os.environ)
        env |= {"PGHOST": str(cluster.socket_dir), "PGPORT": str(cluster.port), "PGUSER": SUPERUSER}
        if cluster.password is not None:
            env["PGPASSWORD"] = cluster.password
        done = subprocess.run([str(cluster.bindir / name), *args], capture_output=True, timeout=120, env=env, **run)
        if done.returncode != 0:
            raise PostgresUnavailable(f"{name} failed: {_last_line(done.stderr.decode(errors='replace'))}")
        return done.stdout

    def folder(self, name: str) -> Path:
        """A new folder `taken/<name>` the server's user may write into."""
        assert self.cluster.folder is not None, "the cluster is not started"
        owner = _server_user()
        for path in (self.cluster.folder / "taken", self.cluster.folder / "taken" / name):
            path.mkdir(exist_ok=path.name == "taken")
            if owner is not None:
                os.chown(path, owner.pw_uid, owner.pw_gid)
        return path

    def base_backup(self, name: str) -> Path:
        """`pg_basebackup` in tar format with the WAL it needs streamed beside it (base.tar, pg_wal.tar), after
        a fast checkpoint; the folder."""
        folder = self.folder(name)
        self.tool("pg_basebackup", "-D", str(folder), "-F", "t", "-X", "stream", "-c", "fast", "--no-sync")
        return folder

    def dumps(self, database: str, name: str) -> Path:
        """`pg_dump` of `database` in plain SQL and in the custom format; beside the custom one, the SQL
        `pg_restore` reads back out of it (the custom format compresses: its words are not in its bytes)."""
        folder = self.folder(name)
        self.tool("pg_dump", "-F", "p", "-f", str(folder / "dump.sql"), database)
        self.tool("pg_dump", "-F", "c", "-f", str(folder / "dump.custom"), database)
        restored = self.tool("pg_restore", "-f", "-", str(folder / "dump.custom"))
        (folder / "dump.custom.sql").write_bytes(restored)
        return folder

    def replica(self, *, port: int) -> PostgresCluster:
        """A streaming replica in a folder of its own (`pg_basebackup -R -X stream`, with a replication slot), started
        on `port`."""
        primary = self.cluster
        standby = PostgresCluster(
            settings=primary.settings, password=primary.password, bindir=primary.bindir, port=port
        )
        try:
            standby._make_folder()
            # A replication slot of its own: the primary keeps every segment the replica has not confirmed, also
            # across a crash recovery that would otherwise recycle the one it is reading.
            slot = ["-C", "-S", f"replica_{port}"]
            self.tool("pg_basebackup", "-D", str(standby.data), "-R", *slot, "-X", "stream", "-c", "fast", "--no-sync")
            standby.resume()
        except (PostgresUnavailable, OSError, subprocess.SubprocessError) as exc:
            standby.stop()
            raise PostgresUnavailable(f"the replica did not start: {exc}") from exc
        return standby

    def flush(self, *replicas: PostgresCluster) -> None:
        """Everything written so far, everywhere it goes: a CHECKPOINT (the data files), `pg_switch_wal()` and
        the wait until the archive holds the segment it closed, every replica caught up to it and its own
        CHECKPOINT (a restartpoint: its data files too).

        Raises:
            PostgresUnavailable: the archive or a replica did not catch up in time.
        """
        cluster = self.cluster
        cluster.execute("CHECKPOINT")
        ((segment, lsn),) = cluster.execute("SELECT pg_walfile_name(pg_current_wal_lsn()), pg_switch_wal()::text")
        cluster.execute("CHECKPOINT")
        _wait(lambda: not cluster.archive or (cluster.archive_dir / str(segment)).exists(), "the WAL archive")
        caught_up = f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn"
        for replica in replicas:
            _wait(lambda replica=replica: replica.execute(caught_up)[0][0] is True, "the replica")
            replica.execute("CHECKPOINT")


def holding(places: Mapping[str, Path], needles: Mapping[str, bytes]) -> set[tuple[str, str]]:
    """Which needles are in which places: (place, needle) for every needle found in the bytes of any file
    under a place's path (or the file itself), whatever the file (heap, WAL, tar, dump, log)."""
    found = set()
    for place, root in places.items():
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
        for path in files:
            try:
                data = path.read_bytes()
            except FileNotFoundError:  # a WAL segment recycled or a temporary file gone while we walk
                continue
            found |= {(place, name) for name, needle in needles.items() if needle in data}
    return found


def _wait(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + START_SECONDS
    while not done():
        if time.monotonic() > deadline:
            raise PostgresUnavailable(f"{what} did not catch up")
        time.sleep(0.05)


def _server_user() -> pwd.struct_passwd | None:
    """As root, the user the server runs as (`postgres`, else `nobody`); otherwise None: as ourselves."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise PostgresUnavailable("running as root, and there is no postgres or nobody user to run the server as")


def _as(owner: pwd.struct_passwd | None) -> dict[str, object]:
    """Popen's own privilege drop (preexec_fn is unsafe with threads), with the server user's home and no groups of ours."""
    if owner is None:
        return {}
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": owner.pw_dir, "LC_ALL": "C"}
    return {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": [], "env": env, "cwd": "/"}


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"
