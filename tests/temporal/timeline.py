"""A history on a virtual clock, in the paper's notation.

``Timeline.run("E1", 4, "E1", 10)`` signals E1, moves the clock 4 seconds, signals
E1 again, moves 10 seconds. Occurrences get labels: the i-th E1 is ``e1^i``, a
tick due at second 14 of the timeline is ``t14``, an absolute event ``a``
followed by its second. Every primitive occurrence (ticks included) is recorded
in ``log``, the way the event log sees them, so tests can replay it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from sentinel import TICK, Context, LocalEventDetector, Occurrence, VirtualClock
from sentinel.detector import Scope
from sentinel.detector.events import listen
from sentinel.occurrence import finished

START = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC: an ordinary, non-zero epoch


class Timeline:
    def __init__(
        self,
        events: Iterable[str] = ("E1", "E2", "E3"),
        *,
        start: float = START,
        clock: VirtualClock | None = None,
    ) -> None:
        self.clock = clock or VirtualClock(start)
        self.start = self.clock.now()
        self.det = LocalEventDetector(clock=self.clock)
        for name in events:
            self.det.explicit(name)
        self.labels: dict[int, str] = {}
        self._counts: dict[str, int] = {}
        self.log: list[Occurrence] = []
        self.detections: dict[str, list[Any]] = {}
        listen(self.det, "occurrence", self._record)

    def _record(self, raw: Any) -> None:
        occ = finished(raw)
        self.log.append(occ)
        if occ.event == TICK:
            label = f"t{occ.timestamp - self.start:g}"
        elif occ.event.startswith("<"):
            label = f"a{occ.timestamp - self.start:g}"
        else:
            n = self._counts[occ.event] = self._counts.get(occ.event, 0) + 1
            label = f"{occ.event.lower().replace('txn:', '')}^{n}"
        self.labels[occ.t_occ] = label

    def watch(
        self, name: str, expression: Any, context: Context | str = "recent", **kw: Any
    ) -> list[Any]:
        out: list[Any] = []
        self.detections[name] = out
        self.det.rule(name, expression, action=out.append, context=context, **kw)
        return out

    def run(self, *steps: str | float, **params: Any) -> None:
        """Signal each name (with ``params``), advance by each number."""
        for step in steps:
            if isinstance(step, str):
                self.det.signal(step, **params)
            else:
                self.clock.advance(step)

    def at(self, second: float) -> None:
        """Move the clock to ``second`` of the timeline."""
        self.clock.set(self.start + second)

    def label(self, occ: Any) -> str:
        return "{" + ", ".join(self.labels[c.t_occ] for c in occ.constituents) + "}"

    def labelled(self, name: str) -> list[str]:
        return [self.label(o) for o in self.detections[name]]


def signature(occ: Any) -> tuple[Any, ...]:
    """What identifies a detection across online and replay: its constituents'
    events, scopes, ``t_occ`` and times."""
    return tuple((c.event, str(c.scope), c.t_occ, c.timestamp) for c in occ.constituents)


def replay(det: LocalEventDetector, log: Iterable[Occurrence]) -> dict[str, list[Any]]:
    """Run ``log`` through a replica of ``det`` with :meth:`inject`, as replay
    does: each logged scope in a scope of its own (the process scope's occurrences
    in the replica's process scope), ended (and flushed) when its ``txn:commit`` or
    ``txn:abort`` has been injected. Returns the replica's detections per rule."""
    rep = det.replica()
    seen: dict[str, list[Any]] = {}
    for name in list(rep.rules):
        r = rep.get_rule(name)
        out = seen[name] = []
        kw = {
            "context": r.context,
            "coupling": r.coupling,
            "priority": r.priority,
            "trigger_mode": r.trigger_mode,
            "flush": r.flush,
        }
        event = r.event
        r.delete()
        rep.rule(name, event, r.condition, action=out.append, **kw)
    scopes: dict[Hashable, Scope] = {det.process_scope.id: rep.process_scope}
    for occ in log:
        scope = scopes.get(occ.scope)
        if scope is None:
            scope = scopes[occ.scope] = rep.scope(occ.scope)
        rep.inject(occ, scope)
        if occ.event in ("txn:commit", "txn:abort") and scope.active:
            rep.end_scope(scope, "committed" if occ.event == "txn:commit" else "aborted")
    return seen
