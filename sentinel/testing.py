"""Helpers for testing an application's rules: which rules ran, with what.

:class:`RuleRecorder` watches a detector's rule runs (immediate and deferred
rules, and detached ones run in this process) and answers questions about them
with assertions that say what did run instead. It needs no test framework; the
pytest plugin (:mod:`sentinel.pytest_plugin`, registered when sentinel is
installed) gives one per test as the ``sentinel_recorder`` fixture, with a fresh
detector, a virtual clock and attached SQLite sessions. See ``docs/testing.md``.

>>> from sentinel import LocalEventDetector
>>> det = LocalEventDetector()
>>> order = det.explicit("order")
>>> _ = det.rule("big", order, lambda o: o.params["amount"] > 100, action=lambda o: None)
>>> with RuleRecorder(det) as fired:
...     _ = det.signal("order", amount=150)
...     _ = det.signal("order", amount=5)
>>> fired.names()
['big']
>>> fired.assert_fired("big", params={"amount": 150}).params["amount"]
150
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sentinel.detector import events

if TYPE_CHECKING:
    from sentinel.rules import LocalEventDetector, Rule

__all__ = ["RuleRecorder", "RuleRun"]


@dataclass(frozen=True)
class RuleRun:
    """One run of a rule: its name and coupling mode, how it ended (``"fired"``:
    the action ran; ``"condition_false"``; ``"failed"``, with ``error``), and the
    detection it ran for (an :class:`~sentinel.Occurrence` or a
    :class:`~sentinel.CompositeOccurrence`)."""

    rule: str
    coupling: str
    status: str
    occurrence: Any
    error: BaseException | None = None

    def describe(self) -> str:
        """One line for assertion messages: rule, status, constituents and their
        parameters."""
        occ = self.occurrence
        parts = ", ".join(
            f"{o.event}@{o.t_occ}{dict(o.params) if o.params else ''}" for o in occ.constituents
        )
        error = f" ({type(self.error).__name__}: {self.error})" if self.error else ""
        return f"{self.rule} [{self.coupling}] {self.status}{error}: {parts}"


class RuleRecorder:
    """Records every rule run of ``detector`` from now until :meth:`close` (or
    the end of a ``with`` block).

    Detached rules are recorded when they run in this process through the
    scheduler (a detector that is not attached runs them right after the
    transaction); when an attachment's outbox workers run them, their runs are
    in the rule-firing log instead (``LogReader.firings``).

    Thread-safe for recording (appending to a list); read it once the runs you
    wait for are done.
    """

    def __init__(self, detector: LocalEventDetector) -> None:
        self.detector = detector
        #: Every run, in order.
        self.runs: list[RuleRun] = []
        self._closed = False
        events.listen(detector, "rule_run", self._observe)

    def _observe(self, rule: Rule, occ: Any, status: str, error: BaseException | None) -> None:
        self.runs.append(RuleRun(rule.name, str(rule.coupling), status, occ, error))

    def close(self) -> None:
        """Stop recording (the runs stay)."""
        if not self._closed:
            self._closed = True
            events.remove(self.detector, "rule_run", self._observe)

    def __enter__(self) -> RuleRecorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __iter__(self) -> Iterator[RuleRun]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    def clear(self) -> None:
        """Forget the runs recorded so far."""
        self.runs.clear()

    # -- questions -----------------------------------------------------------------------
    def fired(self, rule: str | None = None) -> list[Any]:
        """The detections for which ``rule`` (or any rule) ran its action, in order."""
        return [r.occurrence for r in self.runs if r.status == "fired" and rule in (None, r.rule)]

    def names(self, status: str = "fired") -> list[str]:
        """The names of the rules that ran with ``status`` (default: whose action
        ran), in order, once per run."""
        return [r.rule for r in self.runs if r.status == status]

    def assert_fired(
        self,
        rule: str,
        *,
        times: int | None = None,
        values: Mapping[str, tuple[Any, ...]] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """Assert that ``rule``'s action ran for a detection that matches, and
        return the last such detection.

        ``values`` maps a parameter to the tuple ``occ.values(param)`` must equal
        (the parameter across the constituents, in ``t_occ`` order); ``params``
        maps a parameter to the value ``occ.params[param]`` must equal (for a
        composite, the last constituent's that has it). With ``times``, exactly
        that many runs must match. Raises AssertionError listing every recorded
        run otherwise.
        """
        __tracebackhide__ = True  # pytest shows the test's line, not this one
        _check_expectations(rule, values, params)
        matching = [
            r.occurrence
            for r in self.runs
            if r.rule == rule and r.status == "fired" and _matches(r.occurrence, values, params)
        ]
        wanted = "" if not (values or params) else f" with {_spell(values, params)}"
        if times is not None and len(matching) != times:
            raise AssertionError(
                f"rule {rule!r} fired {len(matching)} time(s){wanted}, expected {times}\n"
                + self._report()
            )
        if not matching:
            raise AssertionError(f"rule {rule!r} did not fire{wanted}\n" + self._report())
        return matching[-1]

    def assert_not_fired(self, rule: str) -> None:
        """Assert that ``rule``'s action never ran; raises AssertionError listing
        its runs otherwise."""
        __tracebackhide__ = True
        runs = [r for r in self.runs if r.rule == rule and r.status == "fired"]
        if runs:
            raise AssertionError(
                f"rule {rule!r} fired {len(runs)} time(s), expected none\n" + self._report()
            )

    def _report(self) -> str:
        if not self.runs:
            return "no rule ran"
        return "rule runs:\n" + "\n".join(f"  {r.describe()}" for r in self.runs)


def _check_expectations(rule: str, values: Any, params: Any) -> None:
    """Refuse ``assert_fired`` arguments of the wrong shape, before any matching."""
    __tracebackhide__ = True
    for kw, given in (("values", values), ("params", params)):
        if given is not None and not isinstance(given, Mapping):
            raise TypeError(
                f"assert_fired({rule!r}, {kw}=...) takes a mapping of parameter names, "
                f"not {type(given).__name__} ({given!r:.60})"
            )
    for name, expected in (values or {}).items():
        if not isinstance(expected, (tuple, list)):
            raise TypeError(
                f"assert_fired({rule!r}, values=...): values[{name!r}] is {expected!r:.60}, "
                f"but a value of values= is the tuple of the parameter's values across the "
                f"detection's constituents, in t_occ order (values={{{name!r}: "
                f"({expected!r:.60},)}}); for one value, use params={{{name!r}: "
                f"{expected!r:.60}}}"
            )


def _matches(
    occ: Any, values: Mapping[str, tuple[Any, ...]] | None, params: Mapping[str, Any] | None
) -> bool:
    for name, expected in (values or {}).items():
        if occ.values(name) != tuple(expected):
            return False
    merged = occ.params
    return all(name in merged and merged[name] == v for name, v in (params or {}).items())


def _spell(values: Mapping[str, Any] | None, params: Mapping[str, Any] | None) -> str:
    said = [f"values({k!r}) == {tuple(v)!r}" for k, v in (values or {}).items()]
    said += [f"params[{k!r}] == {v!r}" for k, v in (params or {}).items()]
    return " and ".join(said)
