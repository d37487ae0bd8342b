"""What sentinel installs on a detector for its attachments, and the registries.

One :class:`_Integration` per detector, whatever number of session factories is
attached to it: the reactive layer's scope hook (an object's method events go to
its session's transaction), an occurrence listener (the log; its parameters are
made loggable, or refused, by :func:`sentinel.log.loggable.loggable_params`),
the scheduler's rule observer (rule firings; a failed rule dooms its
transaction), the detached executor (the outbox) and a rule check (detached
actions must be importable). The registries of attached session classes and
integrations live here too, under one lock.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from sentinel.detector import events
from sentinel.errors import RuleError, ScopeError, SentinelError
from sentinel.log.loggable import loggable_params, loggable_values
from sentinel.occurrence import Occurrence
from sentinel.orm.commit import PreCommit
from sentinel.orm.db_events import define_db_events
from sentinel.orm.logsink import firing_of
from sentinel.orm.outbox import check_importable
from sentinel.orm.state import KEY, LIVE, TxnState, clock_of
from sentinel.reactive import attached_classes
from sentinel.rules import LocalEventDetector, Rule

if TYPE_CHECKING:
    from sentinel.orm.attachment import Attachment

_LOCK = threading.RLock()
#: Attached session classes (a sessionmaker's own subclass, or the class given).
_ATTACHED: dict[type, Attachment] = {}
_INTEGRATIONS: weakref.WeakKeyDictionary[LocalEventDetector, _Integration] = (
    weakref.WeakKeyDictionary()
)

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

    def on_occurrence(self, occ: Any) -> Any:
        """The occurrence listener (under the detector's lock): buffer ``occ``
        for the log. Parameters that are not loggable are made so, or raise
        :class:`~sentinel.params.UnloggableParameter` (the signal fails), unless
        the log policy of the attachment that logs ``occ`` leaves them out
        (:func:`~sentinel.log.loggable.loggable_values` decides); an occurrence
        no attachment logs is left alone. Returns the occurrence with its
        parameters made loggable when any had to be (the detector signals that
        one, so detection sees what the log keeps), else ``None``."""
        ref = LIVE.get(occ[6])
        st = None if ref is None else ref()
        if st is not None:
            sink = st.attachment.sink
        else:
            primary = self.primary
            sink = None if primary is None else primary.sink
        if sink is None:
            return
        made = None
        values = occ[5]
        if values:
            # database events' and methods' mappings were made by their layers
            names = occ[7]
            if names is None:  # a mapping (the graph's other form): checked in place
                loggable_params(sink.writer.policy, occ[0], values, occ[4] is not None)
            else:
                v = loggable_values(sink.writer.policy, occ[0], names, values, occ[4] is not None)
                if v is not None:
                    occ = made = (*occ[:5], v, occ[6], names)
        if st is not None:
            st.occurrences.append(occ)
            return made
        scope = occ[6]
        if scope == self.detector.process_scope.id:
            sink.add_late(("occ", occ, None))
            return made
        pending = self.foreign.setdefault(scope, [])
        pending.append(occ)
        name = occ[0]
        if name == "txn:commit" or name == "txn:abort":
            del self.foreign[scope]
            outcome = "committed" if name == "txn:commit" else "aborted"
            for o in pending:
                sink.add_late(("occ", o, outcome))
        return made

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
