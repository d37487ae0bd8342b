"""An in-memory evaluator of BiCEPL programs, written from the definitions in
docs/bicepl.md and independent of the SQL processor: no database, no SQL.

It takes the compiled program for its classes, keys, lifespans and statements (the
model, not any SQL), and each complex class's query as a Python function written
by the test. It processes *every* tick (no skipping: the processor's global
occurrence-time optimization must not change what fires), derives every complex
class at every tick, and evaluates conditions in SQL's three-valued logic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sentinel.bicep import model as m
from sentinel.bicep.compiler import CompiledProgram

#: A complex class's query: (as-of-now snapshot by class, tick) -> rows, each the
#: class's attributes plus "occtime", and the (class, key) rows it was built from.
Derive = Callable[
    [dict[str, list[dict[str, Any]]], int],
    Iterable[tuple[dict[str, Any], list[tuple[str, tuple[Any, ...]]]]],
]


def tick_of(t: int, chronon: int) -> int:
    q, r = divmod(t, chronon)
    return (q + (1 if r else 0)) * chronon


@dataclass
class Version:
    occ: int | None
    det: int
    attrs: dict[str, Any]


@dataclass
class Event:
    eid: int
    version: Version
    base: int | None  # occ + lifespan


@dataclass
class Change:
    eid: int
    key: tuple[Any, ...]
    old: Version | None
    new: Version | None
    touched: bool
    revoked_det: int | None = None


@dataclass
class Fired:
    tick: int
    action: str
    event_class: str
    key: tuple[Any, ...]
    args: tuple[Any, ...]
    eid: int = field(compare=False, default=0)

    def row(self) -> tuple[Any, ...]:
        return (self.tick, self.action, self.event_class, self.key, self.args)


@dataclass
class Cls:
    ident: str
    name: str
    keys: list[str]
    attrs: list[str]
    mutable: bool
    lifespan: int | None
    statements: tuple[m.Statement, ...]
    derive: Derive | None
    now: dict[tuple[Any, ...], Event] = field(default_factory=dict)
    lineage: dict[int, set[tuple[str, int]]] = field(default_factory=dict)


class Reference:
    def __init__(
        self,
        program: CompiledProgram,
        chronon: int,
        derive: dict[str, Derive] | None = None,
        *,
        purge: bool = True,
    ) -> None:
        derive = {k.lower(): v for k, v in (derive or {}).items()}
        self.chronon = chronon
        self.purge = purge
        self.classes: dict[str, Cls] = {}
        for c in program:
            d = c.definition
            if c.complex and c.ident not in derive:
                raise ValueError(f"the test gives no query for {c.name}")
            self.classes[c.ident] = Cls(
                ident=c.ident,
                name=c.name,
                keys=[k.lower() for k in d.keys],
                attrs=[a.ident for a in d.attributes],
                mutable=c.mutable,
                lifespan=d.lifespan,
                statements=d.statements,
                derive=derive.get(c.ident),
            )
        self.actions = {a.ident: a.name for a in program.actions.values()}
        self.inbox: list[tuple[int, int, str, dict[str, Any]]] = []
        self.seq = 0
        self.next_eid = 1
        self.last: int | None = None
        #: Firings of events still live (FIRED reads these); purging removes some.
        self.fired: list[Fired] = []
        #: Every firing, in order.
        self.fired_all: list[Fired] = []
        self.rejected: list[tuple[int, str, tuple[Any, ...]]] = []

    # -- input ---------------------------------------------------------------------------------
    def announce(
        self, cls: str, *, occ: int | None, det: int, revoke: bool = False, **attrs: Any
    ) -> None:
        c = self.classes[cls.lower()]
        row = {a: attrs.get(a) for a in c.attrs}
        row.update(occ=occ, det=det, revoke=revoke)
        self.seq += 1
        self.inbox.append((det, self.seq, c.ident, row))

    def run_until(self, until: int) -> list[Fired]:
        c = self.chronon
        end = (until // c) * c
        start = self.last + c if self.last is not None else None
        if start is None:
            pending = [d for d, *_ in self.inbox]
            if not pending:
                self.last = end if self.last is None else self.last
                return []
            start = tick_of(min(pending), c)
        out: list[Fired] = []
        t = start
        while t <= end:
            out.extend(self.tick(t))
            t += c
        self.last = max(end, self.last or end)
        return out

    # -- a tick ---------------------------------------------------------------------------
    def tick(self, T: int) -> list[Fired]:
        c = self.chronon
        changes: dict[str, list[Change]] = {k: [] for k in self.classes}
        for cls in self.classes.values():
            if cls.derive is None:
                changes[cls.ident] = self._read(cls, T)
            else:
                changes[cls.ident] = self._derive(cls, T)
        fired: list[Fired] = []
        for cls in self.classes.values():
            seen = {ch.eid for ch in changes[cls.ident]}
            if any(_mentions_ontime(st.condition) for st in cls.statements):
                for key, ev in cls.now.items():
                    if ev.eid not in seen and tick_of(ev.version.occ, c) == T:  # type: ignore[arg-type]
                        changes[cls.ident].append(
                            Change(ev.eid, key, ev.version, ev.version, False)
                        )
            for st in cls.statements:
                ontime = _mentions_ontime(st.condition)
                for ch in changes[cls.ident]:
                    if not ch.touched and not ontime:
                        continue
                    if self._holds(st.condition, ch, cls, st, T) is True:
                        args = tuple(self._value(v, ch, T) for v in st.action.params)
                        fired.append(
                            Fired(T, self.actions[st.action.ident], cls.name, ch.key, args, ch.eid)
                        )
        self.fired.extend(fired)
        self.fired_all.extend(fired)
        if self.purge:
            self._purge(T)
        self.last = T
        return fired

    def _read(self, cls: Cls, T: int) -> list[Change]:
        batch = sorted(
            (x for x in self.inbox if x[2] == cls.ident and x[0] <= T), key=lambda x: x[:2]
        )
        self.inbox = [x for x in self.inbox if not (x[2] == cls.ident and x[0] <= T)]
        chosen: dict[tuple[Any, ...], dict[str, Any]] = {}
        for _, _, _, row in batch:
            key = tuple(row[k] for k in cls.keys)
            if not cls.mutable and key in chosen:
                self.rejected.append((T, cls.name, key))
                continue
            chosen[key] = row
        out: list[Change] = []
        for key, row in chosen.items():
            old = cls.now.get(key)
            if not cls.mutable and old is not None:
                self.rejected.append((T, cls.name, key))
                continue
            if old is not None and row["det"] < old.version.det:
                self.rejected.append((T, cls.name, key))  # older than the version read
                continue
            attrs = {a: row[a] for a in cls.attrs}
            if row["revoke"]:
                if old is None:
                    self.rejected.append((T, cls.name, key))
                    continue
                del cls.now[key]
                # a revocation: its detection time, and the event's last attributes
                out.append(Change(old.eid, key, old.version, None, True, row["det"]))
                continue
            new = Version(row["occ"], row["det"], attrs)
            if old is not None and old.version.occ == new.occ and old.version.attrs == attrs:
                continue
            eid = old.eid if old is not None else self._eid()
            cls.now[key] = Event(eid, new, _base(new.occ, cls.lifespan))
            out.append(Change(eid, key, None if old is None else old.version, new, True))
        return out

    def _eid(self) -> int:
        self.next_eid += 1
        return self.next_eid - 1

    def _snapshot(self) -> dict[str, list[dict[str, Any]]]:
        snap: dict[str, list[dict[str, Any]]] = {}
        for cls in self.classes.values():
            rows = []
            for _key, ev in cls.now.items():
                r = dict(ev.version.attrs)
                r["occtime"] = ev.version.occ
                r["dettime"] = ev.version.det
                rows.append(r)
            snap[cls.ident] = rows
        return snap

    def _derive(self, cls: Cls, T: int) -> list[Change]:
        assert cls.derive is not None
        rows = list(cls.derive(self._snapshot(), T))
        groups: dict[
            tuple[Any, ...], list[tuple[dict[str, Any], list[tuple[str, tuple[Any, ...]]]]]
        ] = {}
        for row, deps in rows:
            if row["occtime"] is None or any(row[k] is None for k in cls.keys):
                continue
            groups.setdefault(tuple(row[k] for k in cls.keys), []).append((row, deps))
        out: list[Change] = []
        result: dict[tuple[Any, ...], tuple[Version, set[tuple[str, int]]]] = {}
        for key, items in groups.items():
            winner = min(items, key=lambda it: _order(it[0], cls.attrs))[0]
            deps: set[tuple[str, int]] = set()
            for _, d in items:
                for dep_cls, dep_key in d:
                    ev = self.classes[dep_cls].now.get(dep_key)
                    if ev is not None:
                        deps.add((dep_cls, ev.eid))
            result[key] = (Version(winner["occtime"], T, {a: winner[a] for a in cls.attrs}), deps)
        for key, old in list(cls.now.items()):
            if key not in result:
                del cls.now[key]
                cls.lineage.pop(old.eid, None)
                out.append(Change(old.eid, key, old.version, None, True, T))
        for key, (new, deps) in result.items():
            old = cls.now.get(key)
            if old is not None and old.version.occ == new.occ and old.version.attrs == new.attrs:
                cls.lineage[old.eid] = deps
                continue
            eid = old.eid if old is not None else self._eid()
            cls.now[key] = Event(eid, new, _base(new.occ, cls.lifespan))
            cls.lineage[eid] = deps
            out.append(Change(eid, key, None if old is None else old.version, new, True))
        return out

    # -- conditions ------------------------------------------------------------------------------
    def _value(self, v: m.Value, ch: Change, T: int) -> Any:
        if isinstance(v, m.Now):
            return T
        if isinstance(v, m.Ref):
            side = ch.new if v.side == "new" else ch.old
            if v.ident == "occtime":
                return None if side is None else side.occ
            if v.ident == "dettime":
                if side is None:
                    return ch.revoked_det if v.side == "new" else None
                return side.det
            if side is None and v.side == "new" and ch.old is not None:
                side = ch.old  # a revocation keeps the last attributes
            return None if side is None else side.attrs.get(v.ident)
        if isinstance(v, m.Literal_):
            return v.value
        if isinstance(v, m.BinOp):
            a, b = self._value(v.left, ch, T), self._value(v.right, ch, T)
            if a is None or b is None:
                return None
            return a + b if v.op == "+" else a - b
        if isinstance(v, m.Neg):
            a = self._value(v.value, ch, T)
            return None if a is None else -a
        vals = [self._value(x, ch, T) for x in v.values]
        if any(x is None for x in vals):
            return None
        return max(vals) if v.fn == "MAX" else min(vals)

    def _holds(
        self, cond: m.Condition, ch: Change, cls: Cls, st: m.Statement, T: int
    ) -> bool | None:
        c = self.chronon
        if isinstance(cond, m.And):
            a = self._holds(cond.left, ch, cls, st, T)
            b = self._holds(cond.right, ch, cls, st, T)
            if a is False or b is False:
                return False
            return None if a is None or b is None else True
        if isinstance(cond, m.Or):
            a = self._holds(cond.left, ch, cls, st, T)
            b = self._holds(cond.right, ch, cls, st, T)
            if a is True or b is True:
                return True
            return None if a is None or b is None else False
        if isinstance(cond, m.Not):
            a = self._holds(cond.condition, ch, cls, st, T)
            return None if a is None else not a
        if isinstance(cond, m.Fired):
            action = self.actions[st.action.ident]
            return any(
                f.action == action and f.event_class == cls.name and f.eid == ch.eid and f.tick < T
                for f in self.fired
            )
        if isinstance(cond, m.Compare):
            a, b = self._value(cond.left, ch, T), self._value(cond.right, ch, T)
            if a is None or b is None:
                return None
            return {
                "=": a == b,
                "<>": a != b,
                "<": a < b,
                "<=": a <= b,
                ">": a > b,
                ">=": a >= b,
            }[cond.op]
        assert isinstance(cond, m.Timing)
        o, n, touched = ch.old, ch.new, ch.touched
        o_tick = None if o is None else tick_of(o.occ, c)  # type: ignore[arg-type]
        n_tick = None if n is None else tick_of(n.occ, c)  # type: ignore[arg-type]
        change = touched and o is not None and n is not None
        occurred = o_tick is not None and o_tick <= T
        p = cond.primitive
        if p == "ANNOUNCEMENT":
            return touched and o is None and n is not None
        if p == "CHANGE":
            return change
        if p == "REVOCATION":
            return touched and o is not None and n is None
        if p == "ONTIME":
            return n is not None and n_tick == T
        if p == "FUTURE":
            return (
                touched
                and n is not None
                and n_tick > T  # type: ignore[operator]
                and (o is None or o_tick > T)  # type: ignore[operator]
            )
        if p == "LATE":
            late = (
                touched
                and n is not None
                and n_tick < T  # type: ignore[operator]
                and (o is None or o_tick > T)  # type: ignore[operator]
            )
            if late and cond.low is not None:
                return cond.low <= T - n_tick <= cond.high  # type: ignore[operator]
            return late
        if p == "RETROACTIVECHANGE":
            return change and occurred and n_tick <= T  # type: ignore[operator]
        if p == "POSTPONE":
            return change and occurred and n_tick > T  # type: ignore[operator]
        if p == "CANCELLATION":
            revocation = touched and o is not None and n is None
            return revocation or (change and occurred and n_tick > T)  # type: ignore[operator]
        raise AssertionError(p)

    # -- purging -----------------------------------------------------------------------------------
    def _purge(self, T: int) -> None:
        live: dict[tuple[str, int], tuple[Cls, tuple[Any, ...], int | None]] = {}
        for cls in self.classes.values():
            for key, ev in cls.now.items():
                live[(cls.ident, ev.eid)] = (cls, key, ev.base)
        parent = {n: n for n in live}

        def find(x: tuple[str, int]) -> tuple[str, int]:
            while parent[x] != x:
                x = parent[x]
            return x

        for cls in self.classes.values():
            for eid, deps in cls.lineage.items():
                a = (cls.ident, eid)
                for b in deps:
                    if a in parent and b in parent:
                        parent[find(a)] = find(b)
        keep: set[tuple[str, int]] = set()
        for n, (_, _, base) in live.items():
            if base is None or base >= T:
                keep.add(find(n))
        gone = [n for n in live if find(n) not in keep]
        gone_set = set(gone)
        for n in gone:
            cls, key, _ = live[n]
            del cls.now[key]
            cls.lineage.pop(n[1], None)
        self.fired = [f for f in self.fired if (self._ident(f.event_class), f.eid) not in gone_set]

    def _ident(self, name: str) -> str:
        return name.lower()

    # -- inspection --------------------------------------------------------------------------------
    def expirations(self) -> dict[str, dict[tuple[Any, ...], int | None]]:
        """Each live event's expiration time: the latest base among the events
        its lineage connects it to (None: never)."""
        live: dict[tuple[str, int], tuple[str, tuple[Any, ...], int | None]] = {}
        for cls in self.classes.values():
            for key, ev in cls.now.items():
                live[(cls.ident, ev.eid)] = (cls.name, key, ev.base)
        adj: dict[tuple[str, int], set[tuple[str, int]]] = {n: set() for n in live}
        for cls in self.classes.values():
            for eid, deps in cls.lineage.items():
                for d in deps:
                    if (cls.ident, eid) in adj and d in adj:
                        adj[(cls.ident, eid)].add(d)
                        adj[d].add((cls.ident, eid))
        out: dict[str, dict[tuple[Any, ...], int | None]] = {
            c.name: {} for c in self.classes.values()
        }
        for n, (name, key, _) in live.items():
            seen, stack = {n}, [n]
            while stack:
                x = stack.pop()
                for y in adj[x] - seen:
                    seen.add(y)
                    stack.append(y)
            bases = [live[x][2] for x in seen]
            out[name][key] = None if any(b is None for b in bases) else max(bases)  # type: ignore[type-var]
        return out


def plain_args(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A processor's action arguments with times as seconds, as the reference has them."""
    from datetime import datetime

    return tuple(int(a.timestamp()) if isinstance(a, datetime) else a for a in args)


def _base(occ: int | None, lifespan: int | None) -> int | None:
    return None if occ is None or lifespan is None else occ + lifespan


def _order(row: dict[str, Any], attrs: list[str]) -> tuple[Any, ...]:
    out: list[Any] = [row["occtime"]]
    for a in attrs:
        v = row[a]
        out.extend((1, 0) if v is None else (0, v))
    return tuple(out)


def _mentions_ontime(cond: m.Condition) -> bool:
    if isinstance(cond, m.Timing):
        return cond.primitive == "ONTIME"
    if isinstance(cond, (m.And, m.Or)):
        return _mentions_ontime(cond.left) or _mentions_ontime(cond.right)
    if isinstance(cond, m.Not):
        return _mentions_ontime(cond.condition)
    return False
