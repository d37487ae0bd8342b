"""Long values through the view ``sentinel_occurrences`` and a downgrade to
0005: a source key longer than 64 KB (MariaDB's ``TEXT``) comes back whole, from
the view, from the 0005 table a downgrade makes, and through a view made before
MariaDB's ``source_key`` was ``LONGTEXT``; on every backend."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.log import LogReader, LogWriter, migrate
from sentinel.log.records import encode_key
from sentinel.log.tables import log_tables
from sentinel.log.views import create_view_sql, drop_view_sql
from sentinel.occurrence import ObjectRef
from sentinel.params import MAX_STRING

from .conftest import occ

#: Source keys past 65,535 characters: ASCII, escaped (``\\u00e9`` is six
#: characters of the key's JSON), and the longest string the writer takes.
_KEYS: dict[str, tuple[Any, ...]] = {
    "ascii": ("x" * 70_000,),
    "escaped": ("é" * 12_000, 7),
    "longest": ("y" * MAX_STRING,),
}


def _write(engine: sa.Engine) -> dict[str, str]:
    """One occurrence per key of ``_KEYS``; its scope -> the key's text."""
    with engine.begin() as conn:
        LogWriter().write(
            conn,
            [
                occ("E", t, scope, source=ObjectRef("Doc", key), p="z" * 70_000)
                for t, (scope, key) in enumerate(_KEYS.items(), 1)
            ],
        )
    return {scope: encode_key(key) for scope, key in _KEYS.items()}


def _keys(engine: sa.Engine, table: str) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f"SELECT scope, source_key FROM {table}"))
        return {scope: key for scope, key in rows}


def test_the_view_gives_source_keys_longer_than_64_kb_whole(engine: sa.Engine) -> None:
    migrate.upgrade(engine)
    expected = _write(engine)
    assert min(len(k) for k in expected.values()) > 65_535
    assert _keys(engine, "sentinel_occurrences") == expected
    with engine.connect() as conn:
        params = conn.execute(sa.text("SELECT params FROM sentinel_occurrences")).scalars()
        assert all("z" * 70_000 in str(p) for p in params)
    with LogReader(engine) as reader:
        assert {r.occurrence.scope: r.occurrence.source for r in reader.occurrences()} == {
            scope: ObjectRef("Doc", key) for scope, key in _KEYS.items()
        }


def test_a_downgrade_to_0005_keeps_source_keys_longer_than_64_kb(engine: sa.Engine) -> None:
    migrate.upgrade(engine)
    expected = _write(engine)
    migrate.downgrade(engine, "0005")
    assert _keys(engine, "sentinel_events") == expected
    migrate.upgrade(engine)
    assert _keys(engine, "sentinel_occurrences") == expected


@pytest.mark.parametrize("backend", ["mysql"])
def test_a_downgrade_through_a_view_made_before_longtext_keeps_the_keys(
    backend: str, engine: sa.Engine
) -> None:
    """A log migrated to 0006 by an earlier sentinel has the view that cut
    ``source_key`` to 65,535 characters: the downgrade makes it again first."""
    migrate.upgrade(engine)
    expected = _write(engine)
    tables = log_tables()
    old = create_view_sql("mariadb", tables).replace("source_key LONGTEXT", "source_key TEXT")
    with engine.begin() as conn:
        conn.exec_driver_sql(drop_view_sql("mariadb", tables))
        conn.exec_driver_sql(old)
    assert {len(k) for k in _keys(engine, "sentinel_occurrences").values()} == {65_535}
    migrate.downgrade(engine, "0005")
    assert _keys(engine, "sentinel_events") == expected
