"""What a partitioned rule's detection was partitioned by (issue 34: the log's
firing keys): one part per ``by`` at the top of the rule's event, outermost
first, read from the detection's constituents; nothing for a rule that is not
partitioned, nor for a deferred firing that combines several keys."""

from __future__ import annotations

from typing import Any

from sentinel import LocalEventDetector, Occurrence
from sentinel.occurrence import ObjectRef


def detector() -> LocalEventDetector:
    det = LocalEventDetector()
    for name in ("A", "B", "T"):
        det.explicit(name)
    return det


def runs(det: LocalEventDetector, name: str, event: str, **options: Any) -> list[Any]:
    seen: list[Any] = []
    rule = det.rule(name, event, action=lambda occ: seen.append(rule.partition(occ)), **options)
    return seen


def test_one_key_several_keys_an_object_and_none() -> None:
    det = detector()
    one = runs(det, "one", "(A ; B) by order_id")
    two = runs(det, "two", "((A ; B) by order_id) by region")
    plain = runs(det, "plain", "A ; B")
    inner = runs(det, "inner", "((A ; B) by order_id) | T")  # not partitioned at the top
    det.signal("A", order_id=7, region="EU")
    det.signal("B", order_id=7, region="EU")
    assert one == [(("B", "order_id", 7),)] or one == [(("A", "order_id", 7),)]
    assert two[0] in (
        (("A", "region", "EU"), ("A", "order_id", 7)),
        (("B", "region", "EU"), ("B", "order_id", 7)),
    )
    assert plain == [()] and inner == [()]
    rules = det.rules
    assert rules["two"].partition_keys == ("region", "order_id")
    assert rules["plain"].partition_keys == ()


def test_by_source_reads_the_source_object() -> None:
    det = detector()
    rule = det.rule("r", "((A ; B) by @source) by k", action=print)
    order = ObjectRef("Order", (7,))
    a = Occurrence("A", 1, 0.0, 0.0, order, {"k": "x"}, "tx")
    anonymous = Occurrence("B", 2, 0.0, 0.0, None, {"k": "x"}, "tx")
    assert rule.partition_keys[1] is not None and rule.partition_keys[0] == "k"
    assert rule.partition_of([anonymous, a]) == (("A", "k", "x"), ("A", None, order))


def test_the_first_constituent_carrying_the_key_gives_it() -> None:
    det = detector()
    rule = det.rule("r", "(A ; B) by k", action=print)
    a = Occurrence("A", 1, 0.0, params={"k": 1})
    b = Occurrence("B", 2, 0.0, params={"k": 1.0})  # equal: one partition
    t = Occurrence("T", 3, 0.0)  # a timer's occurrence carries no key
    assert rule.partition_of([t, a, b]) == (("A", "k", 1),)
    assert rule.partition_of([t]) == ()


def test_a_deferred_firing_of_several_keys_has_none() -> None:
    det = detector()
    seen = runs(det, "d", "(A ; B) by k", coupling="deferred")
    with det.transaction():
        det.signal("A", k=1)
        det.signal("B", k=1)
    with det.transaction():
        for k in (1, 2):
            det.signal("A", k=k)
            det.signal("B", k=k)
    assert seen == [(("A", "k", 1),), ()]
