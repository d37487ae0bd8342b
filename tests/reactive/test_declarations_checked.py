"""Declarations sentinel refuses rather than ignores: an override that declares
other parameters out of its events (or another occurrence time), an override
without a parameter the events name, and async or generator functions under a
signature-keeping decorator."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
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


def listify(f: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return list(f(*args, **kwargs))

    return wrapper


def run_sync(f: Callable[..., Any]) -> Callable[..., Any]:
    import asyncio

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(f(*args, **kwargs))

    return wrapper


def test_a_synchronous_decorator_over_a_generator_or_coroutine_is_a_method_like_any(
    det: LocalEventDetector,
) -> None:
    """What the class holds says what a call is: a decorator that consumes a
    generator or runs a coroutine makes a call that ends with that work (for a
    day these were refused for what the decorator wraps). Async and generator
    functions held as they are stay refused."""
    seen: list[Any] = []

    class A(Reactive, detector=det):
        @event
        @listify
        def items(self, n: int) -> Iterator[int]:
            yield from range(n)

        @event
        @run_sync
        async def fetch(self, n: int) -> int:
            return n * 2

    det.rule("i", A.items.end, action=lambda o: seen.append(o.params["result"]))
    det.rule("f", A.fetch.end, action=lambda o: seen.append(o.params["result"]))
    assert A().items(3) == [0, 1, 2] and A().fetch(3) == 6
    assert seen == [(0, 1, 2), 6]
    with pytest.raises(ReactiveError, match=r"B\.x is an async function") as info:

        class B(Reactive, detector=det):
            @event
            async def x(self, n: int) -> int:
                return n

    assert info.value.method == "x"


def test_a_pass_through_override_is_bound_by_the_roots_signature(
    det: LocalEventDetector,
) -> None:
    """``def login(self, *args, **kwargs): return super().login(...)``: for a
    day refused at import (it has no parameter 'password', which the root
    excludes); before that its call was logged as ``args`` and ``kwargs``, the
    excluded password among them. Bound as the root's, it logs ``user`` only."""
    from datetime import UTC, datetime

    class Root(Reactive, detector=det):
        @event(exclude=("password",))
        def login(self, user: str, password: str) -> str:
            return user

        @event(occurred_at="at")
        def tick(self, at: datetime) -> datetime:
            return at

    class Sub(Root):
        def login(self, *args: Any, **kwargs: Any) -> str:
            return super().login(*args, **kwargs)

        def tick(self, *args: Any, **kwargs: Any) -> datetime:
            return super().tick(*args, **kwargs)

    seen: list[Any] = []
    det.rule("l", Root.login.end, action=seen.append)
    det.rule("t", Root.tick.end, action=seen.append)
    assert Sub().login("u", password="p") == "u"
    assert Sub().login("v", "q") == "v"
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert Sub().tick(at=at) == at
    assert [dict(o.params) for o in seen[:2]] == [
        {"user": "u", "result": "u"},
        {"user": "v", "result": "v"},
    ]
    assert seen[2].timestamp == at.timestamp()
