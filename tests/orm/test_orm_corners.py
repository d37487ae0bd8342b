"""ORM corners (issue 29, item 12): values SQLAlchemy generates at a flush in
``:update``'s ``new``; a session that joined a transaction begun outside it;
deferred actions and plain subscribers that end their transaction. On every
backend."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

import sentinel
from sentinel.errors import RuleError, ScopeError

from .conftest import ORM

# -- values SQLAlchemy generates at the flush, in :update's new -------------------------


def _doc_class(orm: ORM) -> Any:
    """A reactive mapped class with a version counter and two ``onupdate=``
    columns (a scalar and a function of the row's values), its table created."""

    class Doc(orm.model.Base):
        __tablename__ = "doc"
        id: Mapped[int] = mapped_column(primary_key=True)
        title: Mapped[str] = mapped_column(sa.String(20))
        version: Mapped[int] = mapped_column(nullable=False)
        stamp: Mapped[str] = mapped_column(sa.String(20), default="new", onupdate="edited")
        shout: Mapped[str] = mapped_column(
            sa.String(20),
            default="",
            onupdate=lambda ctx: ctx.get_current_parameters()["title"].upper(),
        )
        __mapper_args__ = {"version_id_col": version}

    orm.model.Base.metadata.create_all(orm.engine)
    return Doc


def test_update_events_carry_the_version_and_onupdate_values_the_flush_wrote(orm: ORM) -> None:
    """``new`` of ``Doc:update`` holds the ``version_id_col`` increment and the
    ``onupdate=`` values SQLAlchemy wrote in the UPDATE, as the row now has
    them (they were missing: only the attributes the application set were
    there); ``old`` holds what the application changed."""
    Doc = _doc_class(orm)
    orm.attach()
    seen: list[Any] = []
    orm.det.rule("watch", "Doc:update", action=seen.append)
    with orm.Session.begin() as s:
        doc = Doc(title="draft")
        s.add(doc)
        s.flush()
        doc_id = doc.id
    with orm.Session.begin() as s:
        doc = s.get(Doc, doc_id)
        doc.title = "final"
        s.flush()
        doc.title = "last"
    with orm.Session.begin() as s:
        doc = s.get(Doc, doc_id)
        doc.title = "last"  # the same value: no UPDATE, no event
    news = [dict(o.params["new"]) for o in seen]
    assert news == [
        {"title": "final", "version": 2, "stamp": "edited", "shout": "FINAL"},
        {"title": "last", "version": 3, "stamp": "edited", "shout": "LAST"},
    ]
    assert [dict(o.params["old"]) for o in seen] == [{"title": "draft"}, {"title": "final"}]
    with orm.Session() as s:
        row = s.get(Doc, doc_id)
        assert (row.version, row.stamp, row.shout) == (3, "edited", "LAST")
    logged = [o.occurrence.params["new"] for o in orm.log() if o.occurrence.event == "Doc:update"]
    assert logged == news  # and the log has them too


def test_an_onupdate_value_the_application_set_is_its_own(orm: ORM) -> None:
    """A column the flush sets itself keeps its value: SQLAlchemy applies no
    ``onupdate=`` to it, and ``old``/``new`` show the change as set."""
    Doc = _doc_class(orm)
    orm.attach()
    seen: list[Any] = []
    orm.det.rule("watch", "Doc:update", action=seen.append)
    with orm.Session.begin() as s:
        doc = Doc(title="draft")
        s.add(doc)
        s.flush()
        doc_id = doc.id
    with orm.Session.begin() as s:
        doc = s.get(Doc, doc_id)
        doc.title = "final"
        doc.stamp = "by hand"
    (occ,) = seen
    assert dict(occ.params["new"]) == {
        "title": "final",
        "stamp": "by hand",
        "version": 2,
        "shout": "FINAL",
    }
    assert dict(occ.params["old"]) == {"title": "draft", "stamp": "new"}


# -- a session inside a transaction begun outside it ----------------------------------


@contextmanager
def _outer(orm: ORM, mode: str, *, nested: bool = False) -> Iterator[tuple[sa.Connection, Any]]:
    """A connection in a transaction of its own (and a savepoint, with
    ``nested``), and a session of the attached factory joined to it."""
    with orm.engine.connect() as conn:
        conn.begin()
        if nested:
            conn.begin_nested()
        s = orm.Session(bind=conn, join_transaction_mode=mode)
        try:
            yield conn, s
        finally:
            s.close()


JOINS = [
    ("create_savepoint", False),
    ("rollback_only", False),
    ("conditional_savepoint", False),  # rollback_only, as no savepoint is open
    ("conditional_savepoint", True),  # create_savepoint inside the open one
    ("control_fully", True),  # the open savepoint is the session's
]


def _events(orm: ORM, scope: Any) -> list[tuple[str, str]]:
    return [(o.occurrence.event, o.outcome) for o in orm.log() if o.occurrence.scope == scope]


@pytest.mark.parametrize(("mode", "nested"), JOINS)
def test_a_session_committed_into_an_outer_transaction_that_rolls_back_logs_no_commit(
    orm: ORM, mode: str, nested: bool
) -> None:
    """The session's commit only released its savepoint (or did nothing):
    the outer transaction's rollback undoes its work, so the log holds no
    ``txn:commit`` and no committed row of it, only the aborted transaction,
    and the rules on ``txn:commit`` never run (those on ``txn:abort`` do)."""
    (ms,) = orm.add_stocks("MS")
    orm.attach()
    commits: list[Any] = []
    aborts: list[Any] = []
    orm.det.rule("on_commit", "txn:commit", action=commits.append)
    orm.det.rule("on_abort", "txn:abort", action=aborts.append)
    with _outer(orm, mode, nested=nested) as (conn, s):
        s.get(orm.model.Stock, ms).set_price(5.0)
        scope = sentinel.scope_of(s).id
        s.commit()
        assert commits == [] and aborts == []
        conn.rollback()
    assert commits == [] and len(aborts) == 1
    with orm.Session() as s2:
        assert s2.get(orm.model.Stock, ms).price == 0.0
    events = _events(orm, scope)
    assert ("txn:commit", "committed") not in events
    assert {outcome for _, outcome in events} == {"aborted"}
    assert [e for e, _ in events] == [
        "txn:begin",
        "Stock.set_price:begin",
        "Stock.set_price:end",
        "Stock:update",
        "txn:pre_commit",
        "txn:abort",
    ]
    assert {f.rule for f in orm.firings()} == {"on_abort"}


@pytest.mark.parametrize(("mode", "nested"), JOINS)
def test_a_session_committed_into_an_outer_transaction_commits_with_it(
    orm: ORM, mode: str, nested: bool
) -> None:
    """``txn:commit`` is signalled when the outer transaction commits, not
    when the session's commit releases its savepoint; its row is written in
    that transaction."""
    (ms,) = orm.add_stocks("MS")
    att = orm.attach()
    commits: list[Any] = []
    orm.det.rule("on_commit", "txn:commit", action=commits.append)
    with _outer(orm, mode, nested=nested) as (conn, s):
        s.get(orm.model.Stock, ms).set_price(5.0)
        scope = sentinel.scope_of(s).id
        s.commit()
        s.close()
        assert commits == []
        assert att.sink is not None
        assert [i for i in att.sink.late if i[1][0] == "txn:commit"] == []  # not yet
        conn.commit()
    assert len(commits) == 1
    with orm.Session() as s2:
        assert s2.get(orm.model.Stock, ms).price == 5.0
    events = _events(orm, scope)
    assert events[-1] == ("txn:commit", "committed")
    assert {outcome for _, outcome in events} == {"committed"}
    assert [f.rule for f in orm.firings()] == ["on_commit"]


# -- deferred actions and subscribers that end their transaction ----------------------


@pytest.mark.parametrize("flushed", [True, False], ids=["clean", "flush_at_commit"])
@pytest.mark.parametrize("caught", [False, True], ids=["raised", "caught"])
def test_a_deferred_action_that_commits_fails_the_commit_naming_the_rule(
    orm: ORM, flushed: bool, caught: bool
) -> None:
    """A deferred rule runs inside ``session.commit()``: a ``commit()`` in its
    action is refused at once, and the commit fails with a :class:`RuleError`
    naming the rule and saying why (it surfaced as SQLAlchemy's
    ``ResourceClosedError``, naming nothing, when the step ran in the commit's
    flush; as an ``IllegalStateChangeError`` otherwise), even if the action
    catches the refusal; nothing is committed."""
    (ms,) = orm.add_stocks("MS")
    orm.attach()

    def commit_it(occ: Any) -> None:
        session = sentinel.session_of(occ)
        assert session is not None
        try:
            session.commit()
        except ScopeError:
            if not caught:
                raise

    orm.det.rule("audit", "Stock.e2", action=commit_it, coupling="deferred")
    s = orm.Session()
    s.get(orm.model.Stock, ms).set_price(5.0)
    if flushed:
        s.flush()  # the step runs in sentinel's before_commit, else in the commit's flush
    with pytest.raises(
        RuleError, match=r"'audit' failed in its action: ScopeError: it called commit"
    ):
        s.commit()
    s.rollback()
    s.close()
    with orm.Session() as s2:
        assert s2.get(orm.model.Stock, ms).price == 0.0
    assert {o.outcome for o in orm.log()} == {"aborted"}
    assert [(f.rule, f.status) for f in orm.firings()] == [("audit", "failed")]
    assert "commit" not in vars(s)  # the session's own commit() is back


@pytest.mark.parametrize("ends", ["rollback", "commit", "close"])
def test_a_subscriber_that_ends_its_transaction_fails_the_call(orm: ORM, ends: str) -> None:
    """A plain subscriber (not a rule) that rolls back, commits or closes the
    session of the transaction it is called in: the call that signalled the
    event fails, naming the subscriber, instead of going on in the session's
    next transaction (``set_price`` does not run: its price is not set
    there)."""
    (ms,) = orm.add_stocks("MS")
    orm.attach()

    def end_it(occ: Any) -> None:
        session = sentinel.session_of(occ)
        assert session is not None
        getattr(session, ends)()

    orm.det.subscribe("Stock.e2", end_it)
    s = orm.Session()
    stock = s.get(orm.model.Stock, ms)
    with pytest.raises(ScopeError, match=r"subscriber '.*end_it' of .*ended the") as exc:
        stock.set_price(9.0)
    assert exc.value.subscriber is not None and "end_it" in exc.value.subscriber
    s.commit()
    s.close()
    with orm.Session() as s2:
        assert s2.get(orm.model.Stock, ms).price == 0.0
    assert not [o for o in orm.log() if o.occurrence.event == "Stock.set_price:end"]


def _with_deferred_child(orm: ORM) -> int:
    """A stock, and a table whose rows refer to stocks through a foreign key
    checked at COMMIT (a row naming no stock makes the database refuse it)."""
    (ms,) = orm.add_stocks("MS")
    with orm.engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE child (id INT PRIMARY KEY, stock_id INT REFERENCES "
            "stock(id) DEFERRABLE INITIALLY DEFERRED)"
        )
    return ms


@pytest.mark.parametrize("backend", ["postgresql"])
def test_an_outer_commit_the_database_refuses_is_logged_as_aborted(orm: ORM) -> None:
    """``txn:commit`` comes in the connection's ``commit`` event, before the
    database's COMMIT (SQLAlchemy signals nothing after it). A COMMIT refused
    then (a deferred constraint) rolled back the transaction's log rows with
    its data: the log held nothing of it. It is now logged again as aborted,
    ``txn:commit`` among it (its rules had run), with an error logged."""
    ms = _with_deferred_child(orm)
    orm.attach()
    commits: list[Any] = []
    orm.det.rule("on_commit", "txn:commit", action=commits.append)
    with orm.engine.connect() as conn:
        conn.begin()
        s = orm.Session(bind=conn, join_transaction_mode="create_savepoint")
        s.get(orm.model.Stock, ms).set_price(5.0)
        scope = sentinel.scope_of(s).id
        s.execute(sa.text("INSERT INTO child VALUES (1, 999)"))  # no such stock
        s.commit()
        s.close()
        with pytest.raises(sa.exc.IntegrityError):
            conn.commit()
    assert len(commits) == 1
    with orm.Session() as s2:
        assert s2.get(orm.model.Stock, ms).price == 0.0
    for att in orm.attached:
        att.flush_log()
    events = _events(orm, scope)
    assert {outcome for _, outcome in events} == {"aborted"}
    assert [e for e, _ in events] == [
        "txn:begin",
        "Stock.set_price:begin",
        "Stock.set_price:end",
        "Stock:update",
        "txn:pre_commit",
        "txn:commit",
    ]
    assert {f.rule for f in orm.firings()} == {"on_commit"}


@pytest.mark.parametrize("backend", ["postgresql"])
def test_an_independent_detached_rule_runs_when_the_database_refuses_the_outer_commit(
    orm: ORM,
) -> None:
    """A detached rule of an outer transaction is enqueued in it, before its
    COMMIT; a COMMIT the database refused took the entry with it, so an
    independent rule (one that runs whatever the outcome) never ran. It now
    runs, told the transaction did not commit; a dependent one does not."""
    from tests.orm import actions

    ms = _with_deferred_child(orm)
    orm.attach()
    orm.det.rule(
        "either",
        "Stock:update",
        action=actions.record_if_committed,
        coupling="detached_independent",
    )
    orm.det.rule("after", "Stock:update", action=actions.record, coupling="detached")
    with orm.engine.connect() as conn:
        conn.begin()
        s = orm.Session(bind=conn, join_transaction_mode="create_savepoint")
        s.get(orm.model.Stock, ms).set_price(5.0)
        s.execute(sa.text("INSERT INTO child VALUES (1, 999)"))  # no such stock
        s.commit()
        s.close()
        with pytest.raises(sa.exc.IntegrityError):
            conn.commit()
    deadline = time.monotonic() + 20
    while not orm.effects() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the dependent rule's entry is looked for a while: it never shows
    assert [(r[0], r[3]) for r in orm.effects()] == [("either", "aborted")]


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_detached_rule_of_an_outer_transaction_with_a_slow_commit_runs(orm: ORM) -> None:
    """The worker looked for the entry once, 0.5 s after the outer commit's
    event: a COMMIT slower than that (here a deferred trigger sleeping 1 s)
    left it pending for ever in the application. It is looked for again, at
    doubling waits, until it shows."""
    from tests.orm import actions

    (ms,) = orm.add_stocks("MS")
    with orm.engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_sleep(1.0); RETURN NULL; END $$"
        )
        conn.exec_driver_sql(
            "CREATE CONSTRAINT TRIGGER slow_commit AFTER UPDATE ON stock DEFERRABLE "
            "INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow()"
        )
    att = orm.attach(workers=1)
    orm.det.rule("later", "Stock:update", action=actions.record, coupling="detached")
    with orm.engine.connect() as conn:
        conn.begin()
        s = orm.Session(bind=conn, join_transaction_mode="create_savepoint")
        s.get(orm.model.Stock, ms).set_price(5.0)
        s.commit()
        s.close()
        conn.commit()  # a second, with the trigger
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with orm.engine.connect() as conn:
            done = conn.exec_driver_sql("SELECT count(*) FROM effects").scalar()
        if done:
            break
        time.sleep(0.1)
    assert done == 1
    att.wait_detached(10)
