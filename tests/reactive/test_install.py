"""Silence is free: the wrapper is in the class only while something listens.

Unobserved, an event method is the plain function (no wrapper, no check); the
hub installs the wrapper when a rule's leaf (or an occurrence listener)
appears on one of its channels and removes it when the last one goes.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

from sentinel import LocalEventDetector, Reactive, event, on
from sentinel.detector.events import listen, remove
from sentinel.occurrence import finished
from sentinel.reactive import ReplacedMethodWarning
from tests.reactive.conftest import fired


def wrapped(cls: type, name: str = "set_price") -> bool:
    """Whether the class holds sentinel's wrapper (which keeps the method as
    ``__wrapped__``) rather than the plain function."""
    value = cls.__dict__[name]
    return getattr(value, "__wrapped__", None) is not None


@pytest.fixture
def classes(det: LocalEventDetector) -> tuple[type, type]:
    class Stock(Reactive, detector=det):
        @event("both")
        def set_price(self, price: Any) -> None:
            self.price = price

        @event
        def sell_stock(self, qty: int) -> None: ...

    class SubStock(Stock):
        pass

    return Stock, SubStock


def test_plain_functions_until_a_rule_listens(det: LocalEventDetector, classes: Any) -> None:
    Stock, SubStock = classes
    plain = Stock.__dict__["set_price"], SubStock.__dict__["set_price"]
    assert not wrapped(Stock) and not wrapped(SubStock)
    r = det.rule("r", Stock.set_price.begin, action=lambda o: None)
    assert wrapped(Stock) and wrapped(SubStock)
    assert not wrapped(Stock, "sell_stock")  # nobody listens to that one
    r.disable()
    assert not wrapped(Stock) and not wrapped(SubStock)
    assert (Stock.__dict__["set_price"], SubStock.__dict__["set_price"]) == plain
    r.enable()
    assert wrapped(Stock)
    r.delete()
    assert not wrapped(Stock)


def test_any_phase_or_level_makes_the_method_listened(
    det: LocalEventDetector, classes: Any
) -> None:
    Stock, SubStock = classes
    for expr in (
        Stock.set_price.end,
        SubStock.set_price.begin,
        on(Stock()).set_price.end,
        "Stock.set_price:begin ; Stock.sell_stock:end",
    ):
        r = det.rule("r", expr, action=lambda o: None)
        assert wrapped(Stock) and wrapped(SubStock)
        r.delete()
        assert not wrapped(Stock) and not wrapped(SubStock)


def test_two_rules_on_one_method(det: LocalEventDetector, classes: Any) -> None:
    Stock, _ = classes
    r1 = det.rule("r1", Stock.set_price.begin, action=lambda o: None)
    r2 = det.rule("r2", Stock.set_price.end, action=lambda o: None)
    r1.delete()
    assert wrapped(Stock)
    r2.delete()
    assert not wrapped(Stock)


def test_an_occurrence_listener_wraps_every_event_method(
    det: LocalEventDetector, classes: Any
) -> None:
    Stock, _ = classes
    seen: list[Any] = []

    def record(o: Any) -> None:
        seen.append(finished(o))

    listen(det, "occurrence", record)
    assert wrapped(Stock) and wrapped(Stock, "sell_stock")
    Stock().sell_stock(1)
    assert [o.event for o in seen] == ["Stock.sell_stock:end"]
    remove(det, "occurrence", record)
    assert not wrapped(Stock) and not wrapped(Stock, "sell_stock")


def test_a_subclass_created_while_listened_is_wrapped(
    det: LocalEventDetector, classes: Any
) -> None:
    Stock, _ = classes
    got = fired(det, "r", Stock.set_price.end)

    class Late(Stock):
        pass

    assert wrapped(Late)
    Late().set_price(1)
    assert len(got) == 1


def test_no_payload_is_built_for_a_call_nobody_needs(det: LocalEventDetector, classes: Any) -> None:
    # The only listener is an instance-level rule on another object: the wrapper
    # is installed, decides the call is not needed, and never looks at the
    # arguments (an unloggable one would otherwise raise).
    Stock, _ = classes
    other, mine = Stock(), Stock()
    got = fired(det, "r", on(other).set_price.end)
    assert wrapped(Stock)
    unloggable = object()
    mine.set_price(unloggable)
    assert mine.price is unloggable
    assert got == []
    other.set_price(2)
    assert len(got) == 1


def test_a_patched_method_is_left_alone(det: LocalEventDetector, classes: Any) -> None:
    Stock, _ = classes
    with mock.patch.object(Stock, "set_price") as patched:
        with pytest.warns(ReplacedMethodWarning, match="replaced in its class"):
            r = det.rule("r", on(Stock).set_price.begin, action=lambda o: None)
        assert Stock.__dict__["set_price"] is patched
        r.delete()
        assert Stock.__dict__["set_price"] is patched
    assert not wrapped(Stock)


def test_classes_of_another_detector_are_not_touched(det: LocalEventDetector, classes: Any) -> None:
    Stock, _ = classes
    other = LocalEventDetector()

    class Bond(Reactive, detector=other):
        @event
        def set_price(self, price: float) -> None: ...

    det.rule("r", Stock.set_price.end, action=lambda o: None)
    assert wrapped(Stock) and not wrapped(Bond)
    other.rule("r", Bond.set_price.end, action=lambda o: None)
    assert wrapped(Bond)


def test_a_listened_method_keeps_its_handles(det: LocalEventDetector, classes: Any) -> None:
    Stock, SubStock = classes
    begin = SubStock.set_price.begin
    det.rule("r", Stock.set_price.end, action=lambda o: None)
    assert SubStock.set_price.begin == begin
    assert SubStock().set_price.begin == begin
