"""Rough edges met writing a first application: errors that say what to write
instead, and the advice they give works."""

from __future__ import annotations

from typing import Any

import pytest

from sentinel import (
    ExpressionError,
    LocalEventDetector,
    Reactive,
    RuleDefinitionError,
    VirtualClock,
    event,
    not_within,
    parse,
    within,
)


def bank(det: LocalEventDetector) -> Any:
    class Account(Reactive, detector=det):
        @event(end="deposited")
        def deposit(self, amount: int) -> int:
            return amount

        @event
        def withdraw(self, amount: int) -> int:
            return amount

    return Account


@pytest.mark.parametrize("shorthand", [within, not_within])
def test_text_where_an_expression_belongs_gets_advice(shorthand: Any) -> None:
    det = LocalEventDetector()
    Account = bank(det)
    with pytest.raises(ExpressionError) as info:
        shorthand("Account.deposited", Account.withdraw.end, "00:01:00")
    message = str(info.value)
    assert "not the text 'Account.deposited'" in message
    assert "Account.deposit.end" in message and "parse('Account.deposited')" in message


@pytest.mark.parametrize("spelling", ["method events", "parsed text"])
def test_the_advice_works(spelling: str) -> None:
    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock)
    Account = bank(det)
    first = Account.deposit.end if spelling == "method events" else parse("Account.deposited")
    seen: list[Any] = []
    det.rule("quick", within(first, Account.withdraw.end, "00:01:00"), action=seen.append)
    account = Account()
    account.deposit(10)
    clock.advance(30)
    account.withdraw(5)  # within a minute of the deposit
    clock.advance(60)
    account.withdraw(7)  # not
    assert [o.values("amount") for o in seen] == [(10, 5)]


def test_a_deferred_rule_cannot_span_transactions() -> None:
    det = LocalEventDetector()
    det.explicit("e")
    with pytest.raises(RuleDefinitionError, match=r"deferred rule .* \(flush=False\)"):
        det.rule("r", "e", action=print, coupling="deferred", flush=False)
    assert det.rules == {}
