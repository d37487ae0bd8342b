"""Workloads for the replay tests: rules from specs, an online run that captures
its detections and writes the log as it goes, and detections in one comparable
form.

Rules are rebuilt from :class:`RuleSpec` values, so the same rules exist online,
in a local replay and (through the references ``tests.replay.workload:...``) in
Spark's Python workers. :func:`spec_detector` reads the specs from the JSON file
named by ``SENTINEL_TEST_RULES`` (how a hypothesis example reaches the workers).

Online, every rule's condition (or, without one, its action) records the
detection with the scope being driven, the constituents' ids and parameters, and
the condition's result; detached rules run where the online detector hands them
to its executor. A replay must produce exactly these records.
"""

from __future__ import annotations

import json
import os
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa

from sentinel import Context, Coupling, LocalEventDetector, ObjectRef, Scope
from sentinel.detector.events import listen
from sentinel.log import LogWriter, Outcome
from sentinel.occurrence import finished
from sentinel.params import dumps

EVENTS = ("E1", "E2", "E3", "E4")
#: Events defined on every detector that no rule listens to.
NOISE = ("N1", "N2", "N3")
SPEC_ENV = "SENTINEL_TEST_RULES"

#: A detection as both sides record it: rule, coupling, scope, t_occ,
#: constituent ids, parameters (JSON), condition result.
Detection = tuple[str, str, str, int, tuple[tuple[str, int], ...], str, Any]


# -- rules ---------------------------------------------------------------------------
def _even(occ: Any) -> bool:
    return sum(occ.values("v")) % 2 == 0


def _small_k(occ: Any) -> bool:
    return any(k < 2 for k in occ.values("k"))


def _many(occ: Any) -> bool:
    return len(occ.constituents) > 2


CONDITIONS: dict[str, Callable[[Any], bool] | None] = {
    "none": None,
    "even": _even,
    "small_k": _small_k,
    "many": _many,
}


@dataclass(frozen=True)
class RuleSpec:
    name: str
    event: str  # Snoop text over EVENTS and the txn:* events
    context: str = "recent"
    coupling: str = "immediate"
    condition: str = "none"
    flush: bool = True
    priority: int = 0
    signals: str | None = None  # an event the action signals (online only)


_capture: list[Detection] | None = None
_scope: str | None = None


def detection_of(rule: str, coupling: str, scope: str, occ: Any, ok: Any) -> Detection:
    cons = occ.constituents
    params = "[" + ",".join(dumps(c.params) for c in cons) + "]"
    return (rule, coupling, scope, occ.t_occ, tuple((c.scope, c.t_occ) for c in cons), params, ok)


def _hooks(spec: RuleSpec, det: LocalEventDetector) -> tuple[Any, Any]:
    test = CONDITIONS[spec.condition]
    coupling = Coupling.parse(spec.coupling).value

    def record(occ: Any, ok: bool) -> None:
        if _capture is not None:
            assert _scope is not None
            _capture.append(detection_of(spec.name, coupling, _scope, occ, ok))

    def condition(occ: Any) -> bool:
        assert test is not None
        ok = test(occ)
        record(occ, ok)
        return ok

    def action(occ: Any) -> None:
        if test is None:
            record(occ, True)
        if spec.signals is not None and _capture is not None:
            det.signal(spec.signals, k=occ.t_occ % 4, v=7)

    return (None if test is None else condition), action


def build(specs: Iterable[RuleSpec]) -> LocalEventDetector:
    """A detector with EVENTS and the rules ``specs`` describe."""
    det = LocalEventDetector()
    for name in (*EVENTS, *NOISE):
        det.explicit(name)
    for spec in specs:
        condition, action = _hooks(spec, det)
        det.rule(
            spec.name,
            spec.event,
            condition,
            action=action,
            context=spec.context,
            coupling=spec.coupling,
            priority=spec.priority,
            flush=spec.flush,
        )
    return det


def write_specs(path: str | os.PathLike[str], specs: Sequence[RuleSpec]) -> None:
    with open(path, "w") as f:
        json.dump([asdict(s) for s in specs], f)


def spec_detector() -> LocalEventDetector:
    """The rules in the JSON file ``$SENTINEL_TEST_RULES`` (for Spark workers)."""
    with open(os.environ[SPEC_ENV]) as f:
        return build(RuleSpec(**d) for d in json.load(f))


SHAPES = ("E1 ; E2", "(E1 ^ E3) by k", "NOT(E4)[E1, E3]", "A*(E1, E2, E3)", "ANY(2, E2, E3, E4)")


def matrix_specs(*, compact: bool = False) -> list[RuleSpec]:
    """Every context in every coupling mode over a few operators (all of
    :data:`SHAPES`, or with ``compact`` one of the first three per pair), with conditions,
    priorities, rules on transaction events, cross-transaction rules and an
    action that signals."""
    specs: list[RuleSpec] = []
    conditions = list(CONDITIONS)
    n = 0
    for ci, context in enumerate(Context):
        for pi, coupling in enumerate(Coupling):
            if not compact:
                shapes: Sequence[int] = range(len(SHAPES))
            elif context is Context.UNRESTRICTED:
                shapes = [2]  # NOT: the unrestricted context's fewest combinations
            else:
                shapes = [(ci + pi) % len(SHAPES)]
            for si in shapes:
                if context is Context.UNRESTRICTED and SHAPES[si].startswith(("A*", "ANY")):
                    continue  # combinatorial: enough with the others
                n += 1
                specs.append(
                    RuleSpec(
                        f"r{n:02d}_{context.value}_{coupling.value}_{si}",
                        SHAPES[si],
                        context.value,
                        coupling.value,
                        conditions[(ci + pi + si) % len(conditions)],
                        priority=(n % 3) - 1,
                    )
                )
    specs += [
        RuleSpec("commit_after_e2", "E2 ; txn:commit", "chronicle"),
        RuleSpec("begin_e1", "txn:begin ; E1", "recent", "deferred", "small_k"),
        RuleSpec("echo", "E3", "recent", "immediate", "none", signals="E4"),
        RuleSpec("span_keyed", "(E1 ; E2) by k", "chronicle", "immediate", "even", flush=False),
        RuleSpec("span_keyed_detached", "(E2 ; E3) by k", "recent", "detached", flush=False),
    ]
    return specs


def compact_detector() -> LocalEventDetector:
    return build(matrix_specs(compact=True))


def matrix_detector() -> LocalEventDetector:
    return build(matrix_specs())


# -- the online run --------------------------------------------------------------------
class Online:
    """Drives a detector as an application would and records the log and the
    detections. With ``engine`` the log is written with :class:`LogWriter` as it
    happens: a committed transaction's occurrences in their own database
    transaction, an aborted one's with ``write_aborted``, the process scope's at
    :meth:`finish`."""

    def __init__(self, det: LocalEventDetector, engine: sa.Engine | None = None) -> None:
        self.det = det
        self.engine = engine
        self.writer = LogWriter()
        self.by_scope: dict[str, list[Any]] = defaultdict(list)
        self.rows: list[tuple[Any, str | None]] = []
        self.detections: list[Detection] = []
        self.open: dict[str, Scope] = {}
        self._n = 0
        listen(det, "occurrence", lambda occ: self.by_scope[occ[6]].append(finished(occ)))
        listen(det, "run_detached", lambda rule, occ, committed: det.scheduler.run(rule, occ))

    def _drive(self, scope_id: str, fn: Callable[[], Any], scope: Scope | None = None) -> Any:
        """Run ``fn`` with detections recorded for ``scope_id`` (and ``scope`` the
        current scope, for what actions signal)."""
        global _capture, _scope
        _capture, _scope = self.detections, scope_id
        try:
            if scope is None:
                return fn()
            with self.det.use_scope(scope):
                return fn()
        finally:
            _capture, _scope = None, None

    def begin(self) -> str:
        self._n += 1
        sid = f"tx{self._n:06d}"
        self.open[sid] = self._drive(sid, lambda: self.det.begin(id=sid))
        return sid

    def signal(self, sid: str | None, event: str, source: Any = None, **params: Any) -> None:
        det = self.det
        scope = self.open[sid] if sid is not None else det.process_scope
        ch = det.channel(event)
        self._drive(scope.id, lambda: det.notify(ch, params, source=source, scope=scope), scope)

    def commit(self, sid: str) -> None:
        scope = self.open.pop(sid)
        self._drive(sid, lambda: (self.det.pre_commit(scope), self.det.commit(scope)), scope)
        self._write(sid, "committed")

    def abort(self, sid: str, *, after_pre_commit: bool = False) -> None:
        scope = self.open.pop(sid)
        if after_pre_commit:
            self._drive(sid, lambda: self.det.pre_commit(scope), scope)
        self._drive(sid, lambda: self.det.abort(scope), scope)
        self._write(sid, "aborted")

    def _write(self, sid: str, outcome: str | None) -> None:
        occs = self.by_scope.pop(sid, [])
        self.rows.extend((o, outcome) for o in occs)
        if self.engine is None or not occs:
            return
        if outcome == "aborted":
            self.writer.write_aborted(self.engine, occs)
        else:
            with self.engine.begin() as conn:
                self.writer.write(
                    conn, occs, outcome=None if outcome is None else Outcome.COMMITTED
                )

    def finish(self) -> None:
        """Abort what is still open, then write the process scope's occurrences."""
        for sid in list(self.open):
            self.abort(sid)
        self._write(self.det.process_scope.id, None)


# -- generated workloads ---------------------------------------------------------------
#: One step: ("begin",) | ("signal", slot, event, k, v, with_source) |
#: ("end", slot, "commit" | "abort" | "late_abort"); slot -1 is the process scope.
Step = tuple[Any, ...]


def run_steps(online: Online, steps: Iterable[Step]) -> None:
    """Interpret steps against at most a few open transactions (slots are taken
    modulo the open ones; with none open, a signal goes to the process scope)."""
    for step in steps:
        open_ids = list(online.open)
        if step[0] == "begin":
            online.begin()
        elif step[0] == "signal":
            _, slot, event, k, v, with_source = step
            sid = None if slot < 0 or not open_ids else open_ids[slot % len(open_ids)]
            source = ObjectRef("Item", (k,)) if with_source else None
            online.signal(sid, event, source=source, k=k, v=v)
        elif open_ids:
            _, slot, kind = step
            sid = open_ids[slot % len(open_ids)]
            if kind == "commit":
                online.commit(sid)
            else:
                online.abort(sid, after_pre_commit=kind == "late_abort")
    online.finish()


def random_steps(
    rng: random.Random, transactions: int, *, size: int = 24, noise: float = 0.0
) -> Iterable[Step]:
    """About ``transactions`` transactions of about ``size`` events, up to four
    open at once, 10% aborted (a third of those after pre-commit), a few events
    outside any transaction; a fraction ``noise`` of the events are of kinds no
    rule listens to (:data:`NOISE`)."""
    begun = 0
    opened = 0
    while begun < transactions or opened:
        if begun < transactions and (opened == 0 or (opened < 4 and rng.random() < 0.05)):
            begun += 1
            opened += 1
            yield ("begin",)
            continue
        if rng.random() < 1 / size:
            opened -= 1
            r = rng.random()
            kind = "commit" if r < 0.9 else ("late_abort" if r < 0.933 else "abort")
            yield ("end", rng.randrange(4), kind)
            continue
        slot = -1 if rng.random() < 0.005 else rng.randrange(4)
        yield (
            "signal",
            slot,
            rng.choice(NOISE if rng.random() < noise else EVENTS),
            rng.randrange(4),
            rng.randrange(10),
            rng.random() < 0.1,
        )


def replayed(rows: Iterable[dict[str, Any]]) -> list[Detection]:
    """Replay output rows in the form of :func:`detection_of`, sorted."""
    return sorted(
        (
            r["rule"],
            r["coupling"],
            r["scope"],
            r["t_occ"],
            tuple(zip(r["constituent_scopes"], r["constituent_t_occs"], strict=True)),
            r["params"],
            r["condition"],
        )
        for r in rows
    )
