"""One bad value never harms another transaction (issue 11 item 3).

Per backend: a transaction with each value some backend's JSON refuses (NUL,
lone surrogates, huge ints, non-finite floats, deep nesting, ...), then 100
ordinary transactions: every one of them commits and is logged. Values the log
can keep exactly are logged and read back exactly (type and value); values no
backend can keep are refused at signal time with an error naming the event and
the parameter, and nothing of them is logged. A late row the database refuses is
dropped on its own, reported, and never blocks anyone else.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Iterator
from decimal import Decimal
from types import MappingProxyType
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from sentinel import LocalEventDetector, ObjectRef, Reactive, event
from sentinel.errors import LogWriteError, UnloggableParameter
from sentinel.log import LogReader, migrate
from sentinel.orm import Attachment, attach
from sentinel.params import MAX_DEPTH, MAX_STRING

from .conftest import sqlite_savepoints

_PARIS = ZoneInfo("Europe/Paris")
_PARIS_SUMMER = dt.datetime(2021, 10, 30, 9, 0, tzinfo=_PARIS)
_PARIS_FOLD = dt.datetime(2021, 10, 31, 2, 30, fold=1, tzinfo=_PARIS)


def _nested(depth: int, leaf: Any) -> Any:
    """``leaf`` inside ``depth`` levels of tuples (a tuple holding ``leaf`` is
    depth 1)."""
    value = leaf
    for _ in range(depth):
        value = (value,)
    return value


#: Values every backend must keep exactly (some only through a type tag), and
#: what they are once normalized (what rules see and the log must give back).
KEPT: list[tuple[str, Any, Any]] = [
    ("nul", "\x00", "\x00"),
    ("nul inside", "a\x00b", "a\x00b"),
    ("lone high surrogate", "\ud800", "\ud800"),
    ("lone low surrogate", "x\udfffy", "x\udfffy"),
    ("reversed pair", "\udc00\ud800", "\udc00\ud800"),
    ("backslash escape text", "\\u0000 \\ud800", "\\u0000 \\ud800"),
    ("astral", "\U0001f600", "\U0001f600"),
    ("2**63", 2**63, 2**63),
    ("-(2**63)-1", -(2**63) - 1, -(2**63) - 1),
    ("int of 5000 digits", 10**5000 + 7, 10**5000 + 7),
    ("nan", float("nan"), float("nan")),
    ("-nan", float("-nan"), float("-nan")),  # NaN with its sign bit set
    ("inf", float("inf"), float("inf")),
    ("-inf", float("-inf"), float("-inf")),
    ("-0.0", -0.0, -0.0),
    ("1e16", 1e16, 1e16),
    ("1e300", 1e300, 1e300),
    ("subnormal", 5e-324, 5e-324),
    ("bytes", b"\x00\xff", b"\x00\xff"),
    ("set", {3, 1, "a"}, frozenset({3, 1, "a"})),
    ("list", [1, "\x00"], (1, "\x00")),
    ("$ keys", {"$ref": "\ud800", "k": 1}, MappingProxyType({"$ref": "\ud800", "k": 1})),
    ("nul in a mapping", {"k": "\x00"}, MappingProxyType({"k": "\x00"})),
    ("reference", ObjectRef("A\x00", ("\ud800", 2**64)), ObjectRef("A\x00", ("\ud800", 2**64))),
    ("deepest nesting", _nested(MAX_DEPTH, "\x00"), _nested(MAX_DEPTH, "\x00")),
    ("longest string", "\ud800\x00é" * (MAX_STRING // 3), "\ud800\x00é" * (MAX_STRING // 3)),
    # the zone, not only the offset: wall-clock arithmetic across a DST change
    ("zoned datetime", _PARIS_SUMMER, _PARIS_SUMMER),
    ("zoned datetime, second of two 02:30", _PARIS_FOLD, _PARIS_FOLD),
]


def _self_ref() -> list[Any]:
    a: list[Any] = []
    a.append(a)
    return a


#: Values no backend can keep: refused at signal time (param is the name the
#: error must give).
REFUSED: list[tuple[str, Any, str]] = [
    ("string too long", "x" * (MAX_STRING + 1), "value"),
    ("nesting too deep", _nested(MAX_DEPTH + 1, 1), "value" + "[0]" * MAX_DEPTH),
    ("self-referencing list", _self_ref(), "value" + "[0]" * MAX_DEPTH),
    ("int key", {1: 2}, "value"),
    ("NUL key", {"a\x00": 2}, "value"),
    ("lone surrogate key", {"\ud800": 2}, "value"),
    ("object", object(), "value"),
]


def canon(value: Any) -> Any:
    """A comparable form that keeps types and the values float equality hides
    (NaN, the sign of zero) and datetime equality hides (the time zone, the wall
    time of the same instant)."""
    t = type(value)
    if t is dt.datetime and value.tzinfo is not None:
        return ("datetime", value.isoformat(), repr(value.tzinfo))
    if t is int:
        return ("int", hex(value))  # repr() refuses ints of more than 4,300 digits
    if t is float:
        return ("float", repr(value), math.copysign(1.0, value))
    if t in (tuple, list):
        return (t.__name__, tuple(canon(v) for v in value))
    if t is frozenset:
        return ("frozenset", tuple(sorted((canon(v) for v in value), key=repr)))
    if t is Decimal:
        return ("Decimal", str(value))  # NaN, sNaN and -0 by their text
    if t in (dict, MappingProxyType):
        return ("mapping", tuple(sorted((k, canon(v)) for k, v in value.items())))
    return (t.__name__, value)


class World:
    def __init__(self, engine: sa.Engine, backend: str) -> None:
        self.engine = engine
        self.det = det = LocalEventDetector()

        class Base(Reactive, DeclarativeBase, detector=det):
            pass

        class Box(Base):
            __tablename__ = "box"
            id: Mapped[int] = mapped_column(primary_key=True)
            n: Mapped[int] = mapped_column(default=0)

            @event(begin="Put")
            def put(self, value: Any) -> None:
                self.n += 1

        self.Box = Box
        if backend == "sqlite":
            sqlite_savepoints(engine, {"sql": "BEGIN IMMEDIATE"})
        Base.metadata.create_all(engine)
        migrate.upgrade(engine)
        self.Session = sessionmaker(engine)
        with self.Session.begin() as s:
            s.add(Box(id=1))
        self.att: Attachment = attach(self.Session, detector=det, workers=0)
        self.seen: list[Any] = []
        det.rule("seen", "Box.Put", action=lambda occ: self.seen.append(occ))

    def put(self, value: Any) -> None:
        with self.Session() as s:
            s.get(self.Box, 1).put(value)
            s.commit()

    def logged(self) -> list[Any]:
        self.att.flush_log()
        with LogReader(self.engine) as r:
            return list(r.occurrences())

    def put_values(self) -> list[Any]:
        return [
            (o.params["value"], outcome)
            for o, outcome, _ in self.logged()
            if o.event == "Box.put:begin"
        ]


@pytest.fixture
def world(engine: sa.Engine, backend: str) -> Iterator[World]:
    w = World(engine, backend)
    try:
        yield w
    finally:
        w.att.detach()


def _ordinary(world: World, n: int = 100) -> None:
    for i in range(n):
        world.put(i)


def test_each_kept_value_then_100_ordinary_transactions(world: World) -> None:
    for _, value, _ in KEPT:
        world.put(value)
    _ordinary(world)
    with world.Session() as s:
        assert s.get(world.Box, 1).n == len(KEPT) + 100  # every transaction committed
    logged = world.put_values()
    assert [outcome for _, outcome in logged] == ["committed"] * (len(KEPT) + 100)
    got = [canon(v) for v, _ in logged]
    want = [canon(expected) for _, _, expected in KEPT] + [canon(i) for i in range(100)]
    for (label, _, _), g, w in zip(KEPT, got, want, strict=False):
        assert g == w, label
    assert got == want
    # what rules saw live is what the log gives back
    assert [canon(o.params["value"]) for o in world.seen] == want
    assert world.att.sink is not None and not world.att.sink.late


@pytest.mark.parametrize(("label", "value", "param"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_refused_value_then_100_ordinary_transactions(
    world: World, label: str, value: Any, param: str
) -> None:
    with world.Session() as s:
        box = s.get(world.Box, 1)
        with pytest.raises(UnloggableParameter) as info:
            box.put(value)
        assert info.value.event in ("Box.put", "Box.put:begin")
        assert info.value.param == param
        assert param in str(info.value) and "Box.put" in str(info.value)
        s.commit()  # the transaction goes on without the refused call
    _ordinary(world)
    with world.Session() as s:
        assert s.get(world.Box, 1).n == 100
    assert world.put_values() == [(i, "committed") for i in range(100)]
    assert len(world.seen) == 100  # no rule saw the refused call


def test_a_refused_parameter_name_of_an_explicit_event(world: World) -> None:
    world.det.explicit("Note")
    with world.Session() as s:
        s.get(world.Box, 1).put(0)  # the session's transaction is the scope
        with pytest.raises(UnloggableParameter) as info:
            world.det.signal("Note", **{"a\x00": 1})
        assert info.value.event == "Note"
        s.commit()
    _ordinary(world, 3)
    assert not [o for o, _, _ in world.logged() if o.event == "Note"]


def test_a_late_row_the_database_refuses_blocks_nobody(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """A forged late row (a duplicate of the first occurrence of a logged
    transaction: its row would start where that transaction's row starts,
    which the database refuses) is dropped on its own and reported; every
    transaction before and after commits, and the other late rows are
    written."""
    sink = world.att.sink
    assert sink is not None
    world.put("first")
    (first,) = [o for o, _, _ in world.logged() if o.event == "txn:begin"]
    sink.late_delay = float("inf")
    sink.add_late(("occ", first, "committed"))  # already logged: refused
    world.put("second")  # its txn:commit waits with the forged row
    with caplog.at_level(logging.ERROR, "sentinel.orm"), pytest.raises(LogWriteError) as info:
        world.att.flush_log()
    assert first.scope in str(info.value)
    assert any("refused by the database and dropped" in r.getMessage() for r in caplog.records)
    assert not sink.late
    sink.late_delay = 0.0
    _ordinary(world, 3)
    events = [(o.event, o.scope) for o, _, _ in world.logged()]
    commits = [scope for event, scope in events if event == "txn:commit"]
    assert len(commits) == len(set(commits)) == 5  # first, second, three ordinary
    assert [v for v, _ in world.put_values()] == ["first", "second", 0, 1, 2]


def test_an_aborted_transaction_whose_write_fails_blocks_nobody(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The shape of the original defect: a transaction's own write fails at
    commit, its rows cannot be written as aborted either and wait as late rows;
    later transactions commit regardless, and the rows are dropped on their own
    when the database refuses them."""
    writer = world.att.sink.writer if world.att.sink else None
    assert writer is not None
    real = writer.event_values

    def refuse_poison(occurrences: Any, outcome: Any) -> Any:
        # a row the database refuses whatever sentinel encodes (a NULL scope,
        # which the writer would never build): the poisoned call's rows
        return [(None, *r[1:]) if "poison" in str(r[7]) else r for r in real(occurrences, outcome)]

    monkeypatch.setattr(writer, "event_values", refuse_poison)
    with world.Session() as s:
        s.get(world.Box, 1).put("poison")
        with pytest.raises(LogWriteError):
            s.commit()
    sink = world.att.sink
    assert sink is not None and sink.late  # kept as late rows, on their own
    sink.late_delay = 0.0
    with caplog.at_level(logging.ERROR, "sentinel.orm"):
        _ordinary(world, 100)
    with world.Session() as s:
        assert s.get(world.Box, 1).n == 100
    assert world.put_values() == [(i, "committed") for i in range(100)]
    assert not sink.late
    assert any("refused by the database and dropped" in r.getMessage() for r in caplog.records)


def test_a_rule_error_whose_text_no_text_column_takes_blocks_nobody(world: World) -> None:
    """A failed rule's error text goes to the rule-firing log: NUL and lone
    surrogates are escaped there (PostgreSQL refuses them in text)."""

    def explode(occ: Any) -> None:
        if occ.params["value"] == "boom":
            raise ValueError("boom\x00\ud800")

    world.det.rule("explode", "Box.Put", action=explode)
    with world.Session() as s:
        with pytest.raises(Exception, match="boom"):
            s.get(world.Box, 1).put("boom")
        s.rollback()
    _ordinary(world)
    with world.Session() as s:
        assert s.get(world.Box, 1).n == 100
    assert world.put_values() == [("boom", "aborted")] + [(i, "committed") for i in range(100)]
    with LogReader(world.engine) as r:
        (failed,) = [f for f in r.firings() if f.status == "failed"]
    assert failed.rule == "explode"
    assert failed.error is not None and "boom\\x00\\ud800" in failed.error


def test_a_bad_archive_mark_blocks_nobody(world: World, caplog: pytest.LogCaptureFixture) -> None:
    """The bitemporal archive's marks wait with the late rows: one that cannot
    be written (a time that is not a time) is dropped on its own; the
    transactions around it commit and the other late rows are written."""
    sink = world.att.sink
    assert sink is not None
    sink.late_delay = 0.0
    world.put("before")
    sink.add_late(("expired", ("forged-scope", 1, float("nan"))))
    with caplog.at_level(logging.ERROR, "sentinel.orm"):
        _ordinary(world, 3)
    assert not sink.late
    assert [v for v, _ in world.put_values()] == ["before", 0, 1, 2]
    assert any("forged-scope" in r.getMessage() for r in caplog.records)
    commits = [o.scope for o, _, _ in world.logged() if o.event == "txn:commit"]
    assert len(commits) == 4


def _nested_mapping(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = MappingProxyType({"k": value})
    return value


#: Read-only mappings (the type database events' ``new``/``old`` have) that an
#: explicit event may carry: refused at the signal like any other mapping.
REFUSED_MAPPINGS: list[tuple[str, Any]] = [
    ("object inside", MappingProxyType({"a": object()})),
    ("NUL key", MappingProxyType({"\x00": 1})),
    ("int key", MappingProxyType({1: 2})),
    ("too deep", _nested_mapping(MAX_DEPTH + 1)),
]


@pytest.mark.parametrize("where", ["transaction", "process scope"])
@pytest.mark.parametrize(("label", "value"), REFUSED_MAPPINGS, ids=[r[0] for r in REFUSED_MAPPINGS])
def test_a_read_only_mapping_of_an_explicit_event_is_refused_at_the_signal(
    world: World, where: str, label: str, value: Any
) -> None:
    """An explicit event's read-only mapping that the log cannot store is
    refused when signalled, as a dict is, in a transaction and outside one
    (it was let through, then failed the commit, or was dropped from the late
    rows with an error)."""
    world.det.explicit("Note")
    with world.Session() as s:
        if where == "transaction":
            s.get(world.Box, 1).put(0)  # the session's transaction is the scope
        with pytest.raises(UnloggableParameter) as info:
            world.det.signal("Note", m=value)
        assert info.value.event == "Note"
        s.commit()
    _ordinary(world, 3)
    assert not [o for o, _, _ in world.logged() if o.event == "Note"]
    assert world.att.sink is not None and not world.att.sink.late


@pytest.mark.parametrize("where", ["transaction", "process scope"])
def test_a_read_only_mapping_of_an_explicit_event_is_normalized_for_the_log(
    world: World, where: str
) -> None:
    """A read-only mapping holding values that are loggable once normalized
    (a list, a set) is logged normalized, as a dict is."""
    world.det.explicit("Note")
    with world.Session() as s:
        if where == "transaction":
            s.get(world.Box, 1).put(0)
        world.det.signal("Note", m=MappingProxyType({"l": [1, "\x00"], "s": {2}}))
        s.commit()
    (note,) = [o for o, _, _ in world.logged() if o.event == "Note"]
    assert canon(note.params["m"]) == canon(
        MappingProxyType({"l": (1, "\x00"), "s": frozenset({2})})
    )
