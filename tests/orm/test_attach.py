"""Attaching and detaching, and the errors bad input gets (issue 4: bad input)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, scoped_session, sessionmaker

import sentinel
from sentinel import LocalEventDetector
from sentinel.errors import (
    AttachError,
    DetachedActionError,
    LogSchemaOutdatedError,
    LogTablesMissingError,
    RuleDefinitionError,
)
from sentinel.log import migrate
from sentinel.orm import attach, detach
from sentinel.orm import attachments as all_attachments
from sentinel.orm.attachment import LogOptions, OutboxOptions
from sentinel.params import UnloggableParameter

from . import actions
from .conftest import ORM, make_model

_BEFORE: list[object] = []


@pytest.fixture(autouse=True)
def _others_left_alone() -> None:
    """Attachments that exist when a test starts are not its own (a docs page
    run on this worker keeps its attachment until its last block has run,
    possibly on another worker): the tests here look at their own only."""
    _BEFORE[:] = all_attachments()


def attachments() -> list[Any]:
    """The attachments this test made (see :func:`_others_left_alone`)."""
    return [a for a in all_attachments() if not any(a is b for b in _BEFORE)]


def test_attaching_twice_is_an_error(orm: ORM) -> None:
    orm.attach()
    with pytest.raises(AttachError, match="already attached"):
        attach(orm.Session, detector=orm.det)
    # a scoped_session over the same sessionmaker is the same sessions
    with pytest.raises(AttachError, match="already attached"):
        attach(scoped_session(orm.Session), detector=orm.det)


def test_attaching_a_base_class_of_attached_sessions_is_an_error(orm: ORM) -> None:
    orm.attach()
    with pytest.raises(AttachError, match="through"):
        attach(Session, detector=orm.det)
    assert [a.target for a in attachments()] == [orm.Session]


def test_attach_takes_session_factories_only(orm: ORM) -> None:
    with orm.Session() as s, pytest.raises(AttachError, match="not a Session object"):
        attach(s, detector=orm.det)
    with pytest.raises(AttachError, match="not int"):
        attach(3, detector=orm.det)
    with pytest.raises(AttachError, match="workers"):
        attach(orm.Session, detector=orm.det, workers=-1)
    with pytest.raises(AttachError, match="log="):
        attach(orm.Session, detector=orm.det, log="yes")
    assert attachments() == []


@pytest.mark.parametrize(
    ("make", "option"),
    [
        (lambda: OutboxOptions(workers=-1), "workers"),
        (lambda: OutboxOptions(workers=True), "workers"),
        (lambda: OutboxOptions(max_attempts=0), "max_attempts"),
        (lambda: OutboxOptions(backoff=-0.1), "backoff"),
        (lambda: OutboxOptions(max_backoff="1"), "max_backoff"),
        (lambda: OutboxOptions(lease=None), "lease"),
        (lambda: OutboxOptions(context=42), "context"),
        (lambda: OutboxOptions(outbox_key="short"), "outbox_key"),
        (lambda: LogOptions(flush_every=0), "flush_every"),
        (lambda: LogOptions(log="yes"), "log"),
    ],
)
def test_option_objects_reject_a_bad_value_naming_the_option(make: Any, option: str) -> None:
    """attach() groups its options into typed, frozen objects, each value
    checked when the object is made; the error names the attach() option."""
    with pytest.raises(AttachError, match=rf"^attach\({option}=\.\.\.\)"):
        make()


def test_attach_hands_its_options_to_the_attachment_as_objects(orm: ORM) -> None:
    att = orm.attach(workers=0, backoff=1, lease=9, flush_every=7, log_empty=True)
    assert att.outbox_options == OutboxOptions(workers=0, backoff=1.0, max_backoff=0.05, lease=9.0)
    assert att.log_options == LogOptions(flush_every=7, log_empty=True)
    assert (att.runner.workers, att.runner.backoff, att.runner.lease) == (0, 1.0, 9.0)
    assert isinstance(att.runner.backoff, float)
    assert (att.flush_every, att.log_empty, att.outbox) == (7, True, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        att.outbox_options.workers = 3  # type: ignore[misc]


def test_detach_restores_the_detector(orm: ORM) -> None:
    names = ("run_detached", "object_scope", "rule_run", "occurrence", "expired", "define_rule")
    before = {name: getattr(orm.det.dispatch, name) for name in names}
    att = orm.attach()
    assert orm.det.has_listeners
    att.detach()
    att.detach()  # idempotent
    assert {name: getattr(orm.det.dispatch, name) for name in names} == before
    with pytest.raises(AttachError, match="not attached"):
        detach(orm.Session)
    # attachable again, and as a context manager
    with attach(orm.Session, detector=orm.det) as again:
        assert again in attachments()
    assert attachments() == []


def test_after_detach_sessions_are_plain(orm: ORM) -> None:
    att = orm.attach()
    att.detach()
    seen: list[Any] = []
    orm.det.rule("r", "txn:begin", action=seen.append)
    with orm.Session.begin() as s:
        s.add(orm.model.Stock(name="IBM"))
    assert seen == []
    assert orm.log() == []


def test_missing_log_tables_fail_at_attach(engine: sa.Engine) -> None:
    det = LocalEventDetector()
    model = make_model(det)
    model.Base.metadata.create_all(engine)
    with pytest.raises(LogTablesMissingError, match="sentinel db upgrade"):
        attach(sessionmaker(engine), detector=det)
    assert attachments() == []
    assert not det.has_listeners
    # without a log and an outbox, no tables are needed
    with attach(sessionmaker(engine), detector=det, log=False, outbox=False):
        pass


def test_missing_log_tables_fail_the_commit_with_nothing_written(engine: sa.Engine) -> None:
    """A sessionmaker without a bind cannot be checked at attach: the first
    commit is, and fails as a whole."""
    det = LocalEventDetector()
    model = make_model(det)
    model.Base.metadata.create_all(engine)
    Session = sessionmaker()
    with attach(Session, detector=det):
        s = Session(bind=engine)
        s.add(model.Stock(name="IBM"))
        with pytest.raises(LogTablesMissingError):
            s.commit()
        s.rollback()
        s.close()
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM stock")).scalar() == 0


def test_an_outdated_log_fails_at_attach(orm: ORM, monkeypatch: pytest.MonkeyPatch) -> None:
    from sentinel.log import schema as schema_module

    revisions = (*schema_module.SCHEMA_REVISIONS, "9999")
    monkeypatch.setattr(schema_module, "SCHEMA_REVISIONS", revisions)
    monkeypatch.setattr(schema_module, "SCHEMA_VERSION", "9999")
    with pytest.raises(LogSchemaOutdatedError, match="sentinel db upgrade"):
        attach(orm.Session, detector=orm.det)
    assert attachments() == []


def test_unknown_coupling_mode(orm: ORM) -> None:
    orm.attach()
    with pytest.raises(RuleDefinitionError, match="unknown coupling mode 'detatched'"):
        orm.det.rule("r", "Stock.e2", action=actions.record, coupling="detatched")
    assert "r" not in orm.det.rules


def _nested_action() -> Any:
    def inner(occ: Any) -> None:
        pass

    return inner


class _Holder:
    def act(self, occ: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("action", "why"),
    [
        (lambda occ: None, "lambda"),
        (_nested_action(), "inside a function"),
        (_Holder().act, "bound method"),
        (print, "not a function"),
    ],
)
def test_detached_actions_must_be_importable(orm: ORM, action: Any, why: str) -> None:
    orm.attach()
    with pytest.raises(DetachedActionError, match=why) as info:
        orm.det.rule("notify", "Stock.e2", action=action, coupling="detached")
    assert info.value.rule == "notify"
    assert "notify" not in orm.det.rules
    # immediate rules may use anything callable
    orm.det.rule("notify", "Stock.e2", action=action)


def test_detached_functions_of_main_are_rejected(orm: ORM) -> None:
    orm.attach()

    def act(occ: Any) -> None:
        pass

    act.__module__ = "__main__"
    act.__qualname__ = "act"
    with pytest.raises(DetachedActionError, match="__main__"):
        orm.det.rule("r", "Stock.e2", action=act, coupling="detached_independent")


def test_existing_unimportable_detached_rules_fail_attach(orm: ORM) -> None:
    orm.det.rule("r", "Stock.e2", action=lambda occ: None, coupling="detached")
    with pytest.raises(DetachedActionError, match="lambda"):
        orm.attach()
    assert attachments() == []


def test_unloggable_parameters_of_an_explicit_event(orm: ORM) -> None:
    orm.attach()
    orm.det.explicit("Audit")
    with orm.Session.begin() as s:
        s.add(orm.model.Stock(name="IBM"))
        scope = sentinel.scope_of(s)
        assert scope is not None
        with orm.det.use_scope(scope), pytest.raises(UnloggableParameter, match="'who'"):
            orm.det.signal("Audit", who=object())
        with orm.det.use_scope(scope):
            orm.det.signal("Audit", who=["a", "b"])  # made loggable: a tuple
    audit = [o.occurrence for o in orm.log() if o.occurrence.event == "Audit"]
    assert [o.params["who"] for o in audit] == [("a", "b")]


def test_unloggable_column_values_fail_the_flush(engine: sa.Engine) -> None:
    det = LocalEventDetector()

    class Base(sentinel.Reactive, sa.orm.DeclarativeBase, detector=det):
        pass

    class Blob(Base):
        __tablename__ = "blobs"
        id: sa.orm.Mapped[int] = sa.orm.mapped_column(primary_key=True)
        data: sa.orm.Mapped[Any] = sa.orm.mapped_column(sa.PickleType)

    Base.metadata.create_all(engine)
    migrate.upgrade(engine)
    Session = sessionmaker(engine)
    with attach(Session, detector=det):
        s = Session()
        s.add(Blob(data=object()))
        with pytest.raises(UnloggableParameter, match="Blob:insert") as info:
            s.commit()
        assert info.value.param == "new.data"
        s.rollback()
        s.close()
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM blobs")).scalar() == 0
        # the insert event was never signalled: the aborted transaction logged
        # nothing but its own txn events, which are not written
        assert conn.execute(sa.text("SELECT count(*) FROM sentinel_occurrences")).scalar() == 0
