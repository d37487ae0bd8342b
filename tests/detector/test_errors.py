"""What ``signal()`` says when it is handed something it cannot signal."""

from __future__ import annotations

from typing import Any

import pytest

from sentinel import LocalEventDetector
from sentinel.errors import UnknownEventError


@pytest.fixture
def det() -> LocalEventDetector:
    d = LocalEventDetector()
    d.explicit("order")
    d.define("order_twice", "order ; order")
    return d


@pytest.mark.parametrize("name", [42, None, ["order"]])
def test_a_name_that_is_not_a_string_is_named_as_such(det: LocalEventDetector, name: Any) -> None:
    """It was difflib's TypeError (or 'unhashable type') from inside the error."""
    with pytest.raises(UnknownEventError, match="an event is named by a string, not a"):
        det.signal(name)
    with pytest.raises(UnknownEventError, match="an event is named by a string, not a"):
        det.signal_at(name, 1.0)


def test_an_event_object_is_told_to_pass_its_name(det: LocalEventDetector) -> None:
    event = det.expression("order")
    with pytest.raises(UnknownEventError, match=r"not a Primitive \(pass its name: 'order'\)"):
        det.signal(event)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["txn:commit", "order_twice"])
def test_a_defined_event_that_is_not_explicit_is_not_called_unknown(
    det: LocalEventDetector, name: str
) -> None:
    """It said 'unknown event ... define it first', and defining it is refused."""
    with pytest.raises(UnknownEventError, match="it is defined, but not as an explicit event") as e:
        det.signal(name)
    assert str(e.value).startswith(f"cannot signal {name!r} in signal()")


def test_an_unknown_name_still_gets_suggestions(det: LocalEventDetector) -> None:
    with pytest.raises(UnknownEventError, match="did you mean 'order'"):
        det.signal("ordr")
    assert det.signal("order") is not None


@pytest.mark.parametrize("limit", [0, -1, 2.5, None, "5", True])
def test_a_cascade_limit_that_is_not_a_whole_number_of_levels_is_refused(limit: Any) -> None:
    """``None`` and ``"5"`` raised TypeError from a comparison; 2.5 was accepted
    and reported as "cascade depth 2.5"."""
    from sentinel.errors import RuleDefinitionError

    with pytest.raises(RuleDefinitionError, match="cascade_limit is a whole number of levels"):
        LocalEventDetector(cascade_limit=limit)


@pytest.mark.parametrize("at", [1e300, -1e300, 253_402_300_800.0, -62_135_596_801.0])
def test_an_occurrence_time_outside_the_years_1_to_9999_is_refused(at: float) -> None:
    """It was accepted, then ``occ.at`` raised OverflowError (and the log could
    not hold it)."""
    from sentinel.errors import OccurrenceTimeError

    det = LocalEventDetector()
    det.explicit("a")
    with pytest.raises(OccurrenceTimeError, match="it must fall in the years 1 to 9999"):
        det.signal_at("a", at)
    assert str(det.signal_at("a", 253_402_300_799.0).at) == "9999-12-31 23:59:59+00:00"


def test_define_primitive_and_rule_name_what_they_take() -> None:
    """Raw AttributeErrors before ('str' has no attribute 'label'; int has no
    attribute 'rule')."""
    import sentinel
    from sentinel.errors import ExpressionError, RuleDefinitionError

    with pytest.raises(ExpressionError, match="define_primitive\\(\\) takes a Primitive"):
        LocalEventDetector().define_primitive("a")  # type: ignore[arg-type]
    with pytest.raises(RuleDefinitionError, match="detector= is a LocalEventDetector, not int"):
        sentinel.rule("r", "a", detector=3)  # type: ignore[arg-type]
