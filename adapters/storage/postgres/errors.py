"""PostgreSQL's failures as one line each (`StoreError`), with the URL's password masked in every line.

Translated once, here: a URL that is not PostgreSQL's, the `postgres` extra missing, a server that cannot be
reached, a refused password (28P01), a database that does not exist (3D000), a user who may not create the
tables (42501 in a migration), a server too old, and the guard's own refusals (CP001, CP002).
"""

from __future__ import annotations

import getpass
import re
from dataclasses import dataclass
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit

from core.values.errors import ClaimLost, IntervalEnded, MigrationError, PrivateWriteRefused, StoreError

SETTING = "COMPANION_DATABASE_URL"
SCHEMES = ("postgresql", "postgres")
OLDEST_SERVER = 130000  # server_version_num: 13, for FILTER, GENERATED columns and what the schema uses
# The guard's refusals, raised by the schema's companion_raise() (its ERRCODE), as the SQLite engine's.
PRIVATE_WRITE = "CP001"
INTERVAL_ENDED = "CP002"
CLAIM_LOST = "CP003"  # the fence of a shared database (migrations/postgres/0018)
_MASK = "***"


@dataclass(frozen=True, slots=True)
class PostgresUrl:
    """What a COMPANION_DATABASE_URL names, for messages: never its password."""

    url: str
    user: str
    host: str  # a host name, or the socket folder
    port: int
    database: str
    password: str | None

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}" if not self.host.startswith("/") else f"{self.host} (socket)"

    @property
    def masked(self) -> str:
        return mask(self.url)


def parse_url(url: str) -> PostgresUrl:
    """Check the URL's shape (with urllib alone: the driver is not needed to say a URL is wrong).

    Raises:
        StoreError: not a postgresql:// URL, in one line naming the setting (the password masked).
    """
    try:
        parts = urlsplit(url.strip())
        port = parts.port or _query_int(parts, "port") or 5432
    except ValueError:
        raise StoreError(
            f"{SETTING}: not a PostgreSQL URL, its port or address is wrong (the value is not shown)"
        ) from None
    if parts.scheme not in SCHEMES or not url.strip().startswith(f"{parts.scheme}://"):
        # Not shown: a value that is not a URL cannot be told where its password is.
        raise StoreError(
            f"{SETTING}: not a PostgreSQL URL (the value is not shown); "
            "it looks like postgresql://user:password@host:5432/database"
        )
    query = parse_qs(parts.query)
    host = parts.hostname or (query.get("host") or ["localhost"])[0]
    user = unquote(parts.username) if parts.username else (query.get("user") or [getpass.getuser()])[0]
    database = unquote(parts.path.lstrip("/")) or (query.get("dbname") or [user])[0]
    password = unquote(parts.password) if parts.password is not None else None
    return PostgresUrl(url=url.strip(), user=user, host=host, port=port, database=database, password=password)


def _query_int(parts: SplitResult, name: str) -> int | None:
    values = parse_qs(parts.query).get(name)
    return int(values[0]) if values else None


def mask(url: str) -> str:
    """The URL with its password (in the authority or a `password=` parameter) replaced by ***."""
    masked = re.sub(r"^([a-z]+://[^:/@?#]*:)[^@/?#]*@", rf"\g<1>{_MASK}@", url.strip())
    return re.sub(r"([?&]password=)[^&#]*", rf"\g<1>{_MASK}", masked)


def scrub(text: str, target: PostgresUrl) -> str:
    """`text` (a driver's message) on one line, without the password wherever it appears."""
    line = " ".join(text.split())
    if target.password:
        line = line.replace(target.password, _MASK)
    return line.replace(target.url, target.masked)


def extra_missing() -> StoreError:
    return StoreError(
        f"{SETTING} is set, but the PostgreSQL driver is not installed: pip install 'companion[postgres]' "
        "(or -e '.[postgres]' in a checkout)"
    )


def too_old(version_num: int, target: PostgresUrl, oldest: int = OLDEST_SERVER) -> StoreError:
    return StoreError(
        f"PostgreSQL at {target.where} is version {version_num // 10000}; companion needs {oldest // 10000} or newer"
    )


def translate(exc: BaseException, target: PostgresUrl, *, migrating: str | None = None) -> StoreError:
    """One line for a psycopg error (the caller raises it `from exc`). `migrating`: the migration running."""
    code = getattr(exc, "sqlstate", None) or _code_in_words(str(exc))
    message = scrub(_first_line(exc), target)
    if code == PRIVATE_WRITE:
        return PrivateWriteRefused(_raised(exc) or "lasting row")
    if code == INTERVAL_ENDED:
        return IntervalEnded(_raised(exc) or "the interval ended")
    if code == CLAIM_LOST:
        return ClaimLost("the conversation is claimed by another process")
    if code == "28P01":
        return StoreError(f"PostgreSQL at {target.where} refused the password for user {target.user} ({SETTING})")
    if code == "28000":
        return StoreError(f"PostgreSQL at {target.where} does not let user {target.user} in: {message} ({SETTING})")
    if code == "3D000":
        return StoreError(
            f"database {target.database} does not exist on {target.where} "
            f"(createdb {target.database}, or name another in {SETTING})"
        )
    if code == "42501" and migrating is not None:
        return MigrationError(
            f"user {target.user} may not create tables in schema public of {target.database}: "
            f"GRANT CREATE ON SCHEMA public TO {target.user}"
        )
    if code is None and _is_unreachable(str(exc)):
        return StoreError(f"cannot reach PostgreSQL at {target.where} ({SETTING}): {_why_unreachable(str(exc))}")
    if migrating is not None:
        return MigrationError(f"migration {migrating} failed and was rolled back: {message}")
    return StoreError(f"PostgreSQL failed: {message}")


# Errors of the connection phase carry no SQLSTATE in every libpq; their words are the server's own.
_IN_WORDS = (
    (re.compile(r"password authentication failed"), "28P01"),
    (re.compile(r'database "[^"]*" does not exist'), "3D000"),
    (re.compile(r"no pg_hba\.conf entry"), "28000"),
    (re.compile(r'role "[^"]*" does not exist'), "28000"),
)


def _code_in_words(text: str) -> str | None:
    return next((code for pattern, code in _IN_WORDS if pattern.search(text)), None)


def _is_unreachable(text: str) -> bool:
    words = (
        "connection refused",
        "could not connect",
        "no such file or directory",
        "timeout expired",
        "could not translate host name",
        "name or service not known",
        "network is unreachable",
    )
    lowered = text.lower()
    return "connection failed" in lowered or any(w in lowered for w in words)


def _why_unreachable(text: str) -> str:
    lowered = text.lower()
    for words, why in (
        ("could not translate host name", "unknown host"),
        ("name or service not known", "unknown host"),
        ("connection refused", "connection refused"),
        ("no such file or directory", "no server on that socket"),
        ("timeout expired", "no answer within the timeout"),
        ("network is unreachable", "network is unreachable"),
    ):
        if words in lowered:
            return why
    return "no connection"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _raised(exc: BaseException) -> str | None:
    """What `companion_raise(kind, what)` said: its `what`, the error's message (as SQLite's engine reads it)."""
    diag = getattr(exc, "diag", None)
    return getattr(diag, "message_primary", None) if diag is not None else None
