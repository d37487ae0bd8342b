"""MariaDB numbers commits with a sequence: log-writing commits stop waiting
for each other.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29

On MariaDB (10.3 and later) a transaction that writes log rows with
``commit_order`` took its commit number by incrementing the counter row
(``<prefix>commit_counter``), whose lock it held to the end of its commit:
such commits were serialized. From this revision it takes ``NEXTVAL`` of the
sequence ``<prefix>commit_seq`` (as PostgreSQL does) while holding the counter
row's lock *shared*, which concurrent writers share; a reader that finds a
number missing takes that lock exclusively to know that every transaction that
could hold the number has ended (``docs/global.md``, "The ordering
guarantee").

Data: the sequence starts after the last number the counter handed out (and
after the log's largest, should the counter row have been deleted), so
numbers keep increasing across the upgrade; the counter row stays (its lock is
the writers' shared gate), and its ``n`` is no longer advanced. A downgrade
moves the counter to the last number the sequence handed out and drops the
sequence: numbers keep increasing across it too. SQLite, PostgreSQL and MySQL
(which has no sequences): nothing changes.

Offline (``--sql``), the sequence's start is read from the counter row by the
script itself (a user variable and ``EXECUTE IMMEDIATE``: ``CREATE SEQUENCE``
takes only constants), and the statements are MariaDB executable comments
(``/*M!100300 ... */``): a script made from a ``mysql://`` URL cannot know
whether it will run on MariaDB, which runs them, or MySQL, which skips them.

Upgrade every process that writes the log together with the schema: code
that expects revision 0008 refuses a log at 0009, so an old writer cannot
take numbers from the counter while new ones take them from the sequence.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def _quoted(schema: str | None, name: str) -> str:
    return f"`{schema}`.`{name}`" if schema else f"`{name}`"


def _execute(sql: str, sequence: tuple[str | None, str] | None = None) -> None:
    """Run ``sql`` on MariaDB 10.3 and later only. Online the server says what
    it is; offline (``--sql``) the script cannot ask, and a ``mysql://`` URL
    may mean either server, so the statement is written as a MariaDB
    executable comment (``/*M!100300 ... */``), which MariaDB 10.3 and later
    run and MySQL and older MariaDB read as a comment. Online, with
    ``sequence`` (schema, name): only if that sequence exists (a log migrated
    while the server was a MariaDB before 10.3 has none)."""
    context = op.get_context()
    if context.as_sql:
        if context.dialect.name in ("mysql", "mariadb"):
            op.execute(f"/*M!100300 {sql} */")
        return
    bind = op.get_bind()
    dialect = bind.dialect
    if not (
        getattr(dialect, "is_mariadb", False) and getattr(dialect, "supports_sequences", False)
    ):
        return
    if sequence is None or sa.inspect(bind).has_sequence(sequence[1], schema=sequence[0]):
        op.execute(sql)


def upgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    counter = _quoted(schema, f"{prefix}commit_counter")
    batches = _quoted(schema, f"{prefix}event_batches")
    seq = _quoted(schema, f"{prefix}commit_seq")
    # after the counter's last number and the log's largest (the counter row
    # may have been deleted by hand); the counter read with its lock: a
    # writer of 0008 that took a number and has not committed is waited for
    _execute(
        "SET @sentinel_next_commit = GREATEST("
        f"(SELECT COALESCE(MAX(n), 0) FROM {counter} WHERE id = 1 FOR UPDATE), "
        f"(SELECT COALESCE(MAX(commit_seq), 0) FROM {batches})) + 1"
    )
    # without a cache: the reader reads the last number handed out from it
    _execute(
        f"EXECUTE IMMEDIATE CONCAT('CREATE SEQUENCE {seq} START WITH ', "
        f"@sentinel_next_commit, ' NOCACHE')"
    )


def downgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    counter = _quoted(schema, f"{prefix}commit_counter")
    seq = _quoted(schema, f"{prefix}commit_seq")
    name = (schema, f"{prefix}commit_seq")
    _execute(
        f"UPDATE {counter} SET n = GREATEST(n, (SELECT next_not_cached_value - 1 FROM {seq})) "
        f"WHERE id = 1",
        name,
    )
    _execute(f"DROP SEQUENCE {seq}", name)
