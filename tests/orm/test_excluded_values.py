"""A value the log leaves out is never refused for the log's sake.

``UnloggableParameter`` tells the user to exclude a parameter the event log
cannot store (a string of more than ``MAX_STRING`` characters). Per backend:
once the attachment's :class:`LogPolicy` excludes or redacts it (a method's
parameter, or a column through ``new.<column>``), the call and the commit go
through, rules see the whole value, and the log holds none of it. A long column
value that is logged is refused at the flush, on update as on insert, and the
transactions after it commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from sentinel import LocalEventDetector, Reactive, event
from sentinel.errors import UnloggableParameter
from sentinel.log import LogPolicy, LogReader, migrate
from sentinel.orm import Attachment, attach
from sentinel.params import MAX_STRING

from .conftest import sqlite_savepoints

BIG = "x" * (MAX_STRING + 1)
LONG_TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


class World:
    def __init__(self, engine: sa.Engine, backend: str, policy: LogPolicy) -> None:
        self.engine = engine
        self.det = det = LocalEventDetector()

        class Base(Reactive, DeclarativeBase, detector=det):
            pass

        class Doc(Base):
            __tablename__ = "doc"
            id: Mapped[int] = mapped_column(primary_key=True)
            body: Mapped[str] = mapped_column(LONG_TEXT, default="")
            title: Mapped[str] = mapped_column(LONG_TEXT, default="")

            @event(begin="Edit")
            def edit(self, body: Any, title: str) -> None:
                if isinstance(body, str):
                    self.body = body
                self.title = title

        self.Doc = Doc
        if backend == "sqlite":
            sqlite_savepoints(engine, {"sql": "BEGIN IMMEDIATE"})
        Base.metadata.create_all(engine)
        migrate.upgrade(engine)
        self.Session = sessionmaker(engine)
        with self.Session.begin() as s:
            s.add(Doc(id=1))
        self.att: Attachment = attach(self.Session, detector=det, workers=0, log=policy)
        self.seen: list[Any] = []
        det.rule("edits", "Doc.Edit", action=self.seen.append)
        det.rule("rows", "Doc:insert | Doc:update", action=self.seen.append)

    def logged(self, name: str) -> list[dict[str, Any]]:
        self.att.flush_log()
        with LogReader(self.engine) as r:
            return [dict(o.params) for o, _, _ in r.occurrences() if o.event == name]

    def ordinary(self, n: int = 10) -> None:
        for i in range(n):
            with self.Session.begin() as s:
                s.get(self.Doc, 1).edit("b", f"t{i}")
        with self.Session() as s:
            assert s.get(self.Doc, 1).title == f"t{n - 1}"


@pytest.fixture
def make_world(engine: sa.Engine, backend: str) -> Iterator[Any]:
    worlds: list[World] = []

    def make(policy: LogPolicy) -> World:
        worlds.append(World(engine, backend, policy))
        return worlds[-1]

    yield make
    for w in worlds:
        w.att.detach()


def test_an_excluded_method_parameter_may_be_too_long(make_world: Any) -> None:
    world = make_world(
        LogPolicy({"Doc.edit:*": {"exclude": ["body"]}, "Doc:*": {"exclude": ["new.body"]}})
    )
    with world.Session.begin() as s:
        doc = s.get(world.Doc, 1)
        doc.edit(BIG, "big")
        doc.edit("small", "small")
    # rules saw every value, as given
    edits = [o for o in world.seen if o.event == "Doc.edit:begin"]
    assert [o.params["body"] for o in edits] == [BIG, "small"]
    # the log kept the rest of the call, and no body
    logged = world.logged("Doc.edit:begin")
    assert [p["title"] for p in logged] == ["big", "small"]
    assert all("body" not in p for p in logged)
    world.ordinary()


@pytest.mark.parametrize("action", ["exclude", "redact"])
def test_a_left_out_parameter_that_is_no_plain_value_may_be_too_long(
    make_world: Any, action: str
) -> None:
    """Bytes, or a mapping holding a long string: the call's binding checked
    their length before the policy was asked, refused them, and put the value's
    ends in the error (which a detached rule's failure then stored in the
    outbox and the firing log)."""
    from sentinel.params import MAX_BYTES

    world = make_world(LogPolicy({"Doc.edit:*": {action: ["body"]}}))
    secret = b"TOPSECRET-" * (MAX_BYTES // 10 + 1)
    nested = {"tok": "SECRET" + "S" * MAX_STRING}
    with world.Session.begin() as s:
        doc = s.get(world.Doc, 1)
        doc.edit(secret, "bytes")
        doc.edit(nested, "nested")
    edits = [o for o in world.seen if o.event == "Doc.edit:begin"]
    assert [o.params["body"] for o in edits] == [secret, nested]
    logged = world.logged("Doc.edit:begin")
    assert [p["title"] for p in logged] == ["bytes", "nested"]
    for p in logged:
        assert ("body" not in p) if action == "exclude" else p["body"] == "<redacted>"
    # kept (the title), the same values are refused, as too long for the log
    too_long = "at most 1,000,000 bytes"
    with pytest.raises(UnloggableParameter, match=too_long), world.Session.begin() as s:
        s.get(world.Doc, 1).edit("b", secret)
    nested_path = r"'title\.a\.tok' of Doc\.edit:begin"
    with pytest.raises(UnloggableParameter, match=nested_path), world.Session.begin() as s:
        s.get(world.Doc, 1).edit("b", {"a": nested})
    world.ordinary()


@pytest.mark.parametrize("action", ["exclude", "redact"])
def test_a_column_left_out_of_the_log_may_be_too_long(make_world: Any, action: str) -> None:
    world = make_world(
        LogPolicy({"Doc.edit:*": {action: ["body"]}, "Doc:*": {action: ["new.body", "old.body"]}})
    )
    with world.Session.begin() as s:
        s.add(world.Doc(id=2, body=BIG, title="new"))  # insert
    with world.Session.begin() as s:
        s.get(world.Doc, 1).edit(BIG, "edited")  # update
    rows = [o for o in world.seen if o.event in ("Doc:insert", "Doc:update")]
    assert [o.params["new"]["body"] for o in rows] == [BIG, BIG]
    for name in ("Doc:insert", "Doc:update"):
        (params,) = world.logged(name)
        if action == "exclude":
            assert "body" not in params["new"]
        else:
            assert params["new"]["body"] == "<redacted>"
        assert params["new"]["title"] in ("new", "edited")
    world.ordinary()


@pytest.mark.parametrize("change", ["insert", "update"])
def test_a_logged_column_too_long_is_refused_at_the_flush_and_harms_no_one(
    make_world: Any, change: str
) -> None:
    world = make_world(LogPolicy())
    with pytest.raises(UnloggableParameter) as info, world.Session.begin() as s:
        if change == "insert":
            s.add(world.Doc(id=2, body=BIG))
        else:
            s.get(world.Doc, 1).body = BIG
    assert info.value.event == f"Doc:{change}" and info.value.param == "new.body"
    with world.Session() as s:
        assert s.get(world.Doc, 1).body == ""
        assert s.get(world.Doc, 2) is None
    assert world.logged(f"Doc:{change}") == []
    world.ordinary()
    assert len(world.logged("Doc.edit:begin")) == 10


def test_a_session_whose_attachment_does_not_log_is_never_refused_for_the_log(
    make_world: Any,
) -> None:
    world = make_world(LogPolicy())
    quiet = attach(sessionmaker(world.engine), detector=world.det, workers=0, log=False)
    try:
        with quiet.target.begin() as s:  # a long column, a long method argument
            s.add(world.Doc(id=2, body=BIG))
            s.flush()
            s.get(world.Doc, 2).edit(BIG + "!", "quiet")
        with quiet.target() as s:
            assert s.get(world.Doc, 2).body == BIG + "!"
        assert [o.params["new"]["body"] for o in world.seen if o.event == "Doc:insert"] == [BIG]
        # the logging attachment still refuses what it would log, on the same detector
        with pytest.raises(UnloggableParameter), world.Session.begin() as s:
            s.get(world.Doc, 1).edit(BIG, "loud")
        assert world.logged("Doc.edit:begin") == []
        assert world.logged("Doc:insert") == []
        world.ordinary()
    finally:
        quiet.detach()
