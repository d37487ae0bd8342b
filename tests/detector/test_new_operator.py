"""Adding a call-form operator takes its expression class and its strategy, and
nothing else: docs/architecture.md, "To add an operator", walks through this
module. The operator is a toy defined here, ``SINCE(E1, E2)``: each E2 once an
E1 has occurred, with the most recent E1 (which stays, in every context).

In the tree the two halves would be two files, ``sentinel/algebra/since.py``
and ``sentinel/detector/operators/since.py``, plus one line in
``sentinel/__init__.py`` exporting ``Since``.
"""

from __future__ import annotations

import typing as t

import pytest

from sentinel import Context, LocalEventDetector, Occurrence, parse
from sentinel.algebra.expressions import And, Expression, Primitive, Seq
from sentinel.detector.events import listen
from sentinel.detector.operators import Handler, handler_class, strategy
from sentinel.detector.scopes import Store
from sentinel.errors import ExpressionError, SnoopSyntaxError
from sentinel.occurrence import finished
from sentinel.replay import log_table, replay
from sentinel.replay.rules import rule_events

# -- the expression class (sentinel/algebra/since.py) ------------------------------------


class Since(Expression):
    """``SINCE(E1, E2)``: each E2 once an E1 has occurred, with the latest E1."""

    __slots__ = ()
    op = "SINCE"
    keywords = ("SINCE",)  # Snoop text calls it SINCE(E1, E2) ...
    call_arity = 2  # ... with two event expressions (the default from_call)
    reads_parameters = False  # detection never looks at parameters
    strategies = __name__  # the module whose import registers its strategy

    def __init__(self, first: Expression, then: Expression) -> None:
        for e in (first, then):
            if not isinstance(e, Expression):
                raise ExpressionError(f"SINCE takes event expressions, not {e!r}")
        self._init(first, then)


# -- its strategy (sentinel/detector/operators/since.py) ---------------------------------


@strategy(Since)  # the same in every context
class SinceHandler(Handler):
    """Slot 0 keeps the latest E1; each E2 on slot 1 pairs with it."""

    __slots__ = ()
    role_order = (1, 0)  # an E2 pairs only with E1s of earlier instants

    def new_state(self) -> list[t.Any]:
        return [None]

    def on0(self, store: Store, occ: t.Any) -> None:
        store[self.hid][0] = occ

    def on1(self, store: Store, occ: t.Any) -> None:
        first = store[self.hid][0]
        if first is not None:
            self.emit(store, (self.expr, occ[1], (first, occ)))


# -- what it gets for that ----------------------------------------------------------------

E1, E2, E3 = Primitive("E1"), Primitive("E2"), Primitive("E3")


def test_a_new_call_form_operator_parses_and_prints_from_its_class() -> None:
    assert parse("SINCE(E1, E2 ^ E3)") == Since(E1, And(E2, E3))
    assert str(Since(E1, And(E2, E3))) == "SINCE(E1, E2 ^ E3)"
    assert str(Seq(Since(E1, E2), E3)) == "SINCE(E1, E2) ; E3"
    assert parse(str(Seq(Since(E1, E2), E3))) == Seq(Since(E1, E2), E3)


def test_a_new_operator_reports_misuse_at_its_keyword() -> None:
    with pytest.raises(SnoopSyntaxError, match="SINCE takes 2 event expression") as err:
        parse("E1 ; SINCE(E1)")
    assert (err.value.line, err.value.column) == (1, 6)
    with pytest.raises(SnoopSyntaxError, match="only NOT takes an interval in brackets"):
        parse("SINCE(E1, E2)[E1, E3]")
    with pytest.raises(SnoopSyntaxError, match=r"unknown operator UNTIL.*or SINCE"):
        parse("UNTIL(E1, E2)")


def test_a_keyword_names_one_operator() -> None:
    with pytest.raises(ExpressionError, match="keywords: A already names"):

        class Another(Expression):  # defining it is the test
            keywords = ("A",)


def _detector() -> tuple[LocalEventDetector, list[str], list[Occurrence]]:
    det = LocalEventDetector()
    log: list[Occurrence] = []
    listen(det, "occurrence", lambda o: log.append(finished(o)))
    for name in ("E1", "E2"):
        det.explicit(name)
    seen: list[str] = []
    det.rule(
        "since",
        "SINCE(E1, E2)",
        context=Context.CHRONICLE,
        action=lambda occ: seen.append(",".join(str(p.params["n"]) for p in occ.constituents)),
    )
    return det, seen, log


def test_a_new_operator_detects_with_its_registered_strategy() -> None:
    det, seen, _log = _detector()
    assert handler_class(Since(E1, E2), Context.CHRONICLE) is SinceHandler
    for name, n in [("E2", 1), ("E1", 2), ("E2", 3), ("E2", 4), ("E1", 5), ("E2", 6)]:
        det.signal(name, n=n)
    assert seen == ["2,3", "2,4", "5,6"]


def test_a_new_operator_replays_as_it_ran() -> None:
    det, seen, log = _detector()
    for name, n in [("E1", 1), ("E2", 2), ("E1", 3), ("E2", 4)]:
        det.signal(name, n=n)
    result = replay(log_table([(occ, None) for occ in log]), _detector()[0])
    assert [r["rule"] for r in result.rows()] == ["since", "since"] == ["since"] * len(seen)


def test_replay_keeps_the_parameters_an_operator_says_it_reads() -> None:
    det, _seen, _log = _detector()
    listened, keyed = rule_events(det.rules.values())
    assert listened == {"E1", "E2"}
    assert keyed == {}  # SINCE reads no parameters: replay may drop them

    class Reading(Since):  # the default: an operator reads every parameter
        __slots__ = ()
        reads_parameters = True

    strategy(Reading)(SinceHandler)
    det2 = LocalEventDetector()
    for name in ("E1", "E2"):
        det2.explicit(name)
    det2.rule(
        "reading", Reading(det2.expression("E1"), det2.expression("E2")), action=lambda o: None
    )
    assert rule_events(det2.rules.values())[1] == {"E1": None, "E2": None}
