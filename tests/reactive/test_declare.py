"""Declaring event methods: the forms of @event, what the class keeps, bad input."""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

import pytest

from sentinel import LocalEventDetector, Reactive, event, on
from sentinel.errors import DuplicateEventError, ReactiveError
from tests.reactive.conftest import fired


def declared(cls: type, method: str) -> tuple[str, ...]:
    return on(cls).__getattr__(method).phases


class TestForms:
    def test_bare_decorator_declares_the_end_event(self, det: LocalEventDetector) -> None:
        class A(Reactive, detector=det):
            @event
            def m(self) -> None: ...

            @event()
            def n(self) -> None: ...

        assert declared(A, "m") == ("end",)
        assert declared(A, "n") == ("end",)

    @pytest.mark.parametrize(
        ("args", "kwargs", "phases"),
        [
            (("begin",), {}, ("begin",)),
            (("end",), {}, ("end",)),
            (("both",), {}, ("begin", "end")),
            ((), {"begin": True}, ("begin",)),
            ((), {"end": True}, ("end",)),
            ((), {"begin": True, "end": True}, ("begin", "end")),
            ((), {"begin": "e2", "end": "e3"}, ("begin", "end")),
        ],
    )
    def test_phases(
        self,
        det: LocalEventDetector,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        phases: tuple[str, ...],
    ) -> None:
        class A(Reactive, detector=det):
            @event(*args, **kwargs)
            def m(self) -> None: ...

        assert declared(A, "m") == phases

    def test_named_events_are_defined_on_the_detector(self, det: LocalEventDetector) -> None:
        class Stock(Reactive, detector=det):
            @event(end="e1")
            def sell_stock(self, qty: int) -> int:
                return qty

            @event(begin="e2", end="e3")
            def set_price(self, price: float) -> None: ...

        assert det.event("Stock.e1") == Stock.sell_stock.end
        assert det.event("Stock.e2") == Stock.set_price.begin
        assert det.event("Stock.e3") == Stock.set_price.end
        assert det.event("Stock.set_price:begin") is Stock.set_price.begin
        assert on(Stock).e2 == Stock.set_price.begin
        assert str(on(Stock).e2) == "Stock.e2"

    def test_handles_are_primitive_events_named_after_the_method(
        self, det: LocalEventDetector
    ) -> None:
        class Stock(Reactive, detector=det):
            @event("both")
            def set_price(self, price: float) -> None: ...

        assert Stock.set_price.begin.name == "Stock.set_price:begin"
        assert Stock.set_price.begin.selector is None
        assert str(Stock.set_price.end) == "Stock.set_price:end"
        assert Stock.set_price.begin == on(Stock).set_price.begin


class TestSilence:
    """What the class holds while nobody listens: the plain function."""

    def test_unobserved_method_is_the_plain_function(self, det: LocalEventDetector) -> None:
        def set_price(self: Any, price: float) -> None:
            self.price = price

        class Stock(Reactive, detector=det):
            m = event(set_price)

        assert Stock.__dict__["m"] is set_price
        assert type(Stock.__dict__["m"]) is types.FunctionType

    def test_subclasses_hold_their_own_plain_copy(self, det: LocalEventDetector) -> None:
        class Stock(Reactive, detector=det):
            @event
            def set_price(self, price: float) -> None:
                """Set it."""

        class SubStock(Stock):
            pass

        own = SubStock.__dict__["set_price"]
        assert type(own) is types.FunctionType
        assert own is not Stock.__dict__["set_price"]
        assert own.__code__ is Stock.__dict__["set_price"].__code__
        assert own.__qualname__.endswith("SubStock.set_price")
        assert own.__doc__ == "Set it."


class TestIntrospection:
    @pytest.mark.parametrize("listened", [False, True], ids=["plain", "wrapped"])
    def test_signature_docstring_and_names_survive(
        self, det: LocalEventDetector, listened: bool
    ) -> None:
        class Stock(Reactive, detector=det):
            @event("both")
            def set_price(self, price: float, *, note: str = "") -> bool:
                """Set the price."""
                return True

        if listened:
            fired(det, "r", Stock.set_price.end)
            installed = Stock.__dict__["set_price"]
            assert installed.__wrapped__.__code__ is not installed.__code__  # the wrapper
        s = Stock()
        # (Annotations are strings: this module uses postponed evaluation.)
        assert str(inspect.signature(Stock.set_price)) == (
            "(self, price: 'float', *, note: 'str' = '') -> 'bool'"
        )
        assert str(inspect.signature(s.set_price)) == (
            "(price: 'float', *, note: 'str' = '') -> 'bool'"
        )
        assert Stock.set_price.__doc__ == "Set the price."
        assert Stock.set_price.__name__ == "set_price"
        assert Stock.set_price.__qualname__.endswith("Stock.set_price")
        assert inspect.getsource(Stock.set_price).lstrip().startswith('@event("both")')
        assert Stock.set_price.begin.name == "Stock.set_price:begin"
        assert s.set_price(1.0) is True


class TestBadInput:
    def test_non_callable(self) -> None:
        with pytest.raises(ReactiveError, match="decorates methods, not int"):
            event(42)  # type: ignore[call-overload]
        with pytest.raises(ReactiveError, match="not property"):
            event(property(lambda self: 1))  # type: ignore[call-overload]

    def test_callable_that_is_not_a_function(self) -> None:
        class Callable_:
            def __call__(self) -> None: ...

        with pytest.raises(ReactiveError, match="functions defined in a class body"):
            event(Callable_())

    def test_async_and_generator_functions(self) -> None:
        with pytest.raises(ReactiveError, match="async function"):

            @event
            async def a(self: Any) -> None: ...

        with pytest.raises(ReactiveError, match="generator function"):

            @event
            def g(self: Any) -> Any:
                yield 1

    @pytest.mark.parametrize(
        ("args", "kwargs", "match"),
        [
            (("start",), {}, "'begin', 'end' or 'both'"),
            (("begin",), {"end": True}, "cannot be combined"),
            ((), {"begin": "not an identifier"}, "an event name"),
            ((), {"begin": 3}, "an event name"),
            ((), {"begin": "e", "end": "e"}, "used once per class"),
            ((), {"exclude": [3]}, "parameter names"),
        ],
    )
    def test_bad_arguments(self, args: Any, kwargs: Any, match: str) -> None:
        with pytest.raises(ReactiveError, match=match):
            event(*args, **kwargs)

    def test_exclude_names_an_unknown_parameter(self) -> None:
        with pytest.raises(ReactiveError, match=r"'nope'.*no parameter"):

            @event(exclude="nope")
            def m(self: Any, x: int) -> None: ...

    def test_parameter_named_result_on_an_end_event(self) -> None:
        with pytest.raises(ReactiveError, match="parameter named 'result'"):

            @event
            def record(self: Any, result: int) -> None: ...

        # Fine when excluded, or for a begin event only.
        event(exclude="result")(lambda self, result: None)
        event("begin")(lambda self, result: None)

    def test_decorating_twice(self) -> None:
        with pytest.raises(ReactiveError, match="applied twice"):

            @event
            @event
            def m(self: Any) -> None: ...

    def test_method_of_a_class_that_is_not_reactive(self) -> None:
        # Python 3.11 wraps errors from __set_name__ in RuntimeError (3.12 does not).
        with pytest.raises((ReactiveError, RuntimeError)) as info:

            class Plain:
                @event
                def m(self) -> None: ...

        err = info.value if isinstance(info.value, ReactiveError) else info.value.__cause__
        assert isinstance(err, ReactiveError)
        assert "Plain.m is declared with @event, but" in str(err)
        assert "sentinel.Reactive" in str(err)

    def test_placeholder_outside_a_class_body(self) -> None:
        @event
        def m(self: Any) -> None: ...

        with pytest.raises(ReactiveError, match="outermost decorator"):
            m(None)

    def test_classmethod_stacked_above_event(self, det: LocalEventDetector) -> None:
        with pytest.raises(ReactiveError, match="write @event above @classmethod"):

            class A(Reactive, detector=det):
                @classmethod  # type: ignore[misc]
                @event
                def m(cls) -> None: ...

    def test_event_name_used_twice_on_one_class(self, det: LocalEventDetector) -> None:
        with pytest.raises(DuplicateEventError, match="'e1' for both"):

            class A(Reactive, detector=det):
                @event(end="e1")
                def m(self) -> None: ...

                @event(begin="e1")
                def n(self) -> None: ...

    def test_event_name_used_again_by_a_subclass(self, det: LocalEventDetector) -> None:
        class A(Reactive, detector=det):
            @event(end="e1")
            def m(self) -> None: ...

        with pytest.raises(DuplicateEventError, match="'e1' for both"):

            class B(A):
                @event(end="e1")
                def n(self) -> None: ...

    def test_event_name_equal_to_an_event_method(self, det: LocalEventDetector) -> None:
        with pytest.raises(DuplicateEventError, match="also the name of an event method"):

            class A(Reactive, detector=det):
                @event(end="n")
                def m(self) -> None: ...

                @event
                def n(self) -> None: ...

    def test_override_that_changes_the_events(self, det: LocalEventDetector) -> None:
        class A(Reactive, detector=det):
            @event
            def m(self) -> None: ...

        with pytest.raises(ReactiveError, match="redeclares the events of"):

            class B(A):
                @event("begin")
                def m(self) -> None: ...

        class C(A):  # the same declaration again is accepted
            @event
            def m(self) -> None: ...

    def test_override_by_something_else(self, det: LocalEventDetector) -> None:
        class A(Reactive, detector=det):
            @event
            def m(self) -> None: ...

        with pytest.raises(ReactiveError, match=r"B.m is a int, but it is an event method"):

            class B(A):
                m = 5  # type: ignore[assignment]

        with pytest.raises(ReactiveError, match="is a classmethod but overrides"):

            class C(A):
                @classmethod  # type: ignore[override]
                def m(cls) -> None: ...

    def test_instances_must_be_weakly_referenceable(self, det: LocalEventDetector) -> None:
        with pytest.raises(ReactiveError, match="__weakref__"):

            class Base:
                __slots__ = ("x",)

            class A(Base, Reactive, detector=det):
                __slots__ = ()

    def test_detector_keyword_only_on_the_top_class(self, det: LocalEventDetector) -> None:
        class A(Reactive, detector=det):
            pass

        with pytest.raises(ReactiveError, match="top reactive class"):

            class B(A, detector=det):
                pass

        with pytest.raises(ReactiveError, match="must be an event detector"):

            class C(Reactive, detector="det"):  # type: ignore[arg-type]
                pass

    def test_a_subclass_hidden_by_an_uncooperative_init_subclass(
        self, det: LocalEventDetector
    ) -> None:
        class A(Reactive, detector=det):
            def __init_subclass__(cls, **kwargs: Any) -> None:
                pass  # forgets super().__init_subclass__(**kwargs)

            @event
            def m(self) -> None: ...

        class B(A):
            pass

        fired(det, "r", A.m.end)
        with pytest.raises(ReactiveError, match="B derives from a reactive class but was not set"):
            B().m()

    def test_sentinel_name_must_be_an_identifier(self, det: LocalEventDetector) -> None:
        with pytest.raises(ReactiveError, match="must be an identifier"):

            class A(Reactive, detector=det, sentinel_name="a b"):
                pass


@pytest.mark.parametrize("kwargs", [{"end": None}, {"begin": None, "end": None}, {"begin": None}])
def test_a_phase_given_as_none_is_refused(det: LocalEventDetector, kwargs: dict[str, Any]) -> None:
    """``end=None`` declared no event at all, silently (``A.m.end`` then raised
    AttributeError); True, an event name or False are what a phase takes."""
    with pytest.raises(ReactiveError, match=r"=None\): (begin|end)= is True or an event name"):

        class A(Reactive, detector=det):
            @event(**kwargs)
            def m(self) -> None: ...


def test_python_version_note() -> None:
    # The RuntimeError case above exists because of this; drop it with 3.11.
    assert sys.version_info >= (3, 11)
