"""One oversized value costs only itself (issue 28 item 9).

Per backend: every parameter type has a cap (``bytes``, integers and decimals
besides strings), refused at the signal like a string over ``MAX_STRING``; an
occurrence whose values together are over ``MAX_PARAMS`` is logged with its
largest values replaced by ``TOO_LARGE``, and the events signalled with it are
written (on MariaDB such a value, over the 16 MiB packet, dropped all six
events of its group); a row the database refuses on its own is written with
its values marked, and the rows around it are written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sentinel import LocalEventDetector
from sentinel.errors import UnloggableParameter
from sentinel.log import TOO_LARGE, LogReader, migrate
from sentinel.orm import Attachment, attach
from sentinel.params import MAX_BYTES, MAX_DECIMAL_DIGITS, MAX_INT_BITS, MAX_PARAMS, MAX_STRING

from .conftest import sqlite_savepoints


class World:
    def __init__(self, engine: sa.Engine, backend: str) -> None:
        self.engine = engine
        self.det = det = LocalEventDetector()
        det.explicit("note")
        if backend == "sqlite":
            sqlite_savepoints(engine, {"sql": "BEGIN IMMEDIATE"})
        migrate.upgrade(engine)
        self.Session = sessionmaker(engine)
        self.att: Attachment = attach(self.Session, detector=det, workers=0)
        assert self.att.sink is not None
        self.sink = self.att.sink
        self.sink.late_delay = float("inf")  # late rows wait for flush_log()

    def notes(self) -> list[tuple[dict[str, Any], str | None]]:
        self.att.flush_log()
        with LogReader(self.engine) as r:
            return [
                (dict(o.params), outcome)
                for o, outcome, _ in r.occurrences(order="t_occ")
                if o.event == "note"
            ]


@pytest.fixture
def world(engine: sa.Engine, backend: str) -> Iterator[World]:
    w = World(engine, backend)
    try:
        yield w
    finally:
        w.att.detach()


#: One value over each type's cap, and the largest value under it.
OVER: list[tuple[str, Any, Any]] = [
    ("bytes", b"\xff" * (MAX_BYTES + 1), b"\xff" * MAX_BYTES),
    ("int", 1 << MAX_INT_BITS, (1 << MAX_INT_BITS) - 1),
    ("negative int", -(1 << MAX_INT_BITS), -(1 << MAX_INT_BITS) + 1),
    (
        "decimal",
        Decimal((0, (7,) * (MAX_DECIMAL_DIGITS + 1), 0)),
        Decimal((0, (7,) * MAX_DECIMAL_DIGITS, 0)),
    ),
]


@pytest.mark.parametrize("where", ["process scope", "transaction"])
@pytest.mark.parametrize(("label", "over", "under"), OVER, ids=[o[0] for o in OVER])
def test_every_type_has_a_cap(world: World, where: str, label: str, over: Any, under: Any) -> None:
    """A value over its type's cap is refused at the signal, naming the event
    and the parameter (as a string over MAX_STRING is); the largest under it
    is logged exactly; the events around it are logged."""
    with world.Session() as s:
        if where == "transaction":
            s.begin()
        world.det.signal("note", n=1)
        with pytest.raises(UnloggableParameter) as info:
            world.det.signal("note", value=over)
        assert info.value.event == "note" and info.value.param == "value"
        world.det.signal("note", value=under)
        world.det.signal("note", n=2)
        s.commit()
    notes = world.notes()
    assert [p for p, _ in notes] == [{"n": 1}, {"value": under}, {"n": 2}]


def test_a_cap_is_the_logs_only(world: World) -> None:
    """As for strings: a value the log leaves out may be over its cap."""
    world.att.detach()
    from sentinel.log import LogPolicy

    att = attach(
        world.Session,
        detector=world.det,
        workers=0,
        log=LogPolicy({"note": {"exclude": ["blob"]}}),
    )
    try:
        world.det.signal("note", blob=b"\x00" * (MAX_BYTES + 1), n=1)
        att.flush_log()
    finally:
        att.detach()
    with LogReader(world.engine) as r:
        assert [dict(o.params) for o, _, _ in r.occurrences() if o.event == "note"] == [{"n": 1}]


@pytest.mark.parametrize("where", ["process scope", "transaction"])
def test_values_too_large_together_cost_only_themselves(
    world: World, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Five ordinary events and one whose value (each of its strings within
    MAX_STRING) is over MAX_PARAMS as a whole: the six are logged, the large
    value replaced by the marker, the small one beside it kept."""
    big = ("x" * MAX_STRING,) * (MAX_PARAMS // MAX_STRING + 2)
    seen: list[Any] = []
    world.det.rule("seen", "note", action=lambda occ: seen.append(occ.params.get("big")))
    with caplog.at_level(logging.WARNING, "sentinel.log"), world.Session() as s:
        if where == "transaction":
            s.begin()
        for i in range(3):
            world.det.signal("note", n=i)
        world.det.signal("note", big=big, small="kept")
        for i in range(3, 5):
            world.det.signal("note", n=i)
        s.commit()
    assert seen[3] == big  # rules saw the value: only the log's copy is marked
    notes = world.notes()
    outcome = None if where == "process scope" else "committed"
    assert notes == [
        ({"n": 0}, outcome),
        ({"n": 1}, outcome),
        ({"n": 2}, outcome),
        ({"big": TOO_LARGE, "small": "kept"}, outcome),
        ({"n": 3}, outcome),
        ({"n": 4}, outcome),
    ]
    assert any("'big'" in r.getMessage() and "note" in r.getMessage() for r in caplog.records)
    assert not world.sink.late


def test_a_late_row_the_database_refuses_costs_only_itself(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A process-scope row the database refuses whatever sentinel encodes (a
    NULL event name the writer would never build, made here for the row whose
    value is "poison") among five ordinary ones: the five are written, and the
    refused one is written with its values marked, not dropped with them."""
    writer = world.sink.writer
    real = writer.event_values

    def refuse_poison(occurrences: Any, outcome: Any, *rest: Any) -> Any:
        return [
            (*r[:2], None, *r[3:]) if "poison" in str(r[7]) else r
            for r in real(occurrences, outcome, *rest)
        ]

    monkeypatch.setattr(writer, "event_values", refuse_poison)
    for i in range(3):
        world.det.signal("note", n=i)
    world.det.signal("note", value="poison", n=99)
    for i in range(3, 5):
        world.det.signal("note", n=i)
    with caplog.at_level(logging.ERROR, "sentinel.orm"):
        notes = world.notes()  # flush_log() raises nothing: nothing was dropped
    assert [p for p, _ in notes] == [
        {"n": 0},
        {"n": 1},
        {"n": 2},
        {"value": TOO_LARGE, "n": TOO_LARGE},
        {"n": 3},
        {"n": 4},
    ]
    assert any("refused by the database" in r.getMessage() for r in caplog.records)
    assert not world.sink.late
