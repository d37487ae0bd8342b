"""Calls a listened method takes as the plain method does: parameters named like
the wrapper's own, the object passed by name, an object of no reactive class
(``Mock(spec=...)``), and classes that were not set up."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

from sentinel import LocalEventDetector, Reactive, event, object_ref
from sentinel.errors import ReactiveError
from tests.reactive.conftest import Recorder


@pytest.fixture
def Registry(det: LocalEventDetector) -> Any:
    class Registry(Reactive, detector=det):
        @event("both")  # the general wrapper
        def register(self, instance: Any, owner: Any = None) -> Any:
            return instance

        @event
        def plain(self, instance: Any) -> Any:  # the generated end-only wrapper
            return instance

        @event
        @classmethod
        def make(cls, cls_: Any = None, *, instance: Any = None) -> Any:
            return instance

    return Registry


def test_a_parameter_named_instance_passes_by_keyword_while_listened(
    det: LocalEventDetector, Registry: Any
) -> None:
    rec = Recorder(det)
    r = Registry()
    assert r.register(instance=5) == 5
    assert r.register(instance=6, owner=1) == 6
    assert r.plain(instance=7) == 7
    assert Registry.make(instance=8) == 8
    assert [dict(o.params) for o in rec] == [
        {"instance": 5, "owner": None},
        {"instance": 5, "owner": None, "result": 5},
        {"instance": 6, "owner": 1},
        {"instance": 6, "owner": 1, "result": 6},
        {"instance": 7, "result": 7},
        {"cls_": None, "instance": 8, "result": 8},
    ]


def test_the_object_passed_by_name_signals_as_passed_by_position(
    det: LocalEventDetector, Registry: Any
) -> None:
    rec = Recorder(det)
    r = Registry()
    assert Registry.register(self=r, instance=1) == 1
    assert Registry.plain(self=r, instance=2) == 2
    assert rec.events() == [
        "Registry.register:begin",
        "Registry.register:end",
        "Registry.plain:end",
    ]
    assert {o.source for o in rec} == {object_ref(r)}
    with pytest.raises(
        TypeError, match=r"register\(\) missing 1 required positional argument: 'self'"
    ):
        Registry.register(instance=1)


def test_a_call_with_an_object_of_no_reactive_class_runs_unsignalled(
    det: LocalEventDetector,
) -> None:
    class Account(Reactive, detector=det):
        balance = 0

        @event
        def deposit(self, amount: int) -> int:
            self.balance += amount
            return self.balance

        @event("both")
        def withdraw(self, amount: int) -> int:
            self.balance -= amount
            return self.balance

    rec = Recorder(det)  # every event method is listened
    fake = mock.Mock(spec=Account)
    fake.balance = 10
    assert Account.deposit(fake, 5) == 15
    assert Account.withdraw(fake, 1) == 14

    class Plain:
        balance = 1

    assert Account.deposit(Plain(), 1) == 2  # type: ignore[arg-type]
    assert rec.events() == []
    Account().deposit(1)  # a real one still signals
    assert rec.events() == ["Account.deposit:end"]


def test_a_listened_classmethod_of_a_class_not_set_up_raises(det: LocalEventDetector) -> None:
    class A(Reactive, detector=det):
        @event
        @classmethod
        def make(cls) -> int:
            return 2

    class Forgetful:
        def __init_subclass__(cls, **kwargs: Any) -> None:
            pass  # forgets super().__init_subclass__(**kwargs)

    class B(Forgetful, A):
        pass

    assert B.make() == 2  # nothing listens: the plain classmethod
    Recorder(det)
    with pytest.raises(ReactiveError, match=r"B derives from a reactive class but was not set up"):
        B.make()
    assert A.make() == 2
