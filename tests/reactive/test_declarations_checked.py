"""Declarations sentinel refuses rather than ignores: an override that declares
other parameters out of its events (or another occurrence time), an override
without a parameter the events name, and async or generator functions under a
signature-keeping decorator."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from typing import Any

import pytest

from sentinel import LocalEventDetector, Reactive, event
from sentinel.errors import ReactiveError
from tests.reactive.conftest import fired


@pytest.fixture
def Shop(det: LocalEventDetector) -> Any:
    class Shop(Reactive, detector=det):
        @event
        def order(self, item: str, callback: Any = None) -> str:
            return item

        @event(exclude=("callback",))
        def ship(self, item: str, callback: Any = None) -> str:
            return item

        @event(occurred_at="at")
        def report(self, what: str, at: datetime) -> None: ...

    return Shop


def test_an_override_declaring_another_exclude_is_refused(Shop: Any) -> None:
    with pytest.raises(
        ReactiveError,
        match=r"WebShop\.order redeclares the events of .*Shop\.order differently "
        r"\(exclude=\('callback',\) vs exclude=\(\)\)",
    ) as info:

        class WebShop(Shop):
            @event(exclude=("callback",))
            def order(self, item: str, callback: Any = None) -> str:
                return item

    assert info.value.method == "order"


def test_an_override_declaring_another_occurrence_time_is_refused(Shop: Any) -> None:
    with pytest.raises(ReactiveError, match=r"occurred_at='when' vs occurred_at='at'"):

        class WebShop(Shop):
            @event(occurred_at="when")
            def report(self, what: str, at: datetime, when: Any = None) -> None: ...


def test_an_override_repeating_the_declaration_is_allowed(
    det: LocalEventDetector, Shop: Any
) -> None:
    class WebShop(Shop):
        @event(exclude=("callback",))
        def ship(self, item: str, callback: Any = None) -> str:
            return item

        @event  # says nothing about exclude: inherits it
        def order(self, item: str, callback: Any = None) -> str:
            return item

        @event(occurred_at="at")
        def report(self, what: str, at: datetime) -> None: ...

    got = fired(det, "r", Shop.ship.end)
    WebShop().ship("book", callback=print)
    assert [dict(o.params) for o in got] == [{"item": "book", "result": "book"}]


@pytest.mark.parametrize("method", ["ship", "report"])
def test_an_override_without_a_parameter_the_events_name_is_refused(Shop: Any, method: str) -> None:
    kw = "exclude" if method == "ship" else "occurred_at"
    gone = "callback" if method == "ship" else "at"
    with pytest.raises(
        ReactiveError,
        match=rf"WebShop\.{method} has no parameter '{gone}', which the events of "
        rf".*Shop\.{method} name \({kw}=\.\.\.\); keep the parameter's name",
    ):
        if method == "ship":

            class WebShop(Shop):
                def ship(self, item: str, cb: Any = None) -> str:  # renamed
                    return item

        else:

            class WebShop(Shop):  # type: ignore[no-redef]
                def report(self, what: str, when: datetime) -> None: ...


def keeps_signature(f: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return f(*args, **kwargs)

    return wrapper


def test_an_async_method_under_a_decorator_is_refused_naming_it(det: LocalEventDetector) -> None:
    with pytest.raises(ReactiveError, match=r"A\.x is an async function under a decorator") as info:

        class A(Reactive, detector=det):
            @event
            @keeps_signature
            async def x(self, n: int) -> int:
                return n

    assert info.value.method == "x"


def test_an_async_generator_method_under_a_decorator_is_refused(det: LocalEventDetector) -> None:
    with pytest.raises(ReactiveError, match=r"A\.x is an async function under a decorator"):

        class A(Reactive, detector=det):
            @event
            @keeps_signature
            async def x(self) -> AsyncIterator[int]:
                yield 1


def test_a_generator_method_under_a_decorator_is_refused_naming_it(
    det: LocalEventDetector,
) -> None:
    with pytest.raises(
        ReactiveError, match=r"A\.g is a generator function under a decorator"
    ) as info:

        class A(Reactive, detector=det):
            @event
            @keeps_signature
            def g(self, n: int) -> Iterator[int]:
                yield n

    assert info.value.method == "g"
