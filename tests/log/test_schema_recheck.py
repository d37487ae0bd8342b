"""A migration run under a live process is caught on every backend alike
(issue 11 item 9): the writer checks the schema revision again at the first
write after ``recheck`` seconds."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from sentinel import Occurrence
from sentinel.errors import LogSchemaOutdatedError
from sentinel.log import LogWriter, migrate
from sentinel.log.tables import log_tables


def _set_revision(engine: sa.Engine, revision: str) -> None:
    version = sa.table(log_tables().version_table, sa.column("version_num"))
    with engine.begin() as conn:
        conn.execute(sa.update(version).values(version_num=revision))


def _write(writer: LogWriter, engine: sa.Engine, t: int) -> None:
    with engine.begin() as conn:
        writer.write(conn, [Occurrence("E", t, 0.0, scope="s")])


def test_a_revision_changed_under_a_live_writer_fails_its_next_check(engine: sa.Engine) -> None:
    migrate.upgrade(engine)
    writer = LogWriter(recheck=0.0)
    _write(writer, engine, 1)
    _set_revision(engine, "0002")
    with pytest.raises(LogSchemaOutdatedError) as info:
        _write(writer, engine, 2)
    assert info.value.found == "0002"
    _set_revision(engine, migrate.head())
    _write(writer, engine, 3)


def test_between_checks_the_remembered_revision_holds(engine: sa.Engine) -> None:
    migrate.upgrade(engine)
    writer = LogWriter(recheck=3600.0)
    _write(writer, engine, 1)
    _set_revision(engine, "0002")
    _write(writer, engine, 2)  # within the period: not looked at again
    writer.recheck = 0.0
    writer.forget()
    with pytest.raises(LogSchemaOutdatedError):
        _write(writer, engine, 3)
