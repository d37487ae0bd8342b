"""One clock tick of an installed program, as SQL on its tables.

:class:`Pipeline` prepares every statement once per program and dialect (each
class's with :func:`~sentinel.bicep.classsql.class_sql`); a tick
(:meth:`Pipeline.run`) then runs, in one transaction:

1. **read**: the announcements in the inboxes detected up to the tick. Several
   announcements of one key in one chronon collapse to the last (the first, for an
   immutable class); a revision of an immutable class's event, a revocation of
   an unknown key and an announcement detected before the version already read
   are rejected. Each key's old and new version goes into its
   class's change table.
2. **derive**: each complex class, in dependency order, whose constituents
   changed (or which reads ``NOW`` or application tables): its query's rows,
   one per key (the earliest occurrence wins; the lineage of all of them is
   kept), compared with the class's as-of-now table; announcements, changes and
   revocations of complex events go into its change table.
   Each class's changes are applied to its as-of-now and history tables before
   the next class is derived.
3. **due**: for classes with ONTIME statements, at a potential clock tick
   (4.1.4), the events whose occurrence time arrives now.
4. **conditions**: each statement's ``INSERT ... SELECT`` into its action table.
5. **publish** (by the processor, after this module): the action rows of the
   tick become sentinel events.
6. **purge**: events whose lifespan has ended, in connected groups (an event
   goes only together with every event its lineage connects it to), archived
   first if asked; their action rows go with them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from sentinel.bicep import model as m
from sentinel.bicep.classsql import ClassSQL, class_sql
from sentinel.bicep.compiler import CompiledClass, CompiledProgram
from sentinel.bicep.readonly import read_only_for
from sentinel.bicep.sqlpart import EID
from sentinel.bicep.tables import UNBOUNDED, ProgramTables, SystemTables
from sentinel.bicep.times import MAX_TIME
from sentinel.bicep.values import inbox_row
from sentinel.errors import BicepTickError

__all__ = ["Pipeline", "Rejected", "TickOutcome", "older_than_read", "tick_of"]


def older_than_read(det: int, read: int) -> str:
    """Why an announcement detected at ``det`` is refused when the version of its
    event already read was detected at ``read``, a later time."""
    return (
        f"detected at {_shown(det)}, before the version already read (detected at "
        f"{_shown(read)}): an older version cannot replace a newer one"
    )


def _shown(t: int) -> str:
    try:
        return f"{datetime.fromtimestamp(t, UTC):%Y-%m-%d %H:%M:%S} UTC"
    except (OverflowError, OSError, ValueError):
        return f"{t} s"


def tick_of(t: int, chronon: int) -> int:
    """The tick that processes time ``t``: the end of the chronon holding it
    (chronons are ``(T - chronon, T]``)."""
    return -(-t // chronon) * chronon


@dataclass(frozen=True)
class Rejected:
    """An announcement a tick did not accept, and why."""

    event_class: str
    key: dict[str, Any]
    reason: str


@dataclass
class TickOutcome:
    tick: int
    announcements: int = 0
    changes: int = 0
    actions: int = 0
    purged: int = 0
    rejected: list[Rejected] = field(default_factory=list)
    #: Announcements read, per class, in inbox order (for the event log).
    read: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: Whether the due (ONTIME) pass ran at this tick.
    potential: bool = False


class Pipeline:
    """The SQL of one program on one database (see the module docs)."""

    def __init__(
        self,
        program: CompiledProgram,
        tables: ProgramTables,
        system: SystemTables,
        *,
        chronon: int,
        archive: bool,
        purge: bool,
    ) -> None:
        self.program = program
        self.tables = tables
        self.system = system
        self.chronon = chronon
        self.archive = archive
        self.purge_enabled = purge
        self.dialect = dialect = program.dialect
        self.read_only = read_only_for(dialect)
        self.order = [c.ident for c in program]
        self.sql: dict[str, ClassSQL] = {}
        for cls in program:
            self.sql[cls.ident] = class_sql(
                cls,
                tables.classes[cls.ident],
                tables=tables,
                system=system,
                chronon=chronon,
                dialect=dialect,
                read_only=self.read_only,
            )
        self._prepare_edges()
        self._prepare_schedule()

    # -- preparation --------------------------------------------------------------------------
    def q(self, table: sa.Table) -> str:
        return self.tables.qualified(table)

    # -- a tick ---------------------------------------------------------------------------------
    def run(
        self, conn: Connection, tick: int, next_eid: int, stale: set[str]
    ) -> tuple[TickOutcome, int]:
        """Run steps 1-4 and 6 of one tick; return the outcome and the next event id.
        Publishing (step 5) is the processor's: the action rows stay marked
        unpublished until it has signalled them."""
        out = TickOutcome(tick)
        params = {"bicep_tick": tick, "bicep_program": self.program.name}
        for cs in self.sql.values():
            conn.exec_driver_sql(f"DELETE FROM {self.q(cs.t.changes)}")
        touched: set[str] = set()
        derived_any: set[str] = set()
        for ident in self.order:
            cs = self.sql[ident]
            derived = False
            if cs.cls.complex:
                if (
                    cs.always_derive
                    or ident in stale
                    or any(d in touched for d in cs.cls.depends_on)
                ):
                    derived = True
                    with self._failing(tick, cs.cls):
                        count, next_eid = self._derive(conn, cs, tick, next_eid)
                    if count:
                        touched.add(ident)
                        out.changes += count
            else:
                count, next_eid = self._read(conn, cs, tick, next_eid, out)
                if count:
                    touched.add(ident)
                    out.changes += count
            if ident in touched:
                for sql in cs.apply:
                    conn.execute(sa.text(sql), params)
                if cs.potential:
                    conn.execute(sa.text(sql_potential(cs)), {**params, "bicep_class": ident})
            if derived:
                # even when no event changed, the events it was derived from may have
                derived_any.add(ident)
                for sql in cs.lineage:
                    conn.execute(sa.text(sql))
        pot = self.system.potential_ticks
        due_classes = set(
            conn.execute(
                sa.select(pot.c.class_ident).where(
                    pot.c.program == self.program.name, pot.c.tick == tick
                )
            ).scalars()
        )
        out.potential = bool(due_classes)
        for ident in self.order:
            cs = self.sql[ident]
            if cs.due and ident in due_classes:
                conn.execute(sa.text(cs.due), params)
        conn.execute(pot.delete().where(pot.c.program == self.program.name, pot.c.tick <= tick))
        for ident in self.order:
            cs = self.sql[ident]
            if not cs.statements or (ident not in touched and ident not in due_classes):
                continue
            for st in cs.statements:
                if not st.ontime and ident not in touched:
                    continue
                with self._failing(tick, cs.cls, st.index):
                    res = conn.execute(sa.text(st.sql), {**params, **st.params})
                out.actions += res.rowcount or 0
        self.expirations(conn, touched | derived_any)
        if stale:
            cl = self.system.classes
            conn.execute(
                cl.update()
                .where(cl.c.program == self.program.name, cl.c.ident.in_(sorted(stale)))
                .values(stale=False)
            )
        return out, next_eid

    @contextmanager
    def _failing(self, tick: int, cls: CompiledClass, index: int | None = None) -> Iterator[None]:
        """Raise a database error of ``cls``'s query (or of its statement
        ``index``) as a :class:`BicepTickError` naming the program, the tick and
        the place in the program. A lost connection passes through as it is."""
        try:
            yield
        except sa.exc.DBAPIError as err:
            if err.connection_invalidated:
                raise
            d = cls.definition
            reason = str(getattr(err, "orig", err)).strip().splitlines()
            when = datetime.fromtimestamp(tick, UTC)
            if index is None:
                assert isinstance(d, m.ComplexClass)
                pos, what, text = d.query_pos, f"the query of {cls.name}", None
            else:
                st = d.statements[index]
                shown = st.text if len(st.text) <= 200 else f"{st.text[:200]}..."
                pos, what, text = st.pos, f"the statement of {cls.name} {shown!r}", st.text
            raise BicepTickError(
                f"program {self.program.name!r}, tick {when:%Y-%m-%d %H:%M:%S} UTC: {what} "
                f"(at {pos}) failed on the database: {reason[0] if reason else type(err).__name__}"
                ". The tick was rolled back; it runs again, from the same tick, at the next run",
                program=self.program.name,
                tick=when,
                event_class=cls.name,
                statement=text,
                line=pos.line,
                column=pos.column,
            ) from err

    # -- read -----------------------------------------------------------------------------------
    def _read(
        self, conn: Connection, cs: ClassSQL, tick: int, next_eid: int, out: TickOutcome
    ) -> tuple[int, int]:
        inbox = cs.t.inbox
        assert inbox is not None
        due = inbox.c.dettime <= tick
        if self.dialect == "sqlite":  # SQLite keeps any value: read (and reject) them too
            due = sa.or_(due, sa.func.typeof(inbox.c.dettime) != "integer")
        # the values as the database holds them (no result processing, which a
        # row the application wrote could make fail); checked below
        raw = [sa.type_coerce(c, sa.types.NullType()).label(c.name) for c in inbox.c]
        rows = (
            conn.execute(sa.select(*raw).where(due).order_by(inbox.c.dettime, inbox.c.id))
            .mappings()
            .all()
        )
        if not rows:
            return 0, next_eid
        name = cs.cls.name
        mutable = cs.cls.mutable
        definition = cs.cls.definition
        batch: dict[tuple[Any, ...], Any] = {}
        for stored in rows:
            try:
                r = inbox_row(name, definition.attributes, definition.keys, stored)
            except ValueError as err:
                keyd = {k: stored[k] for k in cs.keys}
                out.rejected.append(Rejected(name, keyd, f"row {stored['id']} of the inbox: {err}"))
                continue
            key = tuple(r[k] for k in cs.keys)
            out.read.append((cs.cls.ident, r))
            if not mutable and key in batch:
                out.rejected.append(
                    Rejected(name, dict(zip(cs.keys, key, strict=True)), _IMMUTABLE)
                )
                continue
            batch[key] = r
        out.announcements += len(rows)
        old = self._current(conn, cs, list(batch))
        changes: list[dict[str, Any]] = []
        for key, a in batch.items():
            o = old.get(key)
            keyd = dict(zip(cs.keys, key, strict=True))
            if not mutable and o is not None:
                out.rejected.append(Rejected(name, keyd, _IMMUTABLE))
                continue
            if o is not None and a["dettime"] < o["dettime"]:
                # The version read is newer than this one: applying it would
                # turn the event back and its detection time backwards.
                why = older_than_read(a["dettime"], o["dettime"])
                out.rejected.append(Rejected(name, keyd, why))
                continue
            if a["revoked"]:
                if o is None:
                    out.rejected.append(
                        Rejected(name, keyd, "a revocation of an event that is not live")
                    )
                    continue
                row = _change(cs.attrs, o["bicep_eid"], o, None, a["dettime"], None, self.chronon)
            else:
                if (
                    o is not None
                    and o["occtime"] == a["occtime"]
                    and all(o[x] == a[x] for x in cs.attrs)
                ):
                    continue  # announced again as it is: nothing changed
                if o is None:
                    eid = next_eid
                    next_eid += 1
                else:
                    eid = o[EID]
                row = _change(cs.attrs, eid, o, a, a["dettime"], a["occtime"], self.chronon)
            changes.append(row)
        ids = [r["id"] for r in rows]
        for chunk in _chunks(ids, 500):
            conn.execute(inbox.delete().where(inbox.c.id.in_(chunk)))
        if changes:
            conn.execute(cs.t.changes.insert(), changes)
        return len(changes), next_eid

    def _current(
        self, conn: Connection, cs: ClassSQL, keys: Sequence[tuple[Any, ...]]
    ) -> dict[tuple[Any, ...], Any]:
        n = cs.t.now
        cols = [n.c[k] for k in cs.keys]
        out: dict[tuple[Any, ...], Any] = {}
        for chunk in _chunks(list(keys), 400):
            if len(cols) == 1:
                cond = cols[0].in_([k[0] for k in chunk])
            else:
                cond = sa.tuple_(*cols).in_(chunk)
            for r in conn.execute(sa.select(n).where(cond)).mappings():
                out[tuple(r[k] for k in cs.keys)] = r
        return out

    # -- derive ---------------------------------------------------------------------------------
    def _derive(self, conn: Connection, cs: ClassSQL, tick: int, next_eid: int) -> tuple[int, int]:
        params = {"bicep_tick": tick, "bicep_now": tick, "bicep_base": next_eid - 1}
        for sql in cs.derive:
            conn.execute(sa.text(sql), params)
        if cs.derive_rows is not None:
            assert cs.t.staging is not None
            with self.read_only.reading(conn):
                rows = conn.execute(sa.text(cs.derive_rows[0]), params).all()
            if rows:
                # The rows go back as the driver read them, without conversions
                # either way (the staging table's columns are the query's), in
                # one executemany: the cost of the round trip stays small.
                mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
                marks = ", ".join([mark] * len(rows[0]))
                conn.exec_driver_sql(f"{cs.derive_rows[1]}({marks})", [tuple(r) for r in rows])
        assert cs.new and cs.changed and cs.removed
        added = conn.execute(sa.text(cs.new), params).rowcount or 0
        changed = conn.execute(sa.text(cs.changed), params).rowcount or 0
        removed = conn.execute(sa.text(cs.removed), params).rowcount or 0
        return added + changed + removed, next_eid + added

    # -- purge ----------------------------------------------------------------------------------
    def purge(self, conn: Connection, tick: int) -> int:
        """Purge (and archive) expired events; return how many events went."""
        if not self.purge_enabled:
            return 0
        pg = self.system.purge
        prog = self.program.name
        pq = self.q(pg)
        candidates = False
        for ident in self.order:
            cs = self.sql[ident]
            if cs.cls.definition.lifespan is None and not cs.cls.complex:
                continue  # never expires (nor does its group)
            n = self.q(cs.t.now)
            res = conn.execute(
                sa.text(
                    f"INSERT INTO {pq} (program, class_ident, eid) SELECT :p, :c, {EID} "
                    f"FROM {n} WHERE bicep_exp < :t"
                ),
                {"p": prog, "c": ident, "t": tick},
            )
            candidates = candidates or bool(res.rowcount)
        purged = 0
        if candidates:
            purged = self._remove(conn, prog, tick)
        purged += self._purge_revoked(conn, tick)
        if candidates or purged:
            conn.execute(pg.delete().where(pg.c.program == prog))
        return purged

    def expirations(self, conn: Connection, touched: set[str]) -> None:
        """Bring ``bicep_exp`` up to date: the latest ``occTime + lifespan``
        (``bicep_base_exp``) among the events lineage connects an event to, so a
        group of events expires as a whole (2.5: a complex event goes only with
        its constituents, and they only with it). Runs when a class in a lineage
        changed; starts from each event's own base and spreads the maximum along
        lineage edges, both ways, until nothing changes."""
        if not self._edges or not touched & self._linked:
            return
        for ident in sorted(self._linked):
            n = self.q(self.sql[ident].t.now)
            conn.exec_driver_sql(
                f"UPDATE {n} SET bicep_exp = bicep_base_exp WHERE bicep_exp <> bicep_base_exp"
            )
        while True:
            changed = 0
            for sql in self._edges:
                changed += conn.exec_driver_sql(sql).rowcount or 0
            if not changed:
                return

    def _prepare_edges(self) -> None:
        self._edges: list[str] = []
        self._linked: set[str] = set()
        for ident in self.order:
            cs = self.sql[ident]
            if not cs.cls.complex or not cs.lineage_classes or cs.t.lineage is None:
                continue
            lt = self.q(cs.t.lineage)
            n_c, name_c = self.q(cs.t.now), cs.t.now.name
            for dep in sorted(set(cs.lineage_classes)):
                dep_t = self.sql[dep].t.now
                n_x, name_x = self.q(dep_t), dep_t.name
                self._linked.update((ident, dep))
                up = (
                    f"(SELECT MAX(x.bicep_exp) FROM {lt} l JOIN {n_x} x ON x.{EID} = l.dep_eid "
                    f"WHERE l.{EID} = {name_c}.{EID} AND l.dep_class = '{dep}')"
                )
                down = (
                    f"(SELECT MAX(y.bicep_exp) FROM {lt} l JOIN {n_c} y ON y.{EID} = l.{EID} "
                    f"WHERE l.dep_class = '{dep}' AND l.dep_eid = {name_x}.{EID})"
                )
                # only rows that have lineage edges can change
                has_up = f"{EID} IN (SELECT l.{EID} FROM {lt} l WHERE l.dep_class = '{dep}')"
                has_down = f"{EID} IN (SELECT l.dep_eid FROM {lt} l WHERE l.dep_class = '{dep}')"
                self._edges.append(
                    f"UPDATE {n_c} SET bicep_exp = {up} WHERE {has_up} AND bicep_exp < {up}"
                )
                self._edges.append(
                    f"UPDATE {n_x} SET bicep_exp = {down} WHERE {has_down} AND bicep_exp < {down}"
                )

    def _remove(self, conn: Connection, prog: str, tick: int) -> int:
        pq = self.q(self.system.purge)
        total = 0
        stale: set[str] = set()
        for ident in self.order:
            cs = self.sql[ident]
            count = conn.execute(
                sa.text(f"SELECT COUNT(*) FROM {pq} WHERE program = :p AND class_ident = :c"),
                {"p": prog, "c": ident},
            ).scalar_one()
            if not count:
                continue
            total += count
            stale.update(cs.cls.dependents)
            sub = f"(SELECT eid FROM {pq} WHERE program = :p AND class_ident = :c)"
            p = {"p": prog, "c": ident, "t": tick}
            self._drop_events(conn, cs, sub, p)
        if stale:
            cl = self.system.classes
            conn.execute(
                cl.update()
                .where(cl.c.program == prog, cl.c.ident.in_(sorted(stale)))
                .values(stale=True)
            )
        return total

    def _drop_events(self, conn: Connection, cs: ClassSQL, sub: str, p: dict[str, Any]) -> None:
        h = self.q(cs.t.history)
        if self.archive and cs.t.archive is not None:
            a = self.q(cs.t.archive)
            cols = ", ".join([EID, "bicep_tick", "occtime", "dettime", "revoked", *cs.attrs])
            conn.execute(
                sa.text(
                    f"INSERT INTO {a} ({cols}, archived_tick) SELECT {cols}, :t FROM {h} "
                    f"WHERE {EID} IN {sub}"
                ),
                p,
            )
        conn.execute(sa.text(f"DELETE FROM {h} WHERE {EID} IN {sub}"), p)
        conn.execute(sa.text(f"DELETE FROM {self.q(cs.t.now)} WHERE {EID} IN {sub}"), p)
        if cs.t.lineage is not None:
            conn.execute(sa.text(f"DELETE FROM {self.q(cs.t.lineage)} WHERE {EID} IN {sub}"), p)
        for ident, x in self.tables.actions.items():
            if any(st.action == ident for st in cs.statements):
                conn.execute(
                    sa.text(f"DELETE FROM {self.q(x)} WHERE class_ident = :c AND {EID} IN {sub}"),
                    p,
                )

    def _purge_revoked(self, conn: Connection, tick: int) -> int:
        """History of revoked events goes once its lifespan after the revocation
        has passed (nothing can refer to it any more)."""
        total = 0
        pq = self.q(self.system.purge)
        prog = self.program.name
        for ident in self.order:
            cs = self.sql[ident]
            ls = cs.cls.definition.lifespan
            if ls is None:
                continue
            h, n = self.q(cs.t.history), self.q(cs.t.now)
            res = conn.execute(
                sa.text(
                    f"INSERT INTO {pq} (program, class_ident, eid) SELECT DISTINCT :p, :c, "
                    f"h.{EID} FROM {h} h WHERE h.revoked = 1 AND h.bicep_tick + {ls} < :t "
                    f"AND NOT EXISTS (SELECT 1 FROM {n} x WHERE x.{EID} = h.{EID})"
                ),
                {"p": prog, "c": ident, "t": tick},
            )
            count = res.rowcount or 0
            if count:
                sub = f"(SELECT eid FROM {pq} WHERE program = :p AND class_ident = :c)"
                self._drop_events(conn, cs, sub, {"p": prog, "c": ident, "t": tick})
                total += count
        return total

    # -- scheduling -------------------------------------------------------------------------------
    def _prepare_schedule(self) -> None:
        """One query of scalar subqueries for :meth:`next_tick`: (kind, extra)
        per column."""
        parts: list[str] = []
        self._schedule: list[tuple[str, int]] = []
        for cs in self.sql.values():
            if cs.t.inbox is not None:
                parts.append(f"(SELECT MIN(dettime) FROM {self.q(cs.t.inbox)})")
                self._schedule.append(("det", 0))
            ls = cs.cls.definition.lifespan
            if self.purge_enabled and ls is not None:
                parts.append(f"(SELECT MIN(bicep_exp) FROM {self.q(cs.t.now)})")
                self._schedule.append(("exp", 0))
                parts.append(
                    f"(SELECT MIN(bicep_tick) FROM {self.q(cs.t.history)} WHERE revoked = 1)"
                )
                self._schedule.append(("exp", ls))
        pot, cl = self.q(self.system.potential_ticks), self.q(self.system.classes)
        parts.append(f"(SELECT MIN(tick) FROM {pot} WHERE program = :p AND tick > :last)")
        self._schedule.append(("tick", 0))
        parts.append(f"(SELECT COUNT(*) FROM {cl} WHERE program = :p AND stale = :yes)")
        self._schedule.append(("stale", 0))
        self._schedule_sql = sa.text("SELECT " + ", ".join(parts))
        self._always = any(cs.always_derive for cs in self.sql.values())

    @property
    def every_tick(self) -> list[str]:
        """The classes derived at every tick (their SQL reads the tick's time,
        NOW): with them the program has work at each tick, none is skipped."""
        return [cs.cls.name for cs in self.sql.values() if cs.always_derive]

    def next_tick(self, conn: Connection, last: int | None) -> int | None:
        """The first tick after ``last`` at which something can happen (``None``:
        nothing ever will without new announcements). Ticks in between would
        read, derive, fire and purge nothing: skipping them is the global
        occurrence-time optimization of 4.1.4, extended to every step."""
        c = self.chronon
        floor = None if last is None else last + c
        row = conn.execute(
            self._schedule_sql,
            {"p": self.program.name, "last": -1 if last is None else last, "yes": True},
        ).one()
        candidates: list[int] = []
        for (kind, extra), value in zip(self._schedule, row, strict=True):
            if value is None:
                continue
            try:
                value = int(value)
            except (TypeError, ValueError):
                continue  # an inbox row that is no time: the next tick rejects it
            if kind == "det":
                value = min(max(value, 0), MAX_TIME)
            if kind == "det":
                candidates.append(tick_of(value, c))
            elif kind == "exp":
                if value < UNBOUNDED:
                    candidates.append(((value + extra) // c) * c + c)
            elif kind == "tick":
                candidates.append(value)
            elif value and last is not None:  # stale classes
                candidates.append(last + c)
        if last is not None and self._always:
            candidates.append(last + c)
        if not candidates:
            return None
        best = min(candidates)
        return best if floor is None else max(best, floor)

    def stale(self, conn: Connection) -> set[str]:
        cl = self.system.classes
        return set(
            conn.execute(
                sa.select(cl.c.ident).where(cl.c.program == self.program.name, cl.c.stale.is_(True))
            ).scalars()
        )


_IMMUTABLE = "a second announcement of an IMMUTABLE class's event (its first is final)"


def sql_potential(cs: ClassSQL) -> str:
    assert cs.potential is not None
    return cs.potential


def _change(
    attrs: list[str],
    eid: int,
    o: Mapping[str, Any] | None,
    a: Mapping[str, Any] | None,
    det: int,
    occ: int | None,
    chronon: int,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        EID: eid,
        "touched": 1,
        "o_present": 0 if o is None else 1,
        "n_present": 0 if a is None else 1,
        "o_occtime": None if o is None else o["occtime"],
        "o_dettime": None if o is None else o["dettime"],
        "o_occ_tick": None if o is None else o["bicep_occ_tick"],
        "n_occtime": occ,
        "n_dettime": det,
        "n_occ_tick": None if occ is None else tick_of(occ, chronon),
    }
    for x in attrs:
        row[f"o_{x}"] = None if o is None else o[x]
        # a revocation keeps the event's last attributes as its "new" ones
        row[f"n_{x}"] = (o[x] if o is not None else None) if a is None else a[x]
    return row


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def now_utc() -> datetime:
    return datetime.now(UTC)


def perf() -> float:
    return time.perf_counter()
