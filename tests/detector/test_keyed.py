"""Correlation by key: ``E by param`` and ``E by @source`` keep detection state per
key value, so only occurrences with equal keys combine."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest

from sentinel import SOURCE, Context, LocalEventDetector, ObjectRef, SentinelError
from sentinel.algebra import Keyed, parse
from sentinel.detector import Store


@pytest.fixture
def det() -> LocalEventDetector:
    d = LocalEventDetector()
    for name in ("order", "payment", "ship"):
        d.explicit(name)
    return d


def partitions(det: LocalEventDetector) -> dict[Any, Store]:
    (rid,) = det.graph.routers.values()
    state = det.process_scope.store.get(rid)
    return state[0] if state else {}


@pytest.mark.parametrize("context", list(Context))
def test_an_order_followed_by_a_payment_for_the_same_order(
    det: LocalEventDetector, context: Context
) -> None:
    seen: list[Any] = []
    det.rule("paid", "(order ; payment) by order_id", action=seen.append, context=context)
    det.signal("order", order_id=1)
    det.signal("order", order_id=2)
    det.signal("payment", order_id=2)
    det.signal("payment", order_id=3)
    det.signal("payment", order_id=1)
    assert [o.values("order_id") for o in seen] == [(2, 2), (1, 1)]


def test_partitions_are_created_on_first_use_and_released_when_empty(
    det: LocalEventDetector,
) -> None:
    det.rule("paid", "(order ; payment) by order_id", action=print, context="chronicle")
    det.signal("payment", order_id=9)  # a terminator with nothing to pair: no state
    assert partitions(det) == {}
    det.signal("order", order_id=1)
    det.signal("order", order_id=2)
    assert set(partitions(det)) == {1, 2}
    det.signal("payment", order_id=1)
    assert set(partitions(det)) == {2}
    det.signal("payment", order_id=2)
    assert partitions(det) == {}


@pytest.mark.parametrize("context", list(Context))
def test_a_terminator_with_nothing_pending_makes_no_partition(
    det: LocalEventDetector, context: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sequence's terminator on a key with no partition neither stores nor
    detects, so the generated leaf does not make (and release) a partition for
    it: the handler's state is never made. Its detections are unchanged."""
    seen: list[Any] = []
    det.rule("paid", "(order ; payment) by order_id", action=seen.append, context=context)
    (handler,) = (h for h in det.graph.handlers.values() if "payment" in str(h.expr))
    made: list[int] = []
    factories = det.graph.factories
    new_state = factories[handler.hid]
    monkeypatch.setitem(factories, handler.hid, lambda: made.append(1) or new_state())
    det.signal("payment", order_id=9)
    det.signal("payment", order_id=9)
    assert made == [] and partitions(det) == {}
    det.signal("order", order_id=9)
    det.signal("payment", order_id=9)
    assert made == [1]
    assert [o.values("order_id") for o in seen] == [(9, 9)]


@pytest.mark.parametrize("context", list(Context))
def test_a_partition_whose_detections_are_stored_outside_it_is_released(
    det: LocalEventDetector, context: Context
) -> None:
    """A keyed expression whose occurrences are kept outside its partitions
    (here by SEQ's initiator, fed by the keyed OR) leaves no partition behind:
    only a store into the partition's own state keeps a partition."""
    det.rule("any", "((order | payment) by order_id) ; ship", action=print, context=context)
    det.signal("order", order_id=1)
    assert partitions(det) == {}
    det.signal("ship")
    assert partitions(det) == {}


@pytest.mark.parametrize("compiled", [True, False], ids=["generated leaves", "wired graph"])
def test_a_partition_store_is_a_store_like_any_other(
    det: LocalEventDetector, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The generated leaves make a new key's store without calling ``Store``;
    it must hold what ``Store(factories, parent)`` holds."""
    monkeypatch.setattr(type(det.graph), "compile", compiled)
    det.rule("paid", "(order ; payment) by order_id", action=print, context="chronicle")
    det.signal("order", order_id=1)
    (sub,) = partitions(det).values()
    made = Store(det.graph.factories, det.process_scope.store)
    assert type(sub) is Store
    for slot in Store.__slots__:
        assert getattr(sub, slot, "unset") is getattr(made, slot, "unset"), slot


def test_recent_partitions_live_while_they_hold_an_initiator(det: LocalEventDetector) -> None:
    det.rule("paid", "(order ; payment) by order_id", action=print)
    det.signal("order", order_id=1)
    det.signal("payment", order_id=1)
    assert set(partitions(det)) == {1}  # recent keeps its initiator


def test_rule_key_option_is_the_same_as_by(det: LocalEventDetector) -> None:
    r = det.rule("paid", "order ; payment", action=print, key="order_id")
    assert r.event == parse("(order ; payment) by order_id")


def test_partition_by_source_object(det: LocalEventDetector) -> None:
    seen: list[Any] = []
    ch_order = det.channel("order")
    det.rule(
        "same",
        (det.event("order") >> det.event("payment")).by(SOURCE),
        action=seen.append,
        context="chronicle",
    )
    ibm, dec = ObjectRef("Stock", (1,)), ObjectRef("Stock", (2,))
    det.notify(ch_order, {}, source=ibm)
    det.notify(ch_order, {}, source=dec)
    det.notify(det.channel("payment"), {}, source=dec)
    (occ,) = seen
    assert {c.source for c in occ.constituents} == {dec}


def test_occurrences_without_the_key_do_not_take_part(det: LocalEventDetector) -> None:
    seen: list[Any] = []
    det.rule("paid", "(order ; payment) by order_id", action=seen.append)
    det.signal("order")
    det.signal("payment")
    det.signal("order", order_id=None)
    det.signal("payment", order_id=None)
    assert [o.values("order_id") for o in seen] == [(None, None)]


def test_unhashable_key_value_is_a_clear_error(det: LocalEventDetector) -> None:
    det.rule("paid", "(order ; payment) by order_id", action=print)
    with pytest.raises(SentinelError, match="not hashable"):
        det.signal("order", order_id=[1, 2])


@pytest.mark.parametrize("nan", [math.nan, Decimal("NaN")], ids=["float", "decimal"])
def test_nan_key_value_is_a_clear_error(det: LocalEventDetector, nan: Any) -> None:
    """A NaN equals nothing: live, the same object (``math.nan``) would find its
    partition by identity and pair, replay (a fresh NaN decoded from the log)
    would not, and other NaNs would each hold a partition nothing completes.
    Refused on the way in, where a partition would be made or looked for."""
    seen: list[Any] = []
    det.rule("paid", "(order ; payment) by order_id", action=seen.append)
    with pytest.raises(SentinelError, match="equals nothing, itself included"):
        det.signal("order", order_id=nan)
    with pytest.raises(SentinelError, match="equals nothing, itself included"):
        det.signal("payment", order_id=nan)  # a slot idle on an empty partition
    det.signal("order", order_id=1.0)
    det.signal("payment", order_id=True)  # equal keys, as Python compares them
    assert [o.values("order_id") for o in seen] == [(1.0, True)]


def test_keyed_and_unkeyed_detection_of_one_expression_are_separate(
    det: LocalEventDetector,
) -> None:
    keyed: list[Any] = []
    plain: list[Any] = []
    det.rule("keyed", "(order ; payment) by order_id", action=keyed.append, context="chronicle")
    det.rule("plain", "order ; payment", action=plain.append, context="chronicle")
    det.signal("order", order_id=1)
    det.signal("payment", order_id=2)
    assert keyed == [] and len(plain) == 1


def test_nested_partitions(det: LocalEventDetector) -> None:
    seen: list[Any] = []
    # per customer: an order followed by a shipment of the same order
    det.rule(
        "r",
        "((order ; ship) by order_id ; payment) by customer",
        action=seen.append,
        context="chronicle",
    )
    det.signal("order", customer="a", order_id=1)
    det.signal("ship", customer="a", order_id=2)  # different order: no
    det.signal("ship", customer="a", order_id=1)
    det.signal("payment", customer="b", order_id=1)  # different customer: no
    det.signal("payment", customer="a", order_id=1)
    (occ,) = seen
    assert occ.values("customer") == ("a", "a", "a")
    assert det.stored() == 0


def test_a_repeated_event_inside_a_partition(det: LocalEventDetector) -> None:
    # order ; order by customer: two orders of one customer (a buffered node)
    seen: list[Any] = []
    det.rule("twice", "(order ; order) by customer", action=seen.append, context="chronicle")
    for c in ["a", "b", "a", "b", "a"]:
        det.signal("order", customer=c)
    assert [o.values("customer") for o in seen] == [("a", "a"), ("b", "b"), ("a", "a")]


def test_text_round_trip_of_keys() -> None:
    for text in ["(A ; B) by order_id", "A ; B by @source", "((A ; B) by x ; C) by y"]:
        e = parse(text)
        assert parse(str(e)) == e
    assert isinstance(parse("A by @source"), Keyed)
