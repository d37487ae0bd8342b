"""An event method replaced in its class (``mock.patch``) while a rule comes.

sentinel leaves a replaced method alone and cannot see the original being put
back (a class attribute set back is nothing sentinel hears of), so a rule defined
while the method is replaced starts seeing calls of the original only at the
detector's next change. That case warns (:class:`ReplacedMethodWarning`), once
per replacement, and the warning never raises inside the detector's change.
"""

from __future__ import annotations

import warnings
from typing import Any
from unittest import mock

import pytest

from sentinel import LocalEventDetector, Reactive, event
from sentinel.reactive import ReplacedMethodWarning
from tests.reactive.conftest import fired


@pytest.fixture
def Account(det: LocalEventDetector) -> Any:
    class Account(Reactive, detector=det):
        @event
        def deposit(self, amount: int) -> int:
            return amount

    return Account


def test_a_rule_defined_while_the_method_is_patched_warns_once(
    det: LocalEventDetector, Account: Any
) -> None:
    end = Account.deposit.end
    with mock.patch.object(Account, "deposit", lambda self, amount: "fake"):
        got: list[Any] = []
        with pytest.warns(ReplacedMethodWarning, match=r"Account\.deposit is listened to") as w:
            det.rule("r", end, action=got.append)
        assert w[0].filename == __file__  # shown at the line that defined the rule
        assert w[0].message.method == "deposit"  # type: ignore[union-attr]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fired(det, "other", end)  # the same replacement: no second warning
        assert Account().deposit(1) == "fake"
    assert got == []
    # The documented limitation: the original is back, seen at the next change.
    fired(det, "unrelated", det.explicit("x"))
    assert Account().deposit(5) == 5
    assert [o.params["amount"] for o in got] == [5]


def test_the_warning_does_not_raise_inside_the_detector_when_warnings_are_errors(
    det: LocalEventDetector, Account: Any
) -> None:
    shown: list[Any] = []
    end = Account.deposit.end
    with (
        mock.patch.object(Account, "deposit", lambda self, amount: "fake"),
        warnings.catch_warnings(),
        mock.patch.object(warnings, "showwarning", lambda *a, **k: shown.append(a)),
    ):
        warnings.simplefilter("error")
        got: list[Any] = []
        det.rule("r", end, action=got.append)  # defined all the same
    assert [type(a[0]) for a in shown] == [ReplacedMethodWarning]
    assert shown[0][2] == __file__
    assert "r" in det.rules
    fired(det, "unrelated", det.explicit("x"))
    Account().deposit(2)
    assert len(got) == 1


def test_no_warning_when_the_rule_goes_while_the_method_is_patched(
    det: LocalEventDetector, Account: Any
) -> None:
    r = det.rule("r", Account.deposit.end, action=lambda o: None)  # wrapped before the patch
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with mock.patch.object(Account, "deposit", lambda self, amount: "fake"):
            r.delete()
        assert Account().deposit(1) == 1
