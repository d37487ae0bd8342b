"""The global detector's commit order: numbering log-writing transactions.

:func:`take_commit_seq` numbers the current transaction (``event_batches.commit_seq``)
for :mod:`sentinel.global_detector.order`'s readers; :func:`notify_channel`
names the PostgreSQL channel a commit announces itself on, and
:data:`ADVISORY_SEED` the advisory lock a sleeping reader holds. Used by
:class:`~sentinel.log.writer.LogWriter` (``commit_order=True``).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from sentinel.log.inserts import BATCH_COLUMNS
from sentinel.log.tables import LogTables, sequenced_mariadb

__all__ = [
    "ADVISORY_SEED",
    "mariadb_names",
    "notify_channel",
    "numbered_insert",
    "take_commit_seq",
]


def take_commit_seq(conn: Connection, tables: LogTables) -> int:
    """Number the current transaction for the global detector's commit
    order and return the number (``docs/global.md``, "The ordering
    guarantee"). Take it in the transaction's last statements before its
    commit (the ORM layer does): a transaction that committed before the
    number was taken has a smaller one.

    PostgreSQL: ``nextval`` of the sequence, without a lock, in one
    statement that first gives the transaction its id
    (``pg_current_xact_id()``); and, when a reader sleeps waiting for the
    next commit (it holds the log's advisory lock, see
    :data:`ADVISORY_SEED`), a ``NOTIFY`` on :func:`notify_channel`
    delivered at the commit (PostgreSQL serializes the commits of
    notifying transactions). Concurrent writers do not wait for each
    other, so numbers need not follow commit order and a number can be
    visible while a smaller one is not yet (or never: its transaction
    rolled back); the reader waits for such a hole until the
    transactions that were running when it saw it have ended
    (:meth:`sentinel.global_detector.order.CommitReader.horizon`), which
    the transaction id taken before the number makes sufficient.
    MariaDB (10.3 and later): ``NEXTVAL`` of the sequence, in one statement
    that first takes the counter row's lock *shared* (held to the end of the
    transaction; concurrent writers share it). As on PostgreSQL, numbers
    need not follow commit order and can be missing; a reader that finds
    one missing takes that lock exclusively, which it gets once every
    transaction that took a number before it asked has ended
    (:meth:`sentinel.global_detector.order.CommitReader.horizon`).
    SQLite and MySQL: an ``UPDATE`` of the counter row, held until the
    commit, so numbers follow commit order and there are no holes;
    concurrent log-writing transactions wait for each other from here to
    their commit (on SQLite writers are serialized anyway)."""
    t = tables
    name = conn.dialect.name
    if name == "postgresql":
        q = t.commit_sequence_name
        seq = f'"{t.schema}"."{q}"' if t.schema else f'"{q}"'
        # one statement: nextval is evaluated for the row the innermost
        # subquery yields (the filter needs its value), after the
        # transaction got its id; so a reader that finds the number not
        # visible finds the transaction holding it in progress, or ended.
        # Then (the outer filter needs the number) whether a reader sleeps
        # waiting for a NOTIFY: one holds the log's advisory lock, shared,
        # while it sleeps (PostgresListener); a writer that cannot take it
        # exclusively notifies
        # (text() with bind parameters: every PostgreSQL driver's paramstyle)
        n, wake = conn.execute(
            _PG_COMMIT_SEQ, {"q": seq, "k": ADVISORY_SEED, "s": t.schema, "p": t.prefix}
        ).one()
        if wake:
            # delivered at the commit; PostgreSQL serializes the commits of
            # notifying transactions, so only while a reader sleeps
            conn.execute(_PG_NOTIFY, {"c": notify_channel(t)})
        return int(n)
    c = t.commit_counter
    if sequenced_mariadb(conn.dialect):
        # the lock first (a row lock is taken as the row is read), then the
        # number: a reader that got the lock exclusively after seeing a number
        # knows that every transaction holding a smaller one has ended
        n = conn.execute(_mariadb_commit_seq(t)).scalar()
        if n is not None:
            return int(n)
    elif name in ("mysql", "mariadb"):
        # LAST_INSERT_ID(expr) hands the new value back as the result's lastrowid
        res = conn.execute(
            sa.update(c).where(c.c.id == 1).values(n=sa.func.last_insert_id(c.c.n + 1))
        )
        if res.rowcount == 1:
            return int(res.lastrowid)
    else:
        row = conn.execute(
            sa.update(c).where(c.c.id == 1).values(n=c.c.n + 1).returning(c.c.n)
        ).one_or_none()
        if row is not None:
            return int(row[0])
    # no counter row (deleted by hand)
    if sequenced_mariadb(conn.dialect):
        conn.execute(sa.insert(c).prefix_with("IGNORE").values(id=1, n=0))
        return take_commit_seq(conn, tables)
    # made again after the largest number in the log, not from 1: numbers
    # handed out again would be behind every reader's position
    b = t.batches
    n = int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(b.c.commit_seq), 0))).scalar_one())
    conn.execute(sa.insert(c).values(id=1, n=n + 1))
    return n + 1


def numbered_insert(
    dialect: sa.Dialect, sql: str, names: tuple[str, ...] | None, tables: LogTables
) -> str | None:
    """The ``event_batches`` insert ``sql`` (its columns in the order of
    :data:`~sentinel.log.inserts.BATCH_COLUMNS`, bind names ``names`` or
    positional) rewritten to take the row's ``commit_seq`` itself, as
    :func:`take_commit_seq` takes it, or ``None`` where it cannot be.
    PostgreSQL through a driver with named parameters (``pyformat``: psycopg,
    psycopg2): the transaction's id first, then ``nextval``, returning the
    number and whether a reader sleeps (then the caller notifies). MariaDB:
    an ``INSERT ... SELECT`` from the counter row, read with its lock shared,
    taking ``NEXTVAL`` for the row (no row is inserted if the counter row is
    missing); the caller sends the row without its ``commit_seq``."""
    if dialect.name == "postgresql" and names is not None and dialect.paramstyle == "pyformat":
        mark = f"%({names[8]})s"  # commit_seq's
        base = sql.split(" RETURNING ")[0]
        if base.count(mark) == 1:
            return base.replace(mark, _PG_INLINE_SEQ) + _PG_INLINE_RETURNING
    elif sequenced_mariadb(dialect):
        head, sep, values = sql.partition(" VALUES (")
        marks = values.removesuffix(")").split(", ")
        if sep and len(marks) == len(BATCH_COLUMNS):
            quoted = mariadb_names(tables)
            marks[8] = f"NEXTVAL({quoted['seq']})"
            # the select list is evaluated once the row is read, and so locked
            return (
                f"{head} SELECT {', '.join(marks)} FROM {quoted['counter']} "
                "WHERE id = 1 LOCK IN SHARE MODE"
            )
    return None


def mariadb_names(tables: LogTables) -> dict[str, str]:
    """The commit sequence's, the counter table's and the batches table's
    names as MariaDB SQL (``seq``, ``counter``, ``batches``)."""
    t = tables

    def quoted(name: str) -> str:
        return f"`{t.schema}`.`{name}`" if t.schema else f"`{name}`"

    return {
        "seq": quoted(t.commit_sequence_name),
        "counter": quoted(t.commit_counter.name),
        "batches": quoted(t.batches.name),
    }


@lru_cache(maxsize=32)
def _mariadb_commit_seq(tables: LogTables) -> sa.TextClause:
    """MariaDB: the counter row's lock, shared, then the commit number (the
    select list is evaluated once the row is read, and so locked)."""
    return sa.text(
        "SELECT NEXTVAL({seq}) FROM {counter} WHERE id = 1 LOCK IN SHARE MODE".format(
            **mariadb_names(tables)
        )
    )


def notify_channel(tables: LogTables) -> str:
    """The PostgreSQL ``NOTIFY`` channel on which a commit that wrote log rows
    to ``tables`` announces its commit sequence number."""
    raw = f"{tables.schema or ''}.{tables.prefix}events"
    return "sentinel_" + hashlib.sha1(raw.encode()).hexdigest()[:16]


_PG_COMMIT_SEQ = sa.text(
    "SELECT b.n, CASE WHEN pg_try_advisory_lock(b.k) THEN NOT pg_advisory_unlock(b.k) "
    "ELSE true END "
    "FROM (SELECT nextval(CAST(:q AS regclass)) AS n, "
    "hashtextextended(coalesce(CAST(:s AS text), current_schema()) || '.' || "
    "CAST(:p AS text), :k) AS k "
    "FROM (SELECT pg_current_xact_id() AS x OFFSET 0) AS a WHERE a.x IS NOT NULL "
    "OFFSET 0) AS b WHERE b.n IS NOT NULL"
)
_PG_NOTIFY = sa.text("SELECT pg_notify(:c, '')")
#: :data:`_PG_COMMIT_SEQ` inside the batches' insert (``pyformat`` parameters).
_PG_INLINE_SEQ = (
    "(SELECT nextval(CAST(%(sentinel_seq)s AS regclass)) "
    "FROM (SELECT pg_current_xact_id() AS x OFFSET 0) AS a WHERE a.x IS NOT NULL)"
)
_PG_INLINE_LOCK = (
    "hashtextextended(coalesce(CAST(%(sentinel_schema)s AS text), current_schema()) "
    "|| '.' || CAST(%(sentinel_prefix)s AS text), %(sentinel_seed)s)"
)
_PG_INLINE_RETURNING = (
    f" RETURNING commit_seq, CASE WHEN pg_try_advisory_lock({_PG_INLINE_LOCK}) "
    f"THEN NOT pg_advisory_unlock({_PG_INLINE_LOCK}) ELSE true END"
)

#: The seed of the hash naming a log's advisory lock on PostgreSQL
#: (``hashtextextended(schema || '.' || prefix, ADVISORY_SEED)``), which a
#: reader waiting for a ``NOTIFY`` of the next commit holds, shared: a writer
#: that cannot take it notifies (:func:`take_commit_seq`).
ADVISORY_SEED = 0x5E17
