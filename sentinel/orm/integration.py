"""What sentinel installs on a detector for its attachments, and the registries.

One :class:`_Integration` per detector, whatever number of session factories is
attached to it: the reactive layer's scope hook (an object's method events go to
its session's transaction), an occurrence listener (the log; it makes the
parameters loggable, or refuses them), the scheduler's rule observer (rule
firings; a failed rule dooms its transaction), the detached executor (the
outbox) and a rule check (detached actions must be importable). The registries
of attached session classes and integrations live here too, under one lock.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from sentinel.detector import events
from sentinel.errors import RuleError, ScopeError, SentinelError
from sentinel.log import LogPolicy
from sentinel.occurrence import Occurrence
from sentinel.orm.commit import PreCommit
from sentinel.orm.db_events import define_db_events
from sentinel.orm.logsink import firing_of
from sentinel.orm.outbox import check_importable
from sentinel.orm.state import KEY, LIVE, TxnState, clock_of
from sentinel.params import (
    MAX_INT_BITS,
    MAX_STRING,
    UnloggableParameter,
    normalize,
    too_large,
    unstorable_text,
)
from sentinel.reactive import attached_classes
from sentinel.reactive.classes import PLAIN
from sentinel.rules import LocalEventDetector, Rule

if TYPE_CHECKING:
    from sentinel.orm.attachment import Attachment

_LOCK = threading.RLock()
#: Attached session classes (a sessionmaker's own subclass, or the class given).
_ATTACHED: dict[type, Attachment] = {}
_INTEGRATIONS: weakref.WeakKeyDictionary[LocalEventDetector, _Integration] = (
    weakref.WeakKeyDictionary()
)

#: Parameter value types the log listener takes as they are (already loggable).
_LOGGABLE = PLAIN | {MappingProxyType}
#: Types of database events' column values passed as they are, and capped by
#: the log (``sentinel.params.too_large``) besides strings.
_CAPPED = frozenset({bytes, int})
#: The integers the log takes: those in (-_INT_CAP, _INT_CAP).
_INT_CAP = 1 << MAX_INT_BITS
#: Parameter names seen to be storable (names recur: one set lookup each).
_NAMES_OK: set[str] = set()


def _check_name(event: str, name: Any, value: Any) -> None:
    """Refuse a parameter name no backend's JSON keeps as a key (``**{"\\x00": 1}``
    in an explicit signal); remember a good one."""
    if type(name) is not str or unstorable_text(name) or len(name) > 1000:
        raise UnloggableParameter(
            event,
            repr(name)[:80],
            value,
            "parameter names must be strings of at most 1,000 characters without NUL "
            "characters or lone surrogates",
        )
    if len(_NAMES_OK) > 10_000:
        _NAMES_OK.clear()
    _NAMES_OK.add(name)


def _kept(
    policy: LogPolicy | None, event: str, params: dict[str, Any], path: tuple[str, ...]
) -> bool:
    """Whether the log keeps the value at ``path`` of ``params`` as it is (it
    drops an excluded value and replaces a redacted one)."""
    value: Any = params
    for p in path:
        value = value[p]
    view: Any = params if policy is None else policy.apply(event, params)
    for p in path:
        if not isinstance(view, Mapping) or p not in view:
            return False
        view = view[p]
    return view is value


def _refuse_logged(
    policy: LogPolicy | None, event: str, params: dict[str, Any], path: tuple[str, ...]
) -> None:
    """Raise for the value over its type's cap (a string too long, bytes, an
    integer too large) at ``path`` of ``params``, unless the log leaves it out."""
    if _kept(policy, event, params, path):
        value: Any = params
        for p in path:
            value = value[p]
        normalize(value, event=event, param=".".join(path))  # raises, naming both


def _normalize_mapping(
    policy: LogPolicy | None, event: str, params: dict[str, Any], name: str
) -> None:
    """Normalize the read-only mapping ``params[name]`` as a dict would be (or
    raise), unless the log leaves it out."""
    if _kept(policy, event, params, (name,)):
        params[name] = normalize(params[name], event=event, param=name)


def _make_loggable(policy: LogPolicy | None, event: str, params: dict[str, Any]) -> None:
    """Replace the values of ``params`` that are not loggable by loggable ones
    (or raise), leaving alone those the log leaves out."""
    for k, val in list(params.items()):
        if type(val) not in _LOGGABLE and _kept(policy, event, params, (k,)):
            params[k] = normalize(val, event=event, param=k)


# -- one detector ----------------------------------------------------------------------


class _Integration:
    """What sentinel installed on one detector for its attachments."""

    def __init__(self, detector: LocalEventDetector) -> None:
        self.detector = detector
        self.now = clock_of(detector)  # fired_at: on the clock of the occurrences' at
        self.attachments: list[Attachment] = []
        self.plans: dict[type, Any] = {}
        #: Occurrences of detection scopes that are not session transactions, by
        #: scope id, until their commit or abort says how to log them.
        self.foreign: dict[Any, list[Occurrence]] = {}
        self._listening = False
        #: Some attachment records rule runs whose condition was false.
        self.log_condition_false = False
        #: Scope ids of transactions ended (rolled back, committed, closed) while
        #: rules of theirs ran: the run fails (see :meth:`observe`). Each entry
        #: goes with its scope object (a weak reference's callback), so one no
        #: rule run took (a plain subscriber ended the transaction) is not kept.
        self.ended_in_rule: dict[Any, weakref.ref[Any]] = {}
        #: What sentinel listens to on the detector's events
        #: (:mod:`sentinel.detector.events`), besides ``occurrence`` while some
        #: attachment logs (:meth:`refresh_listener`). The first two take over
        #: (``insert=True``): the first listener alone answers them.
        self.listeners: tuple[tuple[str, Callable[..., Any], bool], ...] = (
            ("run_detached", self.execute_detached, True),  # through the outbox
            ("object_scope", self.scope_of, True),  # an object's session transaction
            ("rule_run", self.observe, False),  # the rule-firing log
            ("expired", self.on_expired, False),  # archived occurrences, marked in the log
            ("define_rule", check_importable, False),  # detached actions importable
            ("classes_attached", self.classes_attached, False),  # database events
        )

    # installation ---------------------------------------------------------------------
    def install(self) -> None:
        det = self.detector
        for name, fn, insert in self.listeners:
            events.listen(det, name, fn, insert=insert)
        define_db_events(det, attached_classes(det))

    def uninstall(self) -> None:
        det = self.detector
        for name, fn, _ in self.listeners:
            events.remove(det, name, fn)
        if self._listening:
            events.remove(det, "occurrence", self.on_occurrence)
            self._listening = False

    def refresh_listener(self) -> None:
        self.log_condition_false = any(a.log_condition_false for a in self.attachments)
        want = any(a.sink is not None for a in self.attachments)
        if want and not self._listening:
            events.listen(self.detector, "occurrence", self.on_occurrence)
            self._listening = True
        elif not want and self._listening:
            events.remove(self.detector, "occurrence", self.on_occurrence)
            self._listening = False

    @property
    def primary(self) -> Attachment | None:
        """The attachment that logs what belongs to no session transaction."""
        for a in self.attachments:
            if a.sink is not None:
                return a
        return self.attachments[0] if self.attachments else None

    def classes_attached(self, classes: list[type]) -> None:
        self.plans.clear()
        define_db_events(self.detector, classes)

    # the per-event hooks --------------------------------------------------------------
    def scope_of(self, obj: Any) -> Any:
        """The reactive layer's scope hook: the scope of ``obj``'s session's
        transaction (begun now, as SQLAlchemy's autobegin would, when the session
        has none), or ``None``."""
        try:
            state = obj.__dict__["_sa_instance_state"]
        except (AttributeError, KeyError, TypeError):
            return None
        session = state.session
        if session is None:
            return None
        st = session.info.get(KEY)
        if st is None:
            if _attachment_of(session) is None or not session.autobegin:
                return None
            autobegin = getattr(session, "_autobegin_t", None)
            if autobegin is None:  # pragma: no cover - guards a SQLAlchemy change
                return None
            autobegin()
            st = session.info.get(KEY)
            if st is None:
                return None
        if st.attachment.detector is not self.detector:
            return None
        if st.pre_committed:
            PreCommit.note_change(st)
        return st.scope

    def on_occurrence(self, occ: Occurrence) -> None:
        """The occurrence listener (under the detector's lock): buffer ``occ``
        for the log. Parameters that are not loggable are made so, or raise
        :class:`~sentinel.params.UnloggableParameter` (the signal fails), unless
        the log policy of the attachment that logs ``occ`` leaves them out; an
        occurrence no attachment logs is left alone."""
        ref = LIVE.get(occ[6])
        st = None if ref is None else ref()
        if st is not None:
            sink = st.attachment.sink
        else:
            primary = self.primary
            sink = None if primary is None else primary.sink
        if sink is None:
            return
        params = occ[5]
        if params:
            for k, v in params.items():
                if k not in _NAMES_OK:
                    _check_name(occ[0], k, v)
                t = type(v)
                if t is str:
                    if len(v) > MAX_STRING:
                        _refuse_logged(sink.writer.policy, occ[0], params, (k,))
                elif t is int:
                    if not -_INT_CAP < v < _INT_CAP:
                        _refuse_logged(sink.writer.policy, occ[0], params, (k,))
                elif t is MappingProxyType:
                    if occ[4] is None:
                        # an explicit event's own mapping (a database event's
                        # and a method's were normalized by their layers)
                        _normalize_mapping(sink.writer.policy, occ[0], params, k)
                        continue
                    # a database event's column values (``new``, ``old``)
                    for k2, v2 in v.items():
                        t2 = type(v2)
                        if (t2 is str and len(v2) > MAX_STRING) or (
                            t2 in _CAPPED and too_large(v2)
                        ):
                            _refuse_logged(sink.writer.policy, occ[0], params, (k, k2))
                elif t not in _LOGGABLE:
                    _make_loggable(sink.writer.policy, occ[0], params)
                    break
        if st is not None:
            st.occurrences.append(occ)
            return
        scope = occ[6]
        if scope == self.detector.process_scope.id:
            sink.add_late(("occ", occ, None))
            return
        pending = self.foreign.setdefault(scope, [])
        pending.append(occ)
        name = occ[0]
        if name == "txn:commit" or name == "txn:abort":
            del self.foreign[scope]
            outcome = "committed" if name == "txn:commit" else "aborted"
            for o in pending:
                sink.add_late(("occ", o, outcome))

    def on_expired(self, expired: list[Any]) -> None:
        """The bitemporal archive listener: mark the expired occurrences in the
        log (written with the late rows, after the rows themselves)."""
        primary = self.primary
        if primary is None or primary.sink is None:
            return
        for e in expired:
            occ = e.occurrence
            primary.sink.add_late(("expired", (str(occ[6]), occ[1], e.at)))

    def observe(self, rule: Rule, occ: Any, status: str, error: BaseException | None) -> None:
        """The scheduler's rule observer: buffer the firing; a failure dooms the
        transaction it happened in. A rule run that ended its own transaction
        fails (raises :class:`~sentinel.errors.RuleError`)."""
        if self.ended_in_rule:
            error = self._ended_by(rule, occ, error)
            if error is not None:
                status = "failed"
        if status == "condition_false" and not self.log_condition_false:
            return  # the common case of a guard rule: one comparison
        try:
            scope = occ.scope
        except Exception:  # pragma: no cover - an occurrence without constituents
            return
        ref = LIVE.get(scope)
        st = None if ref is None else ref()
        if st is not None and st.commit_refused is not None:
            error, status = self._refused_commit(rule, st), "failed"
        att = st.attachment if st is not None else self.primary
        if att is None:
            return
        if status == "condition_false" and not att.log_condition_false:
            return
        if st is not None:
            if att.sink is not None:
                st.firings.append((rule, occ, status, error, self.now()))
            if status == "failed" and isinstance(error, SentinelError):
                st.doom(rule.name, error)
        elif att.sink is not None:
            att.sink.add_late(("firing", firing_of((rule, occ, status, error, self.now()))))
        if status == "failed" and getattr(error, "ended_transaction", False):
            raise error  # type: ignore[misc]

    def note_ended(self, scope_id: Any, scope: Any) -> None:
        """Record that the transaction of ``scope_id`` ended while rules of
        its ran; the record goes when ``scope`` (its scope object) does."""
        ended = self.ended_in_rule

        def forget(_: object) -> None:
            ended.pop(scope_id, None)

        ended[scope_id] = weakref.ref(scope, forget)

    def _ended_by(self, rule: Rule, occ: Any, error: BaseException | None) -> Any:
        """The error of a rule run whose transaction ended while it ran (its
        action called ``rollback()``, ``commit()`` or ``close()`` on the session),
        or ``None``: the call that triggered the rule would otherwise go on in
        the session's next transaction, unnoticed."""
        try:
            scope = occ.scope
        except Exception:  # pragma: no cover - an occurrence without constituents
            return None
        if self.ended_in_rule.pop(scope, None) is None:
            return None
        if error is not None:
            return None  # it failed anyway: that error says more
        cause = ScopeError(
            "the transaction it ran in was ended while it ran (session.rollback(), "
            "commit() or close() in its action, or in a listener of the same event); "
            "the call that triggered it would go on in the session's next transaction. "
            "To abort the transaction, raise an exception in the action"
        )
        err = RuleError(rule.name, "action", cause)
        err.__cause__ = cause
        err.ended_transaction = True  # type: ignore[attr-defined]
        return err

    @staticmethod
    def _refused_commit(rule: Rule, st: TxnState) -> RuleError:
        """The error of a rule run that called ``session.commit()`` while its
        transaction committed (a deferred rule; see
        :func:`sentinel.orm.commit.commit_refused`): it fails, naming the rule,
        whatever it did with the refusal."""
        cause = st.commit_refused
        assert cause is not None
        st.commit_refused = None
        err = RuleError(rule.name, "action", cause)
        err.__cause__ = cause
        err.ended_transaction = True  # type: ignore[attr-defined]
        return err

    def execute_detached(self, rule: Rule, occ: Any, committed: bool) -> None:
        """The detector's detached executor: after a transaction ended (or at
        once, for a trigger outside any transaction)."""
        ref = LIVE.get(occ.scope)
        st = None if ref is None else ref()
        att = st.attachment if st is not None else self.primary
        if att is None:  # pragma: no cover - detached while a transaction ended
            return
        att._detached(rule, occ, committed, st)


def _attachment_of(session: Session) -> Attachment | None:
    for cls in type(session).__mro__:
        att = _ATTACHED.get(cls)
        if att is not None:
            return att
    return None
