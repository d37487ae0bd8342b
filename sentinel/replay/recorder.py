"""The replay detector: the application's rules, recording instead of acting.

:class:`ReplayDetector` is a :class:`~sentinel.LocalEventDetector` whose scheduler
is a :class:`RecordingScheduler`: when a rule triggers it evaluates the condition
(with signals muted, as online), records the detection, and runs the action only
when replay was asked to (``run_actions``). Detached rules are recorded where the
online detector would have handed them to its detached executor: when their
transaction ends, only after a commit for causally dependent ones.

Parameters are decoded lazily: an occurrence's parameters are a
:class:`LazyParams` mapping that keeps the log's JSON text (``raw``) and is
filled only when something reads it: detection itself (an expression partitioned
by a parameter), a condition, or an action. Replay output reuses the JSON text,
so parameters are never re-encoded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Final

import orjson

from sentinel.detector.transactions import flow
from sentinel.errors import ReplayError, ReplaySourceError, RuleError
from sentinel.params import loads
from sentinel.rules import LocalEventDetector, Scheduler

if TYPE_CHECKING:
    from sentinel.detector import Scope, Subscription
    from sentinel.rules import Rule

__all__ = [
    "InstantFailed",
    "LazyParams",
    "RecordingScheduler",
    "ReplayDetector",
    "checked_params",
    "decode_params",
    "fill",
    "row_error",
]

_fast_loads = orjson.loads
_FastError = orjson.JSONDecodeError


class LazyParams(dict):  # type: ignore[type-arg]
    """An occurrence's parameters as replay reads them from the log.

    ``raw`` is the log's JSON text (tagged values as :mod:`sentinel.params`
    writes them). While ``pending`` is true the mapping is still empty;
    :meth:`fill` decodes ``raw`` into it. Compares equal to a plain dict with the
    same items once filled.
    """

    __slots__ = ("pending", "raw")

    pending: bool
    raw: str

    def fill(self) -> None:
        """Decode ``raw`` into the mapping (once)."""
        if self.pending:
            self.update(decode_params(self.raw))
            self.pending = False


def decode_params(text: str) -> dict[str, Any]:
    """A log row's ``params`` JSON text as a parameter mapping (tagged values
    decoded).

    orjson parses it (about 6x faster than :func:`json.loads` on a log's small
    objects); a mapping of plain values is then done. Where orjson reads the
    text otherwise than :mod:`json` does, :mod:`json` reads it: a lone surrogate
    (orjson refuses it) and an integer beyond 64 bits (orjson reads a float).

    Raises :class:`~sentinel.errors.ReplaySourceError` for a text that is not
    the JSON object of parameters the log writes (not JSON, another JSON value,
    a malformed tagged value): a corrupt row (see :func:`row_error`).
    """
    try:
        out: dict[str, Any] = _fast_loads(text)
    except _FastError:
        return _loads(text)
    if type(out) is not dict:
        raise _not_params(text, f"a JSON {type(out).__name__}, not an object")
    return checked_params(out, text)


def checked_params(out: dict[str, Any], text: str) -> dict[str, Any]:
    """What :func:`decode_params` gives for ``text``, given ``out``, what
    ``orjson.loads(text)`` gave: ``out`` itself when orjson read it as :mod:`json`
    would, else ``text`` decoded by :mod:`sentinel.params`."""
    if _PLAIN.issuperset(map(type, out.values())):
        return out
    for v in out.values():
        if type(v) is float:
            if not -(2.0**63) < v < 2.0**64:
                return _loads(text)  # perhaps an integer beyond 64 bits
        elif type(v) in _NESTED:
            return _loads(text)  # tagged values, perhaps nested
    return out


def _loads(text: str) -> dict[str, Any]:
    """:func:`sentinel.params.loads`, failing with a
    :class:`~sentinel.errors.ReplaySourceError`."""
    try:
        out = loads(text)
    except Exception as err:  # JSON errors, a list's .items(), a tag's payload
        raise _not_params(text, f"{type(err).__name__}: {err}") from err
    return out


def _not_params(text: Any, why: str) -> ReplaySourceError:
    return ReplaySourceError(
        f"its params are not the JSON object of parameters the log writes ({why[:200]}): "
        f"{str(text)[:80]!r}",
        source="params",
    )


def row_error(err: ReplaySourceError, event: Any, t_occ: Any, scope: Any) -> ReplaySourceError:
    """``err`` (from decoding a row's parameters) naming the row."""
    return ReplaySourceError(
        f"log row {event!s:.80}@{t_occ} in scope {scope!r:.80}: {err}", source=err.source
    )


def _fill_named(occ: Any) -> None:
    """Fill the lazy parameters of the primitive ``occ``, naming it when they
    cannot be read."""
    try:
        occ[5].fill()
    except ReplaySourceError as err:
        raise row_error(err, occ[0], occ[1], occ[6]) from err


_PLAIN: Final = frozenset({str, int, bool, type(None)})
_NESTED: Final = frozenset({dict, list})


def fill(occ: Any) -> None:
    """Fill the lazy parameters of every primitive constituent of ``occ``."""
    if len(occ) == 8:
        p = occ[5]
        if type(p) is LazyParams and p.pending:
            _fill_named(occ)
        return
    stack = [occ]
    pop, extend = stack.pop, stack.extend
    while stack:
        o = pop()
        if len(o) == 8:
            p = o[5]
            if type(p) is LazyParams and p.pending:
                _fill_named(o)
        else:
            extend(o[2])


class InstantFailed(Exception):
    """A condition (or, with actions, an action) raised: as online, the rest of
    the instant's rules do not run. Replay records the failure and goes on with
    the next occurrence (online, the transaction aborted; the log has the abort)."""


#: One recorded detection: rule name, coupling mode, scope id, the occurrence,
#: the condition's result (None when it raised), the error message (or None).
Record = tuple[str, str, Any, Any, "bool | None", "str | None"]


class RecordingScheduler(Scheduler):
    """A scheduler that records each rule it would run.

    ``records`` collects :data:`Record` tuples; ``scope_id`` is the scope the
    detector is delivering to (set by :meth:`deliver` and by the detector when a
    scope ends). With ``run_actions`` the action of a rule whose condition holds
    runs too, with signals muted (the log already holds what it signalled online).
    """

    def __init__(self, detector: LocalEventDetector, cascade_limit: int) -> None:
        super().__init__(detector, cascade_limit)
        self.records: list[Record] = []
        self.scope_id: Any = None
        self.run_actions = False

    def deliver(self, items: list[tuple[Subscription, Any]], scope: Scope) -> None:
        self.scope_id = scope.id
        _deliver(self, items, scope)

    def runner(self, rule: Rule) -> Callable[[Any, Scope], None]:
        """What records an immediate ``rule``'s detection: :meth:`run`, with what
        it reads of ``rule`` taken once, and (without ``run_actions``, which is
        read at each call) no action to run."""
        sub = rule._subscription
        name = rule.name
        coupling = rule.coupling._value_
        cond = rule.condition
        run = self.run
        if cond is None:

            def record(occ: Any, scope: Scope | None = None) -> None:
                if self.run_actions:
                    return run(rule, occ, scope)
                if sub.active:
                    self.records.append((name, coupling, self.scope_id, occ, True, None))
                return None

            return record
        muted = self._muted

        def check(occ: Any, scope: Scope | None = None) -> None:
            if self.run_actions:
                return run(rule, occ, scope)
            if not sub.active:
                return None
            if len(occ) == 8:
                p = occ[5]
                if type(p) is LazyParams and p.pending:
                    _fill_named(occ)
            else:
                fill(occ)
            me = flow()
            mine = me not in muted
            if mine:
                muted.add(me)
            try:
                ok = bool(cond(occ))
            except Exception as e:
                self._failed(rule, occ, None, "condition", e)
            finally:
                if mine:
                    muted.discard(me)
            self.records.append((name, coupling, self.scope_id, occ, ok, None))
            return None

        return check

    def run(self, rule: Rule, occ: Any, scope: Scope | None = None) -> None:
        if not rule._subscription.active:
            return
        cond = rule.condition
        run_actions = self.run_actions
        if cond is None:
            ok = True
        else:
            fill(occ)
            muted = self._muted
            me = flow()
            mine = me not in muted
            if mine:
                muted.add(me)
            try:
                ok = bool(cond(occ))
            except Exception as e:
                self._failed(rule, occ, None, "condition", e)
            finally:
                if mine:
                    muted.discard(me)
        if ok and run_actions:
            fill(occ)
            muted = self._muted
            me = flow()
            mine = me not in muted
            if mine:
                muted.add(me)
            try:
                rule.action(occ)
            except Exception as e:
                self._failed(rule, occ, ok, "action", e)
            finally:
                if mine:
                    muted.discard(me)
        self.records.append((rule.name, rule.coupling._value_, self.scope_id, occ, ok, None))

    def _failed(self, rule: Rule, occ: Any, ok: bool | None, phase: str, error: Exception) -> None:
        message = (
            str(error) if isinstance(error, RuleError) else str(RuleError(rule.name, phase, error))
        )
        self.records.append((rule.name, rule.coupling._value_, self.scope_id, occ, ok, message))
        raise InstantFailed(message) from error


_deliver = Scheduler.deliver


class ReplayDetector(LocalEventDetector):
    """A detector that records detections instead of running rules (see the
    module docs). Build one with :meth:`of`."""

    #: Detections are recorded, not run (see :class:`RecordingScheduler`).
    scheduler_class = RecordingScheduler
    scheduler: RecordingScheduler

    @classmethod
    def of(
        cls,
        det: LocalEventDetector,
        *,
        only: Collection[str] | None = None,
        run_actions: bool = False,
    ) -> ReplayDetector:
        """A fresh replay detector with ``det``'s events and rules (only the
        rules named in ``only``, when given). Raises
        :class:`~sentinel.errors.ReplayError` for a name in ``only`` that is not
        one of ``det``'s rules."""
        if only is not None:
            unknown = sorted(set(only) - set(det.rules))
            if unknown:
                raise ReplayError(f"no rule named {', '.join(map(repr, unknown))} to replay")
        rep = det.replica(cls=cls)
        assert isinstance(rep, ReplayDetector)
        if only is not None:
            keep = set(only)
            for name in [n for n in rep.rules if n not in keep]:
                rep.get_rule(name).delete()
        rep.scheduler.run_actions = run_actions
        return rep

    def listens(self, event: str) -> bool:
        """Whether an occurrence of ``event`` can reach anything here: a channel
        some rule listens to, or a layer's route for logged occurrences (temporal
        ticks). Occurrences of other events change nothing and are skipped."""
        # Reads the detector's own tables (this is a subclass); the answer is fixed
        # for a replay, whose rules do not change.
        channel = self._channels.get(event)
        if channel is not None:
            return channel.listened
        routes = self.dispatch.route
        return bool(routes) and routes.first(event) is not None

    def _after_end(self, scope: Scope) -> None:
        self.scheduler.scope_id = scope.id
        super()._after_end(scope)

    def _run_detached(self, rule: Rule, occ: Any, committed: bool) -> None:
        # A failure is recorded; online, a failing detached rule does not stop the others.
        with contextlib.suppress(InstantFailed):
            self.scheduler.run(rule, occ)
