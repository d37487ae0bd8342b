"""Ode events as events of the detector: inside Snoop expressions, keyed, in rules
of every coupling, in transactions and savepoints, over method events."""

from __future__ import annotations

from typing import Any

import pytest

from sentinel import (
    SOURCE,
    Astar,
    ExpressionError,
    LocalEventDetector,
    Reactive,
    event,
    ode,
    on,
    param,
    parse,
)
from tests.ode.brute import evaluate, history
from tests.ode.helpers import History


def test_an_ode_event_is_an_operand_of_snoop_operators() -> None:
    h = History(["a", "b", "c"])
    # Over a and b only (the events it names): the c at 5 is not a point, so
    # a(4) b(6) is a sequence.
    pair = ode.event("sequence(a, b)")
    seq = h.watch("seq", pair >> h.ev["c"], context="chronicle")
    star = h.watch("star", Astar(h.ev["c"], pair, h.ev["c"]))
    h.run(["a", "b", "c", "a", "c", "b", "a", "b", "c"])
    assert [(d.parts[0].t_occ, d.t_occ) for d in seq] == [(2, 3), (6, 9)]
    # A*(c, pair, c): no pair between the c at 3 and the c at 5; two before 9.
    assert [[p.t_occ for p in d.parts[1:-1]] for d in star] == [[], [6, 8]]


def test_snoop_text_embeds_ode_and_the_detector_resolves_its_names() -> None:
    h = History(["a", "b", "c"])
    found = h.watch("r", "c ; ode{prior(a, b) over (a, b, c)}")
    h.run(["c", "a", "b", "a", "c", "b"])
    assert [d.t_occ for d in found] == [3, 6]
    assert str(found[0].expression) == "c ; ode{prior(a, b) over (a, b, c)}"


def test_a_bare_term_is_an_event_over_the_events_it_names() -> None:
    h = History(["a", "b", "c"])
    found = h.watch("r", ode.sequence(h.ev["a"], h.ev["b"]))
    h.run(["a", "c", "b", "a", "b"])  # c is not in the universe: a and b are adjacent
    assert [d.t_occ for d in found] == [3, 5]


def test_keyed_ode_events_read_one_history_per_key() -> None:
    h = History(["a", "b"])
    names = ["a", "a", "b", "b", "a", "b"]
    keys = [1, 2, 2, 1, 1, 1]
    found = h.watch("r", ode.event("sequence(a, b)").by("k"))
    h.run([(n, {"k": k}) for n, k in zip(names, keys, strict=True)])
    expected = []
    for k in (1, 2):
        pts = [i for i, kk in enumerate(keys) if kk == k]
        sub = history([names[i] for i in pts])
        expected += [pts[p] + 1 for p in evaluate(ode.term("sequence(a, b)"), sub)]
    assert sorted(d.t_occ for d in found) == sorted(expected) == [3, 4, 6]


def test_deferred_rules_run_once_at_commit_with_every_detection() -> None:
    h = History(["a", "b"])
    found = h.watch("r", ode.event("prior(a, b)"), coupling="deferred")
    with h.det.transaction():
        h.run(["a", "b", "b"])
        assert found == []
    (d,) = found
    # txn:begin is 1: both detections (at the b's, 3 and 4), the net effect.
    assert [p.t_occ for p in d.parts] == [3, 4]


def test_a_transaction_is_a_history_of_its_own() -> None:
    h = History(["a", "b"])
    found = h.watch("r", ode.event("first ^ b"))
    with h.det.transaction():
        h.run(["a"])
    with h.det.transaction():
        h.run(["b"])  # the first point of this transaction's history
    assert len(found) == 1


def test_rules_across_transactions_share_one_history() -> None:
    h = History(["a", "b"])
    found = h.watch("r", ode.event("prior(a, b)"), flush=False)
    with h.det.transaction():
        h.run(["a"])
    with h.det.transaction():
        h.run(["b"])
    assert len(found) == 1


def test_a_savepoint_rollback_restores_the_automaton() -> None:
    h = History(["a", "b"])
    found = h.watch("r", ode.event("sequence(a, b)"))
    scope = h.det.begin()
    with h.det.use_scope(scope):
        h.run(["a"])
        token = scope.savepoint()
        h.run(["a", "a"])
        scope.rollback_to(token)
        h.run(["b"])
    assert [d.t_occ for d in found] == [5]  # the a at 2 is followed by this b


def test_a_savepoint_rollback_restores_attribute_rows() -> None:
    h = History(["order", "perform"])
    found = h.watch("r", ode.event("sequence(order(account = I), perform(account = I))"))
    scope = h.det.begin()
    with h.det.use_scope(scope):
        h.run([("order", {"account": 1})])
        token = scope.savepoint()
        h.run([("perform", {"account": 2})])  # breaks "immediately" for account 1
        scope.rollback_to(token)
        h.run([("perform", {"account": 1})])
    assert [ode.binding(d) for d in found] == [{"I": 1}]


def test_equal_ode_events_are_one_node() -> None:
    h = History(["a", "b"])
    h.watch("r1", ode.event("prior(a, b)"))
    h.watch("r2", "ode{prior(a, b)} ; a")
    lines = h.det.graph.describe()
    assert sum("OdeHandler" in line for line in lines) == 1
    assert any("(refs 2)" in line and "states" in line for line in lines)


def test_masks_on_snoop_primitives() -> None:
    h = History(["deposit", "withdraw"])
    big = h.ev["deposit"].where(param("amount") > 1000)
    found = h.watch("r", big >> h.ev["withdraw"])
    h.run(
        [
            ("deposit", {"amount": 5000}),
            ("deposit", {"amount": 10}),
            ("withdraw", {"amount": 1}),
        ]
    )
    # Recent context: the small deposit is hidden by the mask, so the withdraw
    # pairs with the large one (a rule condition could not do that).
    assert [d.constituents[0].params["amount"] for d in found] == [5000]


def test_a_mask_with_an_attribute_variable_is_refused_in_snoop() -> None:
    h = History(["a", "b"])
    before = h.det.graph.describe()
    with pytest.raises(ExpressionError, match="attribute variable"):
        h.det.rule("r", h.ev["a"].where(k=ode.attribute("I")) >> h.ev["b"], action=print)
    assert h.det.graph.describe() == before and "r" not in h.det.rules


def test_the_record_of_an_ode_detection_reaches_the_rule() -> None:
    h = History(["deposit", "withdraw", "interest"])
    text = "relative(deposit, !before(interest)) ^ withdraw"
    found = h.watch("r", ode.event(text))
    h.run(["deposit", "interest", "deposit", "withdraw"])
    (d,) = found
    # The deposit at 3 (the latest one with no interest since), the withdraw.
    assert [c.t_occ for c in d.constituents] == [3, 4]
    assert ode.explain(d).splitlines()[0].startswith("ode{relative(deposit")


class TestMethodEvents:
    @pytest.fixture
    def det(self) -> LocalEventDetector:
        return LocalEventDetector()

    @pytest.fixture
    def Account(self, det: LocalEventDetector) -> Any:
        class Account(Reactive, detector=det):
            def __init__(self, n: int) -> None:
                self.n = n

            @event
            def deposit(self, amount: int) -> None:
                pass

            @event
            def withdraw(self, amount: int) -> None:
                pass

        return Account

    def test_class_and_instance_level_events_of_one_call_are_one_point(
        self,
        det: LocalEventDetector,
        Account: Any,
    ) -> None:
        a1, a2 = Account(1), Account(2)
        any_deposit = Account.deposit.end
        mine = on(a1).deposit.end
        found: list[Any] = []
        # The second point of the history is a deposit on a1: one call of
        # a1.deposit matches both events, and is one point.
        det.rule("r", ode.event(ode.nth(2, any_deposit) & mine), action=found.append)
        a1.deposit(5)
        a1.deposit(6)
        a2.deposit(7)
        assert [d.constituents[-1].params["amount"] for d in found] == [6]

    def test_a_mask_on_a_method_event_in_snoop(
        self,
        det: LocalEventDetector,
        Account: Any,
    ) -> None:
        found: list[Any] = []
        big = Account.deposit.end.where(param("amount") > 100)
        det.rule("r", (big >> Account.withdraw.end).by(SOURCE), action=found.append)
        a = Account(1)
        a.deposit(500)
        a.deposit(5)  # hidden by the mask: the withdrawal pairs with the 500
        a.withdraw(1)
        assert [d.constituents[0].params["amount"] for d in found] == [500]
        assert str(big).endswith(".deposit:end[amount > 100]")

    def test_a_universe_of_all_of_a_class_events(
        self,
        det: LocalEventDetector,
        Account: Any,
    ) -> None:
        dep, wd = Account.deposit.end, Account.withdraw.end
        immediately = ode.event(ode.sequence(dep.where("amount > 100"), wd), over=[dep, wd])
        found: list[Any] = []
        det.rule("r", immediately.by(SOURCE), action=found.append)
        a1, a2 = Account(1), Account(2)
        a1.deposit(500)
        a2.deposit(1)
        a1.withdraw(10)  # a1's history: deposit(500), withdraw: immediately
        a2.withdraw(10)  # a2's deposit is small
        a1.deposit(200)
        a1.deposit(5)
        a1.withdraw(1)  # a small deposit in between
        assert [d.constituents[0].params["amount"] for d in found] == [500]


def test_parse_reads_ode_blocks_back() -> None:
    e = parse("E1[v > 4] ; ode{prior(E1, E2[k == 1]) over (E1, E2, E3)} by k")
    assert parse(str(e)) == e


def test_the_firing_log_records_why_an_ode_event_fired() -> None:
    from sentinel.log.records import Firing

    h = History(["D", "I", "x"])
    found = h.watch("cut", ode.event("(I || D) | sequence(D, D, D) over (D, I, x)"))
    with h.det.transaction() as scope:
        h.run(["x", "D", "x", "I", "x", "D", "x", "D", "x", "D"])
    (d,) = found
    firing = Firing.of("cut", d, coupling="immediate", status="fired")
    # txn:begin is 1: the three cuts after the increase, at 7, 9 and 11.
    assert firing.constituents == ((scope.id, 7), (scope.id, 9), (scope.id, 11))


def test_named_ode_events_are_used_by_name_in_other_expressions() -> None:
    h = History(["floor", "front", "wall", "h1"])
    h.det.define("Twice", ode.event("sequence(floor, floor) || sequence(front, front)"))
    outer = h.det.expression("ode{!wall | (Twice | first) /+ h1}")
    # Twice's universe (floor, front) joins the one of the outer expression.
    assert sorted(u.name for u in outer.universe) == ["floor", "front", "h1", "wall"]
    found = h.watch("r", outer)
    h.run(["h1", "front", "wall", "front", "floor"])
    assert [d.t_occ for d in found] == [4]


def test_sentinel_graph_shows_automaton_sizes() -> None:
    from click.testing import CliRunner

    from sentinel.cli import main

    result = CliRunner().invoke(main, ["graph", "--rules", "tests.ode.test_integration:cut_rules"])
    assert result.exit_code == 0, result.output
    assert "OdeHandler" in result.output and "4 states, 3 symbols" in result.output


def cut_rules() -> LocalEventDetector:
    det = LocalEventDetector()
    for n in ("D", "I", "x"):
        det.explicit(n)
    det.rule("cut", ode.event("(I || D) | sequence(D, D, D) over (D, I, x)"), action=print)
    return det


def test_detections_and_events_survive_pickling() -> None:
    import pickle

    h = History(["order", "perform"])
    e = ode.event("prior(order(account = I), perform(account = I)[qty > 1]) over (order, perform)")
    found = h.watch("r", e)
    h.run([("order", {"account": 1}), ("perform", {"account": 1, "qty": 2})])
    assert pickle.loads(pickle.dumps(e)) == e
    (d,) = found
    back = pickle.loads(pickle.dumps(d))
    assert back == d and ode.binding(back) == {"I": 1}


def test_sentinel_graph_draws_ode_nodes() -> None:
    from click.testing import CliRunner

    from sentinel.cli import main

    args = ["graph", "--rules", "tests.ode.test_integration:cut_rules", "--dot"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "ODE (recent)" in result.output and result.output.count("->") == 4
