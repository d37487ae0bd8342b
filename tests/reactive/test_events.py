"""What a call of an event method signals: occurrences, parameters, results,
failures, recursion and reentrancy."""

from __future__ import annotations

import enum
import functools
import inspect
from typing import Any

import pytest

from sentinel import (
    LocalEventDetector,
    ObjectRef,
    Occurrence,
    Reactive,
    RuleError,
    event,
    object_ref,
    rule,
)
from sentinel.errors import CascadeLimitError, UnloggableParameter
from tests.reactive.conftest import Recorder, fired


@pytest.fixture
def Stock(det: LocalEventDetector) -> type:
    class Stock(Reactive, detector=det):
        def __init__(self, name: str = "", price: float = 0.0) -> None:
            self.name = name
            self.price = price
            self.sold = 0

        @event(end="e1")
        def sell_stock(self, qty: int) -> int:
            self.sold += qty
            return self.sold

        @event(begin="e2", end="e3")
        def set_price(self, price: float) -> None:
            self.price = price

        def get_price(self) -> float:
            return self.price

    return Stock


class TestBeginAndEnd:
    def test_one_call_signals_begin_then_end(self, det: LocalEventDetector, Stock: Any) -> None:
        rec = Recorder(det)
        ibm = Stock("IBM")
        ibm.set_price(115.0)
        begin, end = rec.occurrences
        assert (begin.event, end.event) == ("Stock.set_price:begin", "Stock.set_price:end")
        assert begin.t_occ < end.t_occ
        assert dict(begin.params) == {"price": 115.0}
        assert dict(end.params) == {"price": 115.0, "result": None}
        assert begin.source == end.source == object_ref(ibm)
        assert begin.scope == det.process_scope.id

    def test_end_carries_the_return_value(self, det: LocalEventDetector, Stock: Any) -> None:
        got = fired(det, "r", Stock.sell_stock.end)
        ms = Stock("MS")
        assert ms.sell_stock(200) == 200
        assert ms.sell_stock(5) == 205
        assert [dict(o.params) for o in got] == [
            {"qty": 200, "result": 200},
            {"qty": 5, "result": 205},
        ]

    def test_methods_without_events_signal_nothing(
        self, det: LocalEventDetector, Stock: Any
    ) -> None:
        rec = Recorder(det)
        Stock("DEC").get_price()
        assert rec.occurrences == []

    def test_begin_event_precedes_the_body(self, det: LocalEventDetector, Stock: Any) -> None:
        prices: list[float] = []
        dec = Stock("DEC", 1.0)
        det.rule("r", Stock.set_price.begin, action=lambda o: prices.append(dec.price))
        dec.set_price(2.0)
        assert prices == [1.0]  # the body has not run yet

    def test_the_occurrence_reaches_the_scope_of_the_transaction(
        self, det: LocalEventDetector, Stock: Any
    ) -> None:
        got = fired(det, "r", Stock.set_price.end)
        with det.transaction() as scope:
            Stock().set_price(1.0)
        assert got[0].scope == scope.id


class TestParameters:
    @pytest.fixture
    def Shop(self, det: LocalEventDetector) -> type:
        class Shop(Reactive, detector=det):
            @event
            def order(
                self,
                item: str,
                qty: int = 1,
                *extras: Any,
                gift: bool = False,
                note: str = "",
                **options: Any,
            ) -> str:
                return f"{qty} {item}"

            @event
            def only(self, a: int, /, b: int = 2) -> int:
                return a + b

            @event(exclude=("callback",))
            def later(self, when: int, callback: Any) -> None:
                callback()

        return Shop

    def test_bound_by_name_with_defaults_applied(self, det: LocalEventDetector, Shop: Any) -> None:
        rec = Recorder(det)
        Shop().order("tea")
        assert dict(rec.occurrences[0].params) == {
            "item": "tea",
            "qty": 1,
            "extras": (),
            "gift": False,
            "note": "",
            "options": {},
            "result": "1 tea",
        }

    def test_varargs_keyword_only_and_kwargs(self, det: LocalEventDetector, Shop: Any) -> None:
        rec = Recorder(det)
        Shop().order("tea", 3, "cup", "saucer", gift=True, colour="red")
        p = rec.occurrences[0].params
        assert p["item"] == "tea" and p["qty"] == 3
        assert p["extras"] == ("cup", "saucer")
        assert p["gift"] is True
        assert dict(p["options"]) == {"colour": "red"}

    def test_keywords_for_positional_parameters(self, det: LocalEventDetector, Shop: Any) -> None:
        rec = Recorder(det)
        Shop().order(qty=2, item="jam")
        assert rec.occurrences[0].params["qty"] == 2
        assert rec.occurrences[0].params["item"] == "jam"

    def test_positional_only(self, det: LocalEventDetector, Shop: Any) -> None:
        rec = Recorder(det)
        assert Shop().only(1) == 3
        assert dict(rec.occurrences[0].params) == {"a": 1, "b": 2, "result": 3}

    def test_excluded_parameters_are_left_out(self, det: LocalEventDetector, Shop: Any) -> None:
        rec = Recorder(det)
        calls: list[int] = []
        Shop().later(5, lambda: calls.append(1))
        assert calls == [1]
        assert dict(rec.occurrences[0].params) == {"when": 5, "result": None}

    def test_parameters_with_any_name(self, det: LocalEventDetector) -> None:
        class Odd(Reactive, detector=det):
            @event
            def m(self, type: Any, _plain: Any, _normalize: Any = (1,), *_type: Any) -> None:
                pass

        rec = Recorder(det)
        Odd().m([1], "p", [2], [3])
        assert dict(rec.occurrences[0].params) == {
            "type": (1,),
            "_plain": "p",
            "_normalize": (2,),
            "_type": ((3,),),
            "result": None,
        }

    def test_parameters_named_like_the_wrappers_own_names(self, det: LocalEventDetector) -> None:
        # An end-only method's wrapper is generated with the method's parameter
        # list; its own locals and globals must not capture the parameters.
        class Odd(Reactive, detector=det):
            @event
            def m(self, _e: Any, _p: Any, _r: Any = 3, *, _owner: Any, _method: Any = 5) -> Any:
                return (_e, _p, _r, _owner, _method)

        seen: list[dict[str, Any]] = []
        det.rule("r", Odd.m.end, action=lambda occ: seen.append(dict(occ.params)))
        assert Odd().m(1, 2, _owner=4) == (1, 2, 3, 4, 5)
        assert seen == [
            {"_e": 1, "_p": 2, "_r": 3, "_owner": 4, "_method": 5, "result": (1, 2, 3, 4, 5)}
        ]

    def test_a_bad_call_raises_the_methods_own_type_error(
        self, det: LocalEventDetector, Shop: Any
    ) -> None:
        rec = Recorder(det)
        with pytest.raises(TypeError, match="order"):
            Shop().order()
        assert rec.occurrences == []

    def test_a_bad_call_says_what_the_bare_method_says(
        self, det: LocalEventDetector, Shop: Any
    ) -> None:
        Recorder(det)  # the wrapper is installed while something listens
        shop = Shop()
        bare = Shop.order.__wrapped__
        for call in (lambda f: f(shop), lambda f: f(shop, "tea", qty=2, item="jam")):
            with pytest.raises(TypeError) as wrapped_error:
                call(Shop.order)
            with pytest.raises(TypeError) as bare_error:
                call(bare)
            assert str(wrapped_error.value) == str(bare_error.value)

    def test_a_decorated_method_keeps_its_decorators_parameters(
        self, det: LocalEventDetector
    ) -> None:
        # functools.wraps gives the decorator's function the inner signature;
        # the wrapper must still call the decorator with what the caller passed.
        def logged(f: Any) -> Any:
            @functools.wraps(f)
            def inner(self: Any, *a: Any, verbose: bool = False, **k: Any) -> Any:
                return (verbose, len(a), f(self, *a, **k))

            return inner

        class A(Reactive, detector=det):
            @event
            @logged
            def m(self, x: int, y: int = 2) -> int:
                return x + y

        a = A()
        before = (a.m(1), a.m(1, verbose=True))
        rec = Recorder(det)
        assert (a.m(1), a.m(1, verbose=True)) == before == ((False, 1, 3), (True, 1, 3))
        # Parameters are bound by the method's own signature: the call that fits
        # only the decorator's runs, unsignalled (documented in reactive.md).
        assert [dict(o.params) for o in rec.occurrences] == [
            {"x": 1, "y": 2, "result": (False, 1, 3)}
        ]

    def test_a_first_parameter_with_a_default(self, det: LocalEventDetector) -> None:
        class A(Reactive, detector=det):
            @event
            def m(self: Any = None) -> str:
                return "ran"

        rec = Recorder(det)
        assert A().m() == "ran"
        assert len(rec.occurrences) == 1
        with pytest.raises(TypeError):
            A.m()  # no object: as the wrapper of any event method says

    def test_a_positional_only_self(self, det: LocalEventDetector) -> None:
        class Pos(Reactive, detector=det):
            @event
            def m(self, /, x: int, *, y: int = 1) -> int:
                return x + y

        rec = Recorder(det)
        assert Pos().m(2, y=3) == 5
        assert dict(rec.occurrences[0].params) == {"x": 2, "y": 3, "result": 5}
        assert inspect.signature(Pos.m) == inspect.signature(Pos.m.__wrapped__)
        assert "(self, /, x" in str(inspect.signature(Pos.m))

    def test_values_are_made_loggable(self, det: LocalEventDetector, Shop: Any) -> None:
        class Colour(enum.Enum):
            RED = "red"

        rec = Recorder(det)
        other = Shop()
        Shop().order(["a", "b"], colour=Colour.RED, partner=other, tags={"x": [1, 2]})
        p = rec.occurrences[0].params
        assert p["item"] == ("a", "b")
        assert p["options"]["colour"] == "red"
        assert p["options"]["partner"] == object_ref(other)
        assert isinstance(p["options"]["partner"], ObjectRef)
        assert dict(p["options"]["tags"]) == {"x": (1, 2)}

    def test_unloggable_argument_is_an_error_before_the_method_runs(
        self, det: LocalEventDetector
    ) -> None:
        ran: list[int] = []

        class Shop(Reactive, detector=det):
            @event
            def order(self, item: Any) -> None:
                ran.append(1)

        fired(det, "r", Shop.order.end)
        with pytest.raises(UnloggableParameter) as info:
            Shop().order(object())
        assert ran == []
        err = info.value
        assert (err.event, err.param) == ("Shop.order", "item")
        assert "parameter 'item' of Shop.order is a object" in str(err)

    def test_unloggable_result_names_result(self, det: LocalEventDetector) -> None:
        class Shop(Reactive, detector=det):
            @event
            def basket(self) -> Any:
                return object()

        fired(det, "r", Shop.basket.end)
        with pytest.raises(UnloggableParameter, match=r"parameter 'result' of Shop.basket"):
            Shop().basket()


class TestRaisingMethod:
    def test_no_end_event_and_the_exception_passes_unchanged(self, det: LocalEventDetector) -> None:
        class Account(Reactive, detector=det):
            @event("both")
            def withdraw(self, amount: int) -> int:
                if amount > 10:
                    raise ValueError("insufficient funds")
                return amount

        rec = Recorder(det)
        acct = Account()
        with pytest.raises(ValueError, match="insufficient funds") as info:
            acct.withdraw(50)
        assert type(info.value) is ValueError
        assert rec.events() == ["Account.withdraw:begin"]
        acct.withdraw(5)
        assert rec.events()[1:] == ["Account.withdraw:begin", "Account.withdraw:end"]

    def test_inside_a_transaction_the_error_aborts_it(self, det: LocalEventDetector) -> None:
        class Account(Reactive, detector=det):
            @event("both")
            def withdraw(self, amount: int) -> None:
                raise ValueError("no")

        rec = Recorder(det)
        with pytest.raises(ValueError), det.transaction():
            Account().withdraw(1)
        assert rec.events() == ["txn:begin", "Account.withdraw:begin", "txn:abort"]


class TestRecursionAndReentrancy:
    def test_a_method_that_calls_itself_signals_each_call(self, det: LocalEventDetector) -> None:
        class Maths(Reactive, detector=det):
            @event("both")
            def fact(self, n: int) -> int:
                return 1 if n <= 1 else n * self.fact(n - 1)

        rec = Recorder(det)
        assert Maths().fact(3) == 6
        assert [
            (o.event.rsplit(":", 1)[1], o.params["n"], o.params.get("result")) for o in rec
        ] == [
            ("begin", 3, None),
            ("begin", 2, None),
            ("begin", 1, None),
            ("end", 1, 1),
            ("end", 2, 2),
            ("end", 3, 6),
        ]

    def test_an_action_may_call_event_methods(self, det: LocalEventDetector, Stock: Any) -> None:
        # R_sell sells a share whenever a price is set; R_log (which runs first, by
        # priority) sees both events, the second nested inside R_sell's action.
        seen: list[tuple[str, bool]] = []
        inside = [False]

        def sell(occ: Occurrence) -> None:
            inside[0] = True
            ibm.sell_stock(1)
            inside[0] = False

        det.rule(
            "R_log",
            Stock.sell_stock.end | Stock.set_price.end,
            priority=10,
            action=lambda o: seen.append((o.event, inside[0])),
        )
        det.rule("R_sell", Stock.set_price.end, action=sell)
        ibm = Stock("IBM")
        ibm.set_price(3.0)
        assert ibm.sold == 1
        assert seen == [("Stock.set_price:end", False), ("Stock.sell_stock:end", True)]

    def test_an_action_calling_its_own_trigger_hits_the_cascade_limit(
        self, det: LocalEventDetector, Stock: Any
    ) -> None:
        det.rule("loop", Stock.set_price.end, action=lambda o: ibm.set_price(o.params["price"]))
        ibm = Stock("IBM")
        with pytest.raises(CascadeLimitError, match="'loop'"):
            ibm.set_price(1.0)

    def test_a_condition_calling_an_event_method_signals_nothing(
        self, det: LocalEventDetector, Stock: Any
    ) -> None:
        sells = fired(det, "sells", Stock.sell_stock.end)

        def cond(occ: Occurrence) -> bool:
            ibm.sell_stock(1)  # conditions are side-effect free for the detector
            return False

        det.rule("r", Stock.set_price.end, cond, action=lambda o: None)
        ibm = Stock("IBM")
        ibm.set_price(1.0)
        assert ibm.sold == 1
        assert sells == []


class TestClassAndStaticMethods:
    @pytest.fixture
    def Factory(self, det: LocalEventDetector) -> type:
        class Factory(Reactive, detector=det):
            @event("both")
            @classmethod
            def create(cls, name: str) -> Any:
                return cls()

            @event
            @staticmethod
            def check(code: str, strict: bool = True) -> bool:
                return bool(code)

        return Factory

    def test_classmethod_events_have_no_source(self, det: LocalEventDetector, Factory: Any) -> None:
        rec = Recorder(det)
        made = Factory.create("a")
        assert isinstance(made, Factory)
        begin, end = rec.occurrences
        assert begin.source is None and end.source is None
        assert dict(begin.params) == {"name": "a"}
        assert end.params["result"] == object_ref(made)

    def test_classmethod_class_level_events_follow_the_class(
        self, det: LocalEventDetector, Factory: Any
    ) -> None:
        class Sub(Factory):
            @classmethod
            def create(cls, name: str) -> Any:
                return super().create(name.upper())

        on_all = fired(det, "all", Factory.create.end)
        on_sub = fired(det, "sub", Sub.create.end)
        Factory.create("x")
        Sub.create("y")
        Sub().create("z")  # through an instance: still the class Sub
        # One event per call, with the arguments of the call the caller made (the
        # inner super() call signals nothing of its own).
        assert [o.params["name"] for o in on_all] == ["x", "y", "z"]
        assert [o.params["name"] for o in on_sub] == ["y", "z"]

    def test_staticmethod_events(self, det: LocalEventDetector, Factory: Any) -> None:
        rec = Recorder(det)
        assert Factory.check("x") is True
        assert Factory().check("", strict=False) is False
        assert [dict(o.params) for o in rec] == [
            {"code": "x", "strict": True, "result": True},
            {"code": "", "strict": False, "result": False},
        ]
        assert all(o.source is None for o in rec)


class TestRules:
    def test_conditions_and_actions_see_parameters_and_constituents(
        self, det: LocalEventDetector, Stock: Any
    ) -> None:
        got: list[Any] = []
        det.rule(
            "R",
            "Stock.e1 ^ Stock.e2",
            lambda occ: occ.of("Stock.sell_stock:end")[0].params["qty"] > 100,
            action=got.append,
        )
        ibm, ms = Stock("IBM"), Stock("MS")
        ibm.set_price(10.0)
        ms.sell_stock(50)
        ms.sell_stock(200)
        (occ,) = got
        assert occ.values("qty") == (200,)
        assert occ.values("price") == (10.0,)
        assert [c.source for c in occ.constituents] == [object_ref(ibm), object_ref(ms)]

    def test_snoop_text_names(self, det: LocalEventDetector, Stock: Any) -> None:
        r = det.rule("R", "Stock.set_price:begin ; Stock.e3", action=lambda o: None)
        assert r.event == Stock.set_price.begin >> Stock.set_price.end

    def test_the_rule_decorator_on_the_default_detector(
        self, sentinel_detector: LocalEventDetector
    ) -> None:
        class Meter(Reactive):  # follows the default detector: the test's
            @event
            def read(self, value: int) -> int:
                return value

        got: list[int] = []

        @rule("high", Meter.read.end, lambda o: o.params["value"] > 5)
        def high(occ: Occurrence) -> None:
            got.append(occ.params["value"])

        Meter().read(3)
        Meter().read(8)
        assert got == [8]
        assert sentinel_detector.rules["high"] is high

    def test_the_rule_decorator_with_an_explicit_detector(
        self, det: LocalEventDetector, Stock: Any
    ) -> None:
        got: list[Any] = []
        rule("r", Stock.sell_stock.end, detector=det, action=got.append)
        Stock().sell_stock(1)
        assert len(got) == 1

    def test_rule_errors_keep_the_cause(self, det: LocalEventDetector, Stock: Any) -> None:
        det.rule("bad", Stock.sell_stock.end, action=lambda o: 1 / 0)
        with pytest.raises(RuleError) as info:
            Stock().sell_stock(1)
        assert isinstance(info.value.__cause__, ZeroDivisionError)
