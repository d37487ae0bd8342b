"""Feeding committed log rows, in commit order, to a detector of all processes.

:class:`CommitFeeder` is the detection step shared by the service and by batch
replay in commit order (:func:`replay_committed`): rows in, detections out, no
I/O. It holds a :class:`~sentinel.replay.recorder.ReplayDetector` built from
the application's rules, in which

- each occurrence gets a *global* ``t_occ``: ``commit_seq * 2**20 + rank``, its
  rank being its place among its transaction's rows (insertion order), or the
  next number after a tick that a timer signalled just before it. The
  processes' own ``t_occ`` clocks are independent of each other; this one
  orders everything the global detector sees, and is what its detections'
  constituents carry (``scope`` stays the writing transaction's);
- the scopes a commit's rows belong to end, committed, when that commit's rows
  are all in: detached rules, the only kind a global detector runs, are
  detected then. Rules that flush per transaction therefore still combine only
  one transaction's occurrences; rules spanning processes have
  ``flush=False``, as rules spanning transactions do in one process;
- conditions are *not* evaluated here: the outbox worker evaluates them in the
  action's transaction, as for any detached rule;
- temporal events run on a :class:`~sentinel.temporal.VirtualClock` moved by
  the log: before each row, to that row's detection time (``detected_ts``: when
  its process received the event) when it is later than the clock; and by
  *clock rows* (event :data:`CLOCK_EVENT`), which
  the service commits to the log when a timer is due and nothing else commits
  (:meth:`~sentinel.global_detector.GlobalDetector.step`). Because the clock
  only moves with committed rows, batch replay of the same log fires the same
  timers at the same places. The processes' own ticks (``temporal:tick`` rows
  of their local rules) are not read;
- a row whose time could only have been forged or corrupted is refused before it
  moves the clock (reported and skipped, as a row whose parameters cannot be
  read): an occurrence or detection time that is not a finite number; and,
  when the rules have temporal events (without timers a row's time matters to
  no detection), a detection time more than ``max_ahead`` seconds ahead of the
  reading machine's clock (in the year 9999, every timer would fire at once, a
  periodic one without end) or more than ``max_late`` seconds behind the log's
  clock (its relative and
  periodic timers would start that far back, and a periodic one would catch up
  one tick per period). A late row within ``max_late`` is normal (a long
  transaction's row): it does not move the clock. Occurrence times are the
  events' own (an event announced for later, or reported late, has its
  occurrence time away from its detection time, see ``docs/bitemporal.md``):
  they are read as they are and do not move the clock.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from math import isfinite
from sys import float_info
from typing import Any, Final

from sentinel.algebra.expressions import Keyed, Primitive
from sentinel.errors import GlobalDetectorError
from sentinel.log.records import source_ref
from sentinel.occurrence import Occurrence, split_params
from sentinel.replay.recorder import ReplayDetector, decode_params
from sentinel.rules import Coupling, LocalEventDetector
from sentinel.temporal import VirtualClock

__all__ = [
    "CLOCK_EVENT",
    "RANK_BITS",
    "CommitFeeder",
    "Detection",
    "check_rules",
    "global_t_occ",
    "is_temporal",
    "row_params",
]

#: The event of the rows a global detector commits to move its clock: their
#: ``ts`` is the time the clock moves to; nothing else reads them.
CLOCK_EVENT: Final = "sentinel:global_clock"

log = logging.getLogger("sentinel.global")

#: Bits of a global ``t_occ`` that hold a row's rank within its commit.
RANK_BITS: Final = 20
_MAX: Final = float_info.max
_new = tuple.__new__


def global_t_occ(commit_seq: int, rank: int) -> int:
    """The global ``t_occ`` of the ``rank``-th row (from 0) of commit ``commit_seq``."""
    return (commit_seq << RANK_BITS) | rank


@dataclass(frozen=True, slots=True)
class Detection:
    """A detection of the global detector: the rule and the occurrence its
    detached action receives (primitive or composite)."""

    rule: str
    occurrence: Any
    commit_seq: int


def is_temporal(expr: Any) -> bool:
    """Whether the event expression ``expr`` has temporal events (timers)."""
    from sentinel.algebra.temporal import Absolute, P, Pstar, Relative

    return any(isinstance(e, (Absolute, Relative, P, Pstar)) for e in expr.walk())


def check_rules(det: LocalEventDetector) -> None:
    """Raise :class:`~sentinel.errors.GlobalDetectorError` unless every enabled
    rule of ``det`` is detached and causally dependent (the global detector sees
    only committed transactions, so it has nothing else to run)."""
    if not det.rules:
        raise GlobalDetectorError("the global detector's rule set defines no rule")
    bad = [r.name for r in det.rules.values() if r.enabled and r.coupling != Coupling.DETACHED]
    if bad:
        raise GlobalDetectorError(
            f"rule(s) {', '.join(map(repr, bad))} of the global detector are not detached: "
            "it sees transactions after they committed, so its rules run detached "
            "(coupling='detached'), their effects through the outbox"
        )


class _GlobalReplayDetector(ReplayDetector):
    """Records detached detections without evaluating their conditions; runs
    its own timers on a virtual clock (see the module docs)."""

    #: Where the virtual clock starts (set per feeder: the first row's time).
    start = 0.0

    def __init__(self, **kwargs: Any) -> None:
        kwargs["clock"] = VirtualClock(self.start)
        kwargs["replaying"] = False
        super().__init__(**kwargs)

    def _record_detached(self, rule: Any, occ: Any, committed: bool) -> None:
        if committed:
            self.scheduler.records.append(
                (rule.name, rule.coupling._value_, self.scheduler.scope_id, occ, None, None)
            )


class CommitFeeder:
    """Feeds whole commits of log rows to a fresh detector of ``rules`` and
    returns the detections each commit completes. Not thread-safe.

    ``max_ahead``, ``max_late`` and ``now`` bound the rows' detection times
    when the rules have temporal events (see the module docs): a row more than
    ``max_ahead`` seconds ahead of ``now()`` (read once per :meth:`feed`), or
    more than ``max_late`` seconds behind the log's clock, is skipped and
    reported; ``None`` lifts a bound. Rows whose times are not finite numbers
    are skipped whatever the rules."""

    def __init__(
        self,
        rules: LocalEventDetector,
        *,
        max_ahead: float | None = 300.0,
        max_late: float | None = 86_400.0,
        now: Callable[[], float] = time.time,
    ) -> None:
        check_rules(rules)
        for name, bound in (("max_ahead", max_ahead), ("max_late", max_late)):
            if bound is not None and not (isfinite(bound) and bound >= 0):
                raise GlobalDetectorError(
                    f"{name} must be a number of seconds at least 0 (or None), not {bound!r}"
                )
        self.rules = rules
        self.now = now
        self._asked = (max_ahead, max_late)
        # made at the first row, with the clock at its time: absolute temporal
        # events are armed from there, not from 1970
        self._detector: _GlobalReplayDetector | None = None
        self._records: list[Any] = []
        self._refs: dict[tuple[str, str | None], Any] = {}
        #: The last commit fed (0: none).
        self.position = 0
        #: The largest detection time (``detected_ts``) fed: where the clock stands.
        self.log_time: float | None = None
        self.rows = 0
        #: ``(id, error)`` of the rows that could not be read (a bad source key or
        #: parameters: rows not written by sentinel); they were skipped.
        self.skipped: list[tuple[int, str]] = []
        #: Rule switches (:mod:`sentinel.global_detector.switches`) still to
        #: apply, ``(position, rule, enabled)`` in order: each is applied once the
        #: feed passed commit ``position``, before the next commit.
        self._switches: list[tuple[int, str, bool]] = []
        #: The rules switched so far, and their state (applied to the detector
        #: when it is made, at the first row).
        self.switched: dict[str, bool] = {}
        self._enabled_changed()

    def _enabled_changed(self) -> None:
        """Derive what depends on which rules are enabled: the bounds on the
        rows' times, and the parameters that must be keys."""
        on = [r for r in self.rules.rules.values() if self.switched.get(r.name, r.enabled)]
        # a row's time matters only to timers: without them a bound would refuse
        # rows for nothing (a writer's clock running fast would lose its rows),
        # and the service, a restarted one and batch replay would disagree
        timed = any(is_temporal(r.event) for r in on)
        #: Whether the enabled rules have temporal events (timers).
        self.timed = timed
        max_ahead, max_late = self._asked
        self.max_ahead = max_ahead if timed else None
        self.max_late = max_late if timed else None
        #: Per event, the parameters the enabled rules partition it by (``... by
        #: name``): a row whose value of one cannot be a key is refused before any
        #: rule sees it.
        keys: dict[str, set[str]] = {}
        for rule in on:
            for e in rule.event.walk():
                if isinstance(e, Keyed) and isinstance(e.key, str):
                    for p in e.expression.walk():
                        if isinstance(p, Primitive):
                            keys.setdefault(p.name, set()).add(e.key)
        self._keys = {name: tuple(sorted(ks)) for name, ks in keys.items()}

    # -- rule switches -----------------------------------------------------------------
    def refusal(self, rule: str, enabled: bool) -> str | None:
        """Why switching ``rule`` to ``enabled`` cannot be applied (``None``: it can)."""
        r = self.rules.rules.get(rule)
        if r is None:
            known = ", ".join(map(repr, sorted(self.rules.rules)))
            return f"the global detector's rule set defines no rule named {rule!r} ({known})"
        if enabled and r.coupling != Coupling.DETACHED:
            return (
                f"rule {rule!r} is not detached ({r.coupling}): the global detector runs "
                "detached rules only"
            )
        return None

    def switch(self, rule: str, enabled: bool) -> None:
        """Enable or disable ``rule`` now, after commit :attr:`position` (call
        it between two :meth:`feed` calls): ``Rule.enable()`` / ``disable()``
        on the detector, with their semantics (a disabled rule's state that no
        other rule needs is dropped; re-enabled under the NOW trigger mode, it
        combines only occurrences fed after this). Switches scheduled at or
        before :attr:`position` are applied first. Raises
        :class:`~sentinel.errors.GlobalDetectorError` with :meth:`refusal`'s
        reason."""
        self._apply_due(self.position)
        why = self.refusal(rule, enabled)
        if why is not None:
            raise GlobalDetectorError(why)
        self.switched[rule] = enabled
        if self._detector is not None:
            self._set(self._detector, rule, enabled)
        self._enabled_changed()

    def schedule(self, switches: Iterable[tuple[int, str, bool]]) -> None:
        """Switches to apply as the feed passes them: ``(position, rule,
        enabled)``, each applied after commit ``position`` and before the next
        one fed (those at or before :attr:`position`: now). A switch that
        cannot be applied (:meth:`refusal`: its rule left the rule set) is
        reported on the ``sentinel.global`` logger and passed over."""
        self._switches.extend(switches)
        self._switches.sort(key=lambda s: s[0])  # stable: same position, as given
        self._apply_due(self.position)

    def _apply_due(self, before: int) -> None:
        """Apply the scheduled switches at positions up to ``before``."""
        due = self._switches
        while due and due[0][0] <= before:
            position, rule, enabled = due.pop(0)
            why = self.refusal(rule, enabled)
            if why is not None:
                log.error(
                    "sentinel global: the switch of rule %r applied at position %d is "
                    "passed over: %s",
                    rule,
                    position,
                    why,
                )
                continue
            self.switched[rule] = enabled
            if self._detector is not None:
                self._set(self._detector, rule, enabled)
            self._enabled_changed()

    @staticmethod
    def _set(det: _GlobalReplayDetector, rule: str, enabled: bool) -> None:
        r = det.rules[rule]
        if enabled:
            r.enable()
        else:
            r.disable()

    @property
    def detector(self) -> _GlobalReplayDetector | None:
        """The detector (``None`` before the first row)."""
        return self._detector

    def _start(self, ts: float) -> _GlobalReplayDetector:
        cls: type[_GlobalReplayDetector] = type(
            "_GlobalReplayDetector", (_GlobalReplayDetector,), {"start": ts}
        )
        det = cls.of(self.rules)
        assert isinstance(det, _GlobalReplayDetector)
        for rule, enabled in self.switched.items():
            self._set(det, rule, enabled)
        self._detector = det
        self._records = det.scheduler.records
        return det

    def next_due(self) -> float | None:
        """When the detector's earliest timer is due (``None``: no timer)."""
        if self._detector is None:
            return None
        clock = self._detector.wall_clock
        assert isinstance(clock, VirtualClock)
        return clock.next_due

    def feed(
        self,
        rows: Iterable[Any],
        ranks: Iterable[int] | None = None,
        clocks: Iterable[float | None] | None = None,
    ) -> list[Detection]:
        """Feed rows (:class:`~sentinel.global_detector.order.LogRow`, in commit
        order, whole commits, after :attr:`position`); return the detections.
        Scheduled switches (:meth:`schedule`) are applied between the commits
        they fall between.

        ``ranks``, when given, are the rows' ranks in their commits (one per
        row): for a caller feeding only part of each commit's rows (the Spark
        streaming job feeds one key's), so that their global ``t_occ`` is the
        one the whole commit gives them. ``clocks``, when given, are where the
        log's clock stood before each row (``None``: unknown), moved by the rows
        not fed: such a caller's detector then purges (lifespans) where one fed
        every row would."""
        if not self._switches:
            return self._feed(rows, ranks, clocks)
        rows = list(rows)
        given = None if ranks is None else list(ranks)
        hints = None if clocks is None else list(clocks)

        def part(a: int, b: int | None) -> list[Detection]:
            return self._feed(
                rows[a:b],
                None if given is None else given[a:b],
                None if hints is None else hints[a:b],
            )

        out: list[Detection] = []
        start = 0
        for i, r in enumerate(rows):
            if self._switches and self._switches[0][0] < r.commit_seq:
                if i > start:  # the commits before the switch
                    out.extend(part(start, i))
                    start = i
                self._apply_due(r.commit_seq - 1)
        out.extend(part(start, None))
        return out

    def advance(self, log_time: float) -> None:
        """Move the log's clock to ``log_time`` (not back), as rows not fed
        here would have: the lifespans' purges due by then happen. For a caller
        feeding part of the log (:meth:`feed`'s ``clocks``)."""
        if not isfinite(log_time) or (self.log_time is not None and log_time <= self.log_time):
            return
        self.log_time = log_time
        det = self._detector
        if det is not None:
            clock = det.wall_clock
            assert isinstance(clock, VirtualClock)
            if log_time > clock.now():
                clock.set(log_time)

    def _feed(
        self,
        rows: Iterable[Any],
        ranks: Iterable[int] | None = None,
        clocks: Iterable[float | None] | None = None,
    ) -> list[Detection]:
        rows = list(rows)
        given = None if ranks is None else iter(ranks)
        moved = None if clocks is None else list(clocks)
        hints = None if moved is None else iter(moved)
        if not rows:
            return []
        # rows beyond these times are refused (see the module docs); the
        # largest floats, where a bound is lifted, keep out only infinities
        ahead = _MAX if self.max_ahead is None else self.now() + self.max_ahead
        late = self.max_late
        det = self._detector
        if det is None:
            # the clock starts at the first row with a time it can stand at
            start = next(
                (r.detected_ts for r in rows if isfinite(r.detected_ts) and r.detected_ts <= ahead),
                None,
            )
            if start is None:  # no row here has a time the clock could start at
                self._refuse_all(rows, ahead)
                for hint in moved or ():
                    if hint is not None:
                        self.advance(hint)
                return []
            det = self._start(start)
        log_time = self.log_time
        floor = -_MAX if late is None or log_time is None else log_time - late
        inject, listens = det.inject, det.listens
        clock = det.wall_clock
        assert isinstance(clock, VirtualClock)
        now = clock.now
        timed = self.timed
        out: list[Detection] = []
        seq = -1
        rank = 0
        opened: dict[str, Any] = {}
        refs = self._refs
        keys_of = self._keys.get
        # whether the rules listen to an event: the same for the whole feed
        # (switches are applied between feeds)
        listened: dict[str, bool] = {CLOCK_EVENT: False}
        bits, most = RANK_BITS, 1 << RANK_BITS
        self.rows += len(rows)  # a feed that fails drops the feeder
        for r in rows:
            if r.commit_seq != seq:
                if seq != -1:
                    self._end(opened, seq, out)
                if r.commit_seq <= self.position:
                    raise GlobalDetectorError(
                        f"commit {r.commit_seq} fed after commit {self.position}: rows must "
                        "come in commit order, each commit once"
                    )
                seq, rank = r.commit_seq, 0
                self.position = seq
            if given is not None:
                rank = next(given)
            if hints is not None:
                hint = next(hints)
                if hint is not None and (log_time is None or hint > log_time):
                    # the log's clock, moved by rows fed elsewhere
                    self.log_time = log_time = hint
                    if late is not None:
                        floor = hint - late
                    if hint > now():
                        clock.set(hint)
            if rank >= most:
                raise GlobalDetectorError(
                    f"commit {seq} wrote more than {1 << RANK_BITS} log rows; the global "
                    "detector numbers at most that many per transaction"
                )
            ts = r.detected_ts  # the log's clock: when its process received the event
            if not (floor <= ts <= ahead and isfinite(r.ts)):
                # a row written by hand: moving the clock to infinity (or to the
                # year 9999) would fire every timer at once, a periodic one
                # without end; a row far behind the clock starts timers that far
                # back. One comparison per row; the reason is found here only.
                rank += 1
                self._skip(r, self._bad_time(r, ahead, floor))
                continue
            if log_time is None or ts > log_time:
                self.log_time = log_time = ts
                if late is not None:
                    floor = ts - late
            if ts > now():
                clock.set(ts)  # fires the timers due before this row
            # after the ticks those timers signalled (they took the next t_occs);
            # without timers the only ticks are the lifespans' purges, which no
            # rule sees: a row keeps its number, wherever a purge fell (a detector
            # fed one key's rows purges at other places than one fed them all)
            t = (seq << bits) | rank  # global_t_occ
            rank += 1
            event = r.event
            heard = listened.get(event)
            if heard is None:
                heard = listened[event] = bool(listens(event))
            if not heard:
                continue
            if timed and t <= det.clock:
                t = det.clock + 1
            scope = opened.get(r.scope)
            if scope is None:
                scope = opened[r.scope] = det.scope(r.scope)
            try:
                if r.source_class is None:
                    source = None
                else:
                    key = (r.source_class, r.source_key)
                    source = refs.get(key)
                    if source is None:
                        if len(refs) > 65_536:
                            refs.clear()
                        source = refs[key] = source_ref(r.source_class, r.source_key)
                params = r.params
                if type(params) is not dict or not _ready(params):
                    params = row_params(params)
                for name in keys_of(r.event, ()):
                    value = params.get(name)
                    try:
                        hash(value)
                    except TypeError:
                        raise TypeError(
                            f"its parameter {name!r}, which rules are partitioned by, is "
                            f"{value!r:.80}, which cannot be a partition key (not hashable)"
                        ) from None
            except Exception as err:  # a row written by hand: it must not stop the rest
                self._skip(r, f"{type(err).__name__}: {err}")
                continue
            values, names = split_params(params)
            occ = _new(
                Occurrence, (r.event, t, r.ts, r.detected_ts, source, values, r.scope, names)
            )
            inject(occ, scope)
        if seq != -1:
            self._end(opened, seq, out)
        return out

    def _refuse_all(self, rows: list[Any], ahead: float) -> None:
        """Skip ``rows`` (none of which has a time the clock may start at),
        keeping the commit order's bookkeeping: the detector is made at the
        first row that has one."""
        seq = -1
        for r in rows:
            if r.commit_seq != seq:
                if r.commit_seq <= self.position:
                    raise GlobalDetectorError(
                        f"commit {r.commit_seq} fed after commit {self.position}: rows must "
                        "come in commit order, each commit once"
                    )
                seq = self.position = r.commit_seq
            self.rows += 1
            self._skip(r, self._bad_time(r, ahead, -_MAX))

    def _bad_time(self, r: Any, ahead: float, floor: float) -> str:
        """Why the time of the row ``r`` was refused."""
        if not (isfinite(r.ts) and isfinite(r.detected_ts)):
            return (
                f"ValueError: its occurrence time ({r.ts!r}) or detection time "
                f"({r.detected_ts!r}) is not a finite number"
            )
        if r.detected_ts > ahead:
            return (
                f"ValueError: its detection time ({_when(r.detected_ts)}) is more than "
                f"{self.max_ahead:g} s ahead of this machine's clock "
                f"({_when(ahead - (self.max_ahead or 0.0))})"
            )
        return (
            f"ValueError: its detection time ({_when(r.detected_ts)}) is more than "
            f"{self.max_late:g} s behind the log's clock ({_when(floor + (self.max_late or 0.0))})"
        )

    def _skip(self, r: Any, why: str) -> None:
        """Report the row ``r``, which cannot be read, and record it as skipped."""
        self.skipped.append((r.id, why[:500]))
        log.error(
            "sentinel global: log row %d (%s in scope %s) cannot be read and is skipped: %s",
            r.id,
            r.event,
            r.scope,
            self.skipped[-1][1],
        )

    def _end(self, opened: dict[str, Any], seq: int, out: list[Detection]) -> None:
        det = self._detector
        assert det is not None
        for scope in opened.values():
            det.end_scope(scope, "committed")
        opened.clear()
        records = self._records
        for name, _coupling, _scope, occ, _ok, _err in records:
            out.append(Detection(name, occ, seq))
        records.clear()


_PLAIN: Final = frozenset({str, int, bool, type(None)})
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def row_params(params: Any) -> dict[str, Any]:
    """A log row's parameters as its occurrence carries them: from their JSON
    text, or from the JSON object :meth:`CommitReader.read` parsed
    (``parsed=True``; taken as it is when its values are all plain). Raises
    :class:`~sentinel.errors.ReplaySourceError` or :class:`TypeError` for what
    is not the object of parameters the log writes."""
    if type(params) is dict and _ready(params):
        return params
    text = params if type(params) is str else _dumps(params)
    out = decode_params(text) if text != "{}" else {}
    if not isinstance(out, dict):
        raise TypeError(f"parameters are a {type(out).__name__}, not an object")
    return out


def _ready(params: dict[str, Any]) -> bool:
    """Whether a row's parameters, as :meth:`CommitReader.read` parsed them
    (``parsed=True``), are what :func:`decode_params` makes of their text:
    plain values only (tagged ones are decoded from the text)."""
    if _PLAIN.issuperset(map(type, params.values())):
        return True
    for v in params.values():
        t = type(v)
        if t is float:
            if not -(2.0**63) < v < 2.0**64:
                return False
        elif t not in _PLAIN:
            return False
    return True


def _when(ts: float) -> str:
    """``ts`` (POSIX seconds) as UTC ISO text, or as a number out of its range."""
    try:
        return datetime.fromtimestamp(ts, UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        return repr(ts)
