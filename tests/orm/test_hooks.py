"""The detector's events the ORM layer listens to (sentinel.detector.events):
``rule_run``, ``define_rule``, ``classes_attached``; and what
happens when rules on the transaction events themselves fail."""

from __future__ import annotations

from typing import Any

import pytest

from sentinel import LocalEventDetector, Reactive, event
from sentinel.detector.events import listen, remove
from sentinel.errors import RollbackOnlyError, RuleDefinitionError, RuleError
from sentinel.reactive import attached_classes

from .conftest import ORM


def test_the_rule_observer_sees_every_run() -> None:
    det = LocalEventDetector()
    det.explicit("E")
    seen: list[tuple[str, str, str | None]] = []

    def observe(rule: Any, occ: Any, status: str, err: BaseException | None) -> None:
        seen.append((rule.name, status, type(err).__name__ if err else None))

    listen(det, "rule_run", observe)
    det.rule("yes", "E", lambda o: True, action=lambda o: None)
    det.rule("no", "E", lambda o: False, action=lambda o: None)
    det.rule("plain", "E", action=lambda o: None)  # no condition: the fast runner

    def boom(occ: Any) -> None:
        raise ValueError("boom")

    failing = det.rule("boom", "E", action=boom)
    with pytest.raises(RuleError):
        det.signal("E")
    assert sorted(seen) == [
        ("boom", "failed", "RuleError"),
        ("no", "condition_false", None),
        ("plain", "fired", None),
        ("yes", "fired", None),
    ]
    failing.delete()
    seen.clear()
    remove(det, "rule_run", observe)
    det.signal("E")
    assert seen == []


def test_a_rule_check_rejects_before_anything_is_applied() -> None:
    det = LocalEventDetector()
    det.explicit("E")

    def no_deferred(rule: Any) -> None:
        if str(rule.coupling) == "deferred":
            raise RuleDefinitionError(f"{rule.name}: no deferred rules here")

    listen(det, "define_rule", no_deferred)
    with pytest.raises(RuleDefinitionError, match="no deferred"):
        det.rule("r", "E", action=print, coupling="deferred")
    assert "r" not in det.rules
    assert not det.channel("E").listened
    det.rule("r", "E", action=print)
    remove(det, "define_rule", no_deferred)
    det.rule("r2", "E", action=print, coupling="deferred")


def test_class_watchers() -> None:
    det = LocalEventDetector()
    got: list[list[type]] = []

    class Early(Reactive, detector=det):
        @event
        def go(self) -> None: ...

    assert Early in attached_classes(det)
    listen(det, "classes_attached", got.append)

    class Late(Reactive, detector=det):
        @event
        def go(self) -> None: ...

    assert got == [[Late]]
    remove(det, "classes_attached", got.append)

    class Later(Reactive, detector=det):
        pass

    assert got == [[Late]]


def test_a_failing_rule_on_txn_begin_dooms_the_transaction(orm: ORM) -> None:
    orm.attach()

    def fail(occ: Any) -> None:
        raise RuntimeError("no transactions today")

    orm.det.rule("gate", "txn:begin", action=fail)
    s = orm.Session()
    s.add(orm.model.Stock(name="IBM"))
    with pytest.raises(RollbackOnlyError, match="'gate'"):
        s.commit()
    s.rollback()
    s.close()
    with orm.Session() as s:
        assert s.query(orm.model.Stock).count() == 0


def test_a_failing_rule_on_txn_commit_does_not_undo_the_commit(
    orm: ORM, caplog: pytest.LogCaptureFixture
) -> None:
    orm.attach()

    def fail(occ: Any) -> None:
        raise RuntimeError("too late")

    orm.det.rule("after", "txn:commit", action=fail)
    orm.add_stocks("IBM")  # commits, and the session closes normally
    assert "a rule on txn:commit" in caplog.text
    with orm.Session() as s:
        assert s.query(orm.model.Stock).count() == 1
    assert [(f.rule, f.status) for f in orm.firings()] == [("after", "failed")]
