"""Values the writer refuses before any SQL is sent, each named in the error."""

from __future__ import annotations

import math
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.errors import LogWriteError
from sentinel.log import LogReader, LogWriter
from sentinel.occurrence import Occurrence

T = 1_700_000_000.5


def occ(**kw: Any) -> Occurrence:
    fields: dict[str, Any] = {
        "event": "E",
        "t": 3,
        "ts": T,
        "dts": T,
        "source": None,
        "params": (),
        "scope": "tx",
        "names": (),
    }
    fields.update(kw)
    return tuple.__new__(Occurrence, tuple(fields.values()))  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (occ(t="3"), r"E@'3' in scope 'tx': its t_occ is not an integer"),
        (occ(ts=math.nan), r"E@3: its occurrence time nan .*outside the years 1 to 9999"),
        (occ(dts=1e300), r"E@3: its detection time 1e\+300 .*outside the years 1 to 9999"),
        (occ(ts="noon"), r"E@3: its occurrence time 'noon'"),
    ],
    ids=["t_occ text", "nan time", "far detection time", "time text"],
)
def test_a_value_the_log_cannot_hold_is_named_and_nothing_is_written(
    migrated: sa.Engine, bad: Occurrence, says: str
) -> None:
    good = occ(t=1)
    with pytest.raises(LogWriteError, match=says), migrated.begin() as conn:
        LogWriter().write(conn, [good, bad])
    assert list(LogReader(migrated).occurrences()) == []


def test_an_event_name_that_is_not_a_string_is_refused(migrated: sa.Engine) -> None:
    writer = LogWriter()
    rows = writer.event_values([occ()], "committed")
    rows = [(r[0], r[1], None, *r[3:]) for r in rows]  # as no caller builds it
    writer.event_values = lambda *a, **k: rows  # type: ignore[method-assign]
    refused = pytest.raises(LogWriteError, match="its event name is not a string")
    with refused, migrated.begin() as conn:
        writer.write(conn, [occ()])
