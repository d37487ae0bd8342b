"""BiCEPL's NUMERIC(p, s) is exact end to end (issue 28.8): announced, stored,
derived, passed to an action and read back as the same Decimal on every
backend, and a negative zero is zero everywhere."""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal

import pytest

from sentinel.bicep import Processor

T = 1_400_000_400  # a tick of 15-minute chronons
WIDE = Decimal("12345678901234567890.1234567891")
NEGATIVE = Decimal("-12345678901234567890.1234567891")  # (NEGATIVE would round to 28 digits)

PROGRAM = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS Account (k INTEGER, balance NUMERIC(30,10), r REAL)
  ID (k) LIFESPAN(1d)
  ON ANNOUNCEMENT DO seen(new.balance, new.r);
CREATE COMPLEX EVENT CLASS Rich (k INTEGER, balance NUMERIC(30,10)) ID (k) LIFESPAN(1d)
  AS SELECT k, balance FROM Account WHERE balance IS NOT NULL OCCURRING AT Account.occTime
  ON ANNOUNCEMENT DO rich(new.balance);
"""


def test_a_wide_numeric_comes_back_as_the_same_decimal(make: Callable[..., Processor]) -> None:
    proc = make(PROGRAM, name="p")
    proc.announce("Account", k=1, balance=WIDE, r=1.5, occ=T, det=T)
    proc.announce("Account", k=2, balance=NEGATIVE, r=2.5, occ=T, det=T)
    calls = {(c.action, c.key["k"]): c.args for r in proc.run_until(T) for c in r.actions}
    assert calls == {
        ("seen", 1): (WIDE, 1.5),
        ("seen", 2): (NEGATIVE, 2.5),
        ("rich", 1): (WIDE,),
        ("rich", 2): (NEGATIVE,),
    }
    for args in calls.values():
        assert type(args[0]) is Decimal
    assert [e["balance"] for e in proc.live("Account")] == [WIDE, NEGATIVE]
    assert [e["balance"] for e in proc.live("Rich")] == [WIDE, NEGATIVE]
    assert [e["balance"] for e in proc.history("Account")] == [WIDE, NEGATIVE]


def test_a_numeric_is_rounded_to_its_scale_exactly(make: Callable[..., Processor]) -> None:
    """Half away from zero, from the Decimal given (not from a float near it)."""
    proc = make(PROGRAM, name="p")
    proc.announce("Account", k=1, balance=Decimal("0.00000000005"), occ=T, det=T)
    proc.announce("Account", k=2, balance=Decimal("99999999999999999999.99999999994"), occ=T, det=T)
    proc.run_until(T)
    assert [e["balance"] for e in proc.live("Account")] == [
        Decimal("0.0000000001"),
        Decimal("99999999999999999999.9999999999"),
    ]


def test_negative_zero_is_zero_on_every_backend(make: Callable[..., Processor]) -> None:
    proc = make(PROGRAM, name="p")
    proc.announce("Account", k=1, balance=Decimal("-0.0"), r=-0.0, occ=T, det=T)
    (seen,) = [c.args for r in proc.run_until(T) for c in r.actions if c.action == "seen"]
    balance, real = seen
    assert balance == 0 and not balance.is_signed()
    assert real == 0.0 and math.copysign(1.0, real) == 1.0
    (event,) = proc.live("Account")
    assert not event["balance"].is_signed() and math.copysign(1.0, event["r"]) == 1.0


@pytest.mark.parametrize("value", [1, 2.5, Decimal("4.125")])
def test_a_numeric_takes_every_kind_of_number(
    make: Callable[..., Processor], value: object
) -> None:
    proc = make(PROGRAM, name="p")
    proc.announce("Account", k=1, balance=value, occ=T, det=T)
    proc.run_until(T)
    assert proc.live("Account")[0]["balance"] == Decimal(str(value))
