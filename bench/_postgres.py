"""A PostgreSQL server for the benchmarks: the tests' scratch cluster (tests/helpers/postgres.py),
but durable as a real one is (fsync, synchronous commits, full page writes), so a commit costs
what it costs an operator's server on this disk."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tests.helpers.postgres import PostgresCluster, PostgresUnavailable

DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on", "shared_buffers": "128MB"}


@contextlib.contextmanager
def durable_cluster() -> Iterator[PostgresCluster | str]:
    """A started cluster, or the one line saying why none could start (the benchmark then skips PostgreSQL)."""
    cluster = PostgresCluster(settings=DURABLE)
    try:
        cluster.start()
    except PostgresUnavailable as exc:
        yield f"PostgreSQL did not start: {exc}"
        return
    try:
        yield cluster
    finally:
        cluster.stop()


def rows(url: str, table: str) -> int | None:
    """How many rows `table` holds in the database at `url`; None when it has no such table."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
        if not found or not found[0]:
            return None
        counted = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()
        return int(counted[0]) if counted else 0
