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
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import quote

BIN_ENV = "COMPANION_TEST_PG_BIN"
# In CI (`.ci/run`) a cluster that does not start is an error; elsewhere its tests skip, saying how.
REQUIRE_ENV = "COMPANION_TEST_REQUIRE_POSTGRES"
HOW_TO_GET_IT = "apt-get install postgresql-15 (`.ci/run` does)"
SUPERUSER = "companion"
START_SECONDS = 60.0  # initdb and the first start on a busy 2-core machine
STOP_SECONDS = 20.0

# Fast and disposable: nothing a test writes has to survive a power loss.
FAST = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "16MB",
    "max_connections": "40",
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
    ) -> None:
        self.settings = {**FAST, **(settings or {})}
        self.password = password
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
        bindir = self._bindir or find_bindir()
        # Not pytest's tmp_path: root's 0700 tree is closed to the server's user.
        folder = Path(tempfile.mkdtemp(prefix="companion-pg-"))
        self.folder = folder
        atexit.register(self._kill)
        try:
            owner = _server_user()
            if owner is not None:
                os.chown(folder, owner.pw_uid, owner.pw_gid)
            init = [str(bindir / "initdb"), "-D", str(self.data), "-U", SUPERUSER, "-E", "UTF8", "--locale=C"]
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
            command = [str(bindir / "postgres"), "-D", str(self.data), "-k", str(folder), "-c", "listen_addresses="]
            for name, value in self.settings.items():
                command += ["-c", f"{name}={value}"]
            with open(self.log_path, "wb") as log:
                self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, **_as(owner))
            self._wait_ready(bindir)
        except PostgresUnavailable:
            self.stop()
            raise
        except (OSError, subprocess.SubprocessError) as exc:
            self.stop()
            raise PostgresUnavailable(f"{type(exc).__name__}: {exc}") from exc
        return self

    def _wait_ready(self, bindir: Path) -> None:
        deadline = time.monotonic() + START_SECONDS
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise PostgresUnavailable(f"postgres exited: {_last_line(self.server_log())}")
            ready = subprocess.run(
                [str(bindir / "pg_isready"), "-q", "-h", str(self.socket_dir), "-U", SUPERUSER, "-d", "postgres"],
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
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_SECONDS)
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
        return f"postgresql://{quote(user, safe='')}{secret}@/{quote(database, safe='')}?host={quote(str(self.socket_dir), safe='')}"

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
