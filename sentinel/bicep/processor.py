"""The BiCEPL processor: a program running on the application's database.

>>> import sqlalchemy as sa
>>> from sentinel.log import migrate
>>> from sentinel.rules import LocalEventDetector
>>> engine = sa.create_engine("sqlite://")
>>> migrate.upgrade(engine)                       # sentinel's tables, once
>>> proc = Processor('''CREATE MUTABLE SUBSCRIBED EVENT CLASS Delivery
...     (resource VARCHAR(30), amount NUMERIC) ID (resource) LIFESPAN(14d)
...     ON CHANGE AND new.occTime > old.occTime DO informOwner('delayed', new.resource);''',
...     engine, name="shop", chronon="15m", detector=LocalEventDetector())
>>> proc.install()
1
>>> proc.action("informOwner", lambda call: print(call.tick.time(), call))
>>> proc.announce("Delivery", resource="milk", amount=2,
...               occ="2014-04-07T09:00", det="2014-04-03T16:01")
>>> proc.announce("Delivery", resource="milk", amount=2,
...               occ="2014-04-07T17:00", det="2014-04-03T16:27")
>>> _ = proc.run_until("2014-04-03T17:00")
16:30:00 informOwner('delayed', 'milk')
"""

from __future__ import annotations

import difflib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from sentinel.bicep import actions as act
from sentinel.bicep.compiler import CompiledClass, CompiledProgram, compile_program
from sentinel.bicep.install import Installed, install, installed
from sentinel.bicep.pipeline import Pipeline, Rejected, TickOutcome, older_than_read
from sentinel.bicep.sqlpart import EID
from sentinel.bicep.tables import UNBOUNDED, ProgramTables, system_tables
from sentinel.bicep.times import MAX_TIME, TimeLike, as_datetime, duration, seconds
from sentinel.bicep.values import check_value
from sentinel.errors import (
    BicepActionError,
    BicepAnnouncementError,
    BicepError,
    BicepProgramChangedError,
)

__all__ = ["Processor", "TickResult", "announcement_event", "tick_event"]

log = logging.getLogger("sentinel.bicep")


def announcement_event(program: str, event_class: str) -> str:
    """The sentinel event a tick signals for each announcement it reads."""
    return f"{program}:{event_class}"


def tick_event(program: str) -> str:
    """The sentinel event a tick signals when it has read its announcements."""
    return f"{program}@tick"


@dataclass
class TickResult:
    """What one clock tick did."""

    tick: datetime
    announcements: int
    changes: int
    actions: list[act.ActionCall]
    purged: int
    rejected: list[Rejected] = field(default_factory=list)
    #: Whether the tick evaluated arriving occurrence times (a potential clock tick).
    potential: bool = False


class Processor:
    """A BiCEPL program on a database, processed at clock ticks.

    ``program`` is BiCEPL text or a :class:`~sentinel.bicep.CompiledProgram`
    (``name`` names it in the database; default ``"bicep"`` for text).
    ``bind`` is an Engine, a database URL, or a session factory attached with
    :func:`sentinel.attach` (then each tick is a transaction of a session: the
    event log records the tick's announcements and actions in its commit, and
    detached actions go through the outbox). ``chronon`` is the length of a
    chronon (seconds or a literal such as ``15m``); ticks fall on its multiples.
    ``purge`` removes events whose lifespan has passed, ``archive`` keeps their
    history in archive tables first. ``detector`` receives the actions as events
    (default: the attachment's, else :func:`sentinel.default_detector`).
    ``require_actions`` makes ticks refuse to run while an action of the program
    has no callable registered. ``clock`` gives "now" for announcements without
    a detection time and for :meth:`tick` (default: the detector's clock).

    The program's tables are created by :meth:`install`; sentinel's system
    tables must exist first (``sentinel db upgrade``). Thread-safe: ticks of one
    program are serialized by a lock on its row in the database.
    """

    def __init__(
        self,
        program: CompiledProgram | str,
        bind: Engine | str | Any,
        *,
        name: str | None = None,
        chronon: int | str = "15m",
        detector: Any = None,
        schema: str | None = None,
        prefix: str = "sentinel_",
        purge: bool = True,
        archive: bool = False,
        require_actions: bool = True,
        signal_events: bool = True,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.session_factory: Any = None
        if isinstance(bind, str):
            self.engine: Engine = sa.create_engine(bind)
            self._owns_engine = True
        elif isinstance(bind, Engine):
            self.engine = bind
            self._owns_engine = False
        else:
            engine = _bound_engine(bind)
            if engine is None:
                raise BicepError(
                    f"a processor needs an Engine, a database URL or a session factory bound "
                    f"to an engine, not {bind!r}"
                )
            self.session_factory = bind
            self.engine = engine
            self._owns_engine = False
        dialect = self.engine.dialect.name
        # What the database can hold is checked when install() creates tables,
        # not here: the program may be installed already (by an older sentinel
        # that allowed more), and a restart must run it.
        if isinstance(program, CompiledProgram):
            if (name is not None and name != program.name) or prefix != program.prefix:
                program = compile_program(
                    program.text,
                    name=name or program.name,
                    dialect=dialect,
                    prefix=prefix,
                    storage=False,
                )
            self.program = program.with_dialect(dialect, storage=False)
        else:
            self.program = compile_program(
                program, name=name or "bicep", dialect=dialect, prefix=prefix, storage=False
            )
        self.name = self.program.name
        self.chronon = duration(chronon)
        self.schema = schema
        self.prefix = prefix
        self.archive = archive
        self.purge = purge
        self.require_actions = require_actions
        self.signal_events = signal_events
        self.system = system_tables(schema, prefix)
        self.tables = ProgramTables(self.program, schema=schema, prefix=prefix, archive=archive)
        self.pipeline = Pipeline(
            self.program,
            self.tables,
            self.system,
            chronon=self.chronon,
            archive=archive,
            purge=purge,
        )
        self.detector = detector if detector is not None else self._default_detector()
        self._clock = clock or getattr(self.detector, "_wall", None) or _time
        self._lock = threading.Lock()
        self._rules: dict[str, Any] = {}
        self._channels: dict[str, Any] = {}
        self._define_events()

    # -- set-up ------------------------------------------------------------------------------------
    def _default_detector(self) -> Any:
        if self.session_factory is not None:
            from sentinel.orm.attach import attachments

            for a in attachments():
                if a.target is self.session_factory:
                    return a.detector
        from sentinel.default import default_detector

        return default_detector()

    def _define_events(self) -> None:
        det = self.detector
        names = [tick_event(self.name)]
        names += [announcement_event(self.name, c.name) for c in self.program if not c.complex]
        names += [act.action_event(self.name, a.name) for a in self.program.actions.values()]
        for n in names:
            det.explicit(n)
            self._channels[n.lower()] = det._explicit[n]

    def install(self, *, upgrade: bool = False, keep: bool = False) -> int:
        """Create the program's tables (checking its queries on the database) and
        record it; return its version. Installing it again does nothing.

        A changed program (text, chronon or archiving) raises
        :class:`~sentinel.errors.BicepProgramChangedError` unless ``upgrade``:
        then it becomes the next version, with empty event classes (``keep``
        renames the old version's tables instead of dropping them, see
        :func:`sentinel.bicep.install.kept_name`; a name in use is refused with
        :class:`~sentinel.errors.BicepProgramError` before anything changes).
        What the database cannot hold (:func:`~sentinel.bicep.compiler.check_storage`)
        is refused here, for a new program or version only.
        """
        result = install(
            self.engine,
            self.program,
            chronon=self.chronon,
            schema=self.schema,
            prefix=self.prefix,
            archive=self.archive,
            upgrade=upgrade,
            keep=keep,
        )
        return result.version

    def close(self) -> None:
        """Release the engine if the processor made it (from a URL)."""
        if self._owns_engine:
            self.engine.dispose()

    # -- actions -----------------------------------------------------------------------------------
    def action(
        self,
        name: str,
        fn: act.ActionFn | None = None,
        *,
        coupling: str = "immediate",
        priority: int = 0,
    ) -> Any:
        """Register ``fn(call: ActionCall)`` for the program's action ``name``; it
        runs as a sentinel rule on the action's event with ``coupling``
        (immediate, deferred, detached or detached_independent). Without ``fn``,
        a decorator. Registering an action again replaces it.

        Raises :class:`~sentinel.errors.BicepActionError` for a name the program
        does not use.
        """
        if fn is None:
            return lambda f: self.action(name, f, coupling=coupling, priority=priority) or f
        sig = self.program.actions.get(name.lower())
        if sig is None:
            close = difflib.get_close_matches(
                name, [a.name for a in self.program.actions.values()], n=1
            )
            raise BicepActionError(
                f"program {self.name!r} has no action {name!r}"
                + (f"; did you mean {close[0]!r}?" if close else "")
                + f" (its actions: {', '.join(self._action_names()) or 'none'})",
                action=name,
            )
        if not callable(fn):
            raise BicepActionError(f"action {name!r} needs a callable, not {fn!r}", action=name)
        event = act.action_event(self.name, sig.name)
        rule_name = f"bicep:{event}"
        old = self._rules.pop(sig.ident, None)
        if old is not None:
            old.delete()
        act.register(self.name, sig.name, fn)
        self._rules[sig.ident] = self.detector.rule(
            rule_name, event, action=act.run_action, coupling=coupling, priority=priority
        )
        return None

    def _action_names(self) -> list[str]:
        return [a.name for a in self.program.actions.values()]

    def missing_actions(self) -> list[str]:
        """Actions of the program with no callable registered."""
        return [a.name for ident, a in self.program.actions.items() if ident not in self._rules]

    def _check_actions(self) -> None:
        if not self.require_actions:
            return
        missing = [a for ident, a in self.program.actions.items() if ident not in self._rules]
        if missing:
            a = missing[0]
            cls_ident, index = a.uses[0]
            st = self.program.classes[cls_ident].definition.statements[index]
            raise BicepActionError(
                f"action {a.name!r} (used at {st.action.pos} of program {self.name!r}) has no "
                f"callable registered; register it with processor.action({a.name!r}, fn), or "
                "create the processor with require_actions=False to only record its firings"
                + (
                    f" (also unregistered: {', '.join(x.name for x in missing[1:])})"
                    if len(missing) > 1
                    else ""
                ),
                action=a.name,
            )

    # -- announcements ---------------------------------------------------------------------------
    def _class(self, event_class: str) -> CompiledClass:
        cls = self.program.classes.get(str(event_class).lower())
        if cls is None:
            names = [c.name for c in self.program if not c.complex]
            close = difflib.get_close_matches(str(event_class), names, n=1)
            raise BicepAnnouncementError(
                f"program {self.name!r} has no subscribed event class {event_class!r}"
                + (f"; did you mean {close[0]!r}?" if close else f" (it has {', '.join(names)})"),
                event_class=str(event_class),
            )
        if cls.complex:
            raise BicepAnnouncementError(
                f"{cls.name} is a complex event class: its events are derived, not announced",
                event_class=cls.name,
            )
        return cls

    def _row(
        self,
        cls: CompiledClass,
        occ: TimeLike | None,
        det: TimeLike | None,
        revoke: bool,
        attrs: Mapping[str, Any],
    ) -> dict[str, Any]:
        name = cls.name
        row: dict[str, Any] = {}
        known = {a.ident: a for a in cls.definition.attributes}
        keys = {k.lower() for k in cls.definition.keys}
        for key, value in attrs.items():
            a = known.get(key.lower())
            if a is None:
                close = difflib.get_close_matches(key.lower(), list(known), n=1)
                raise BicepAnnouncementError(
                    f"{name} has no attribute {key!r}"
                    + (f"; did you mean {known[close[0]].name!r}?" if close else "")
                    + f" (its attributes: {', '.join(x.name for x in known.values())})",
                    event_class=name,
                )
            try:
                row[a.ident] = check_value(name, a, value, key=a.ident in keys)
            except ValueError as err:
                raise BicepAnnouncementError(str(err), event_class=name) from None
        for ident in known:
            row.setdefault(ident, None)
        for k in cls.definition.keys:
            if row[k.lower()] is None:
                raise BicepAnnouncementError(
                    f"an announcement of {name} needs its key {k}", event_class=name
                )
        try:
            row["dettime"] = seconds(self._clock() if det is None else det, what="det")
            if revoke:
                row["occtime"] = None if occ is None else seconds(occ, what="occ")
            else:
                if occ is None:
                    raise BicepAnnouncementError(
                        f"an announcement of {name} needs its occurrence time (occ=...)",
                        event_class=name,
                    )
                row["occtime"] = seconds(occ, what="occ")
        except ValueError as err:
            raise BicepAnnouncementError(
                f"announcement of {name}: {err}", event_class=name
            ) from None
        row["revoked"] = 1 if revoke else 0
        return row

    def announce(
        self,
        event_class: str,
        *,
        occ: TimeLike | None = None,
        det: TimeLike | None = None,
        revoke: bool = False,
        connection: Connection | None = None,
        **attributes: Any,
    ) -> None:
        """Announce an event of a subscribed class: it occurs (occurred, will
        occur) at ``occ`` and was detected at ``det`` (default: now). Another
        announcement with the same key revises the event (a mutable class);
        ``revoke=True`` revokes it. The next tick after ``det`` reads it.

        Written to the class's inbox on ``connection`` (in the caller's
        transaction) or in a transaction of its own. Raises
        :class:`~sentinel.errors.BicepAnnouncementError` (nothing written) for
        an unknown class or attribute, a missing key or time, a value of the
        wrong kind, a revision or revocation of an IMMUTABLE class's event, a
        revocation of a key that is not live or announced, and a revision or
        revocation detected before the version of the event already read (its
        detection time would go backwards).
        """
        cls = self._class(event_class)
        row = self._row(cls, occ, det, revoke, attributes)
        with self._connection(connection) as conn:
            self._check_key(conn, cls, row)
            conn.execute(self.tables.classes[cls.ident].inbox.insert(), [row])  # type: ignore[union-attr]

    def announce_many(
        self,
        event_class: str,
        rows: Iterable[Mapping[str, Any]],
        *,
        connection: Connection | None = None,
    ) -> int:
        """Announce many events of one class (each a mapping with ``occ``,
        optionally ``det`` and ``revoke``, and the attributes). Values are
        checked as by :meth:`announce`; revisions of IMMUTABLE events,
        revocations of unknown keys and announcements detected before the
        version already read are rejected at the tick instead (see
        :attr:`TickResult.rejected`). Returns the number written."""
        cls = self._class(event_class)
        batch: list[dict[str, Any]] = []
        for r in rows:
            r = dict(r)
            occ, det, revoke = r.pop("occ", None), r.pop("det", None), bool(r.pop("revoke", False))
            batch.append(self._row(cls, occ, det, revoke, r))
        if batch:
            with self._connection(connection) as conn:
                conn.execute(self.tables.classes[cls.ident].inbox.insert(), batch)  # type: ignore[union-attr]
        return len(batch)

    def _check_key(self, conn: Connection, cls: CompiledClass, row: Mapping[str, Any]) -> None:
        t = self.tables.classes[cls.ident]
        keys = [k.lower() for k in cls.definition.keys]
        read: int | None = conn.execute(
            sa.select(t.now.c.dettime).where(*(t.now.c[k] == row[k] for k in keys))
        ).scalar()
        live = read is not None
        if read is not None and cls.mutable and row["dettime"] < read:
            shown = ", ".join(f"{k}={row[k]!r}" for k in keys)
            what = "revocation" if row["revoked"] else "announcement"
            raise BicepAnnouncementError(
                f"{what} of {cls.name} {shown}: {older_than_read(row['dettime'], read)}",
                event_class=cls.name,
            )
        if cls.mutable and not row["revoked"]:
            return
        assert t.inbox is not None
        pending = conn.execute(
            sa.select(sa.func.count())
            .select_from(t.inbox)
            .where(*(t.inbox.c[k] == row[k] for k in keys), t.inbox.c.revoked == 0)
        ).scalar()
        shown = ", ".join(f"{k}={row[k]!r}" for k in keys)
        if not cls.mutable and (live or pending):
            raise BicepAnnouncementError(
                f"{cls.name} is IMMUTABLE and its event {shown} is already announced; its first "
                "announcement is final (no revision or revocation)",
                event_class=cls.name,
            )
        if row["revoked"] and not live and not pending:
            raise BicepAnnouncementError(
                f"revocation of {cls.name} {shown}: no such event is live or announced",
                event_class=cls.name,
            )

    @contextmanager
    def _connection(self, conn: Connection | None) -> Iterator[Connection]:
        if conn is not None:
            yield conn
        else:
            with self.engine.begin() as own:
                yield own

    # -- ticks ----------------------------------------------------------------------------
    @property
    def last_tick(self) -> datetime | None:
        """The last tick processed (or passed over), or ``None``."""
        with self.engine.connect() as conn:
            state = self._state(conn)
        return as_datetime(state.last_tick)

    def _state(self, conn: Connection, *, lock: bool = False) -> Installed:
        state = installed(conn, self.name, schema=self.schema, prefix=self.prefix, lock=lock)
        if state is None:
            raise BicepError(
                f"program {self.name!r} is not installed in this database; call install() first"
            )
        if state.digest != self.program.digest or state.chronon != self.chronon:
            raise BicepProgramChangedError(
                f"the database holds version {state.version} of program {self.name!r}, which "
                "differs from this processor's program; install it (install(upgrade=True)) "
                "before running it",
                name=self.name,
                installed=state.version,
            )
        return state

    def run_until(
        self, until: TimeLike, *, on_tick: Callable[[TickResult], Any] | None = None
    ) -> list[TickResult]:
        """Process every clock tick up to ``until`` that has work (ticks with
        nothing to read, derive, fire or purge are passed over), and return what
        each did (``on_tick`` is called after each). Afterwards every tick up to
        ``until`` counts as processed.

        Raises :class:`~sentinel.errors.BicepActionError` before any tick when an
        action has no callable (with ``require_actions``). A tick that fails
        rolls back as a whole: its announcements stay in the inboxes."""
        self._check_actions()
        end = (seconds(until, what="until") // self.chronon) * self.chronon
        results: list[TickResult] = []
        with self._lock:
            while True:
                with self.engine.connect() as conn:
                    state = self._state(conn)
                    nxt = self.pipeline.next_tick(conn, state.last_tick)
                if nxt is None or nxt > end:
                    break
                result = self._tick(nxt)
                if result is not None:
                    results.append(result)
                    if on_tick is not None:
                        on_tick(result)
            with self.engine.begin() as conn:
                state = self._state(conn, lock=True)
                if state.last_tick is None or state.last_tick < end:
                    p = self.system.programs
                    conn.execute(p.update().where(p.c.name == self.name).values(last_tick=end))
        return results

    def tick(self) -> list[TickResult]:
        """Process the ticks up to now (the processor's clock)."""
        return self.run_until(self._clock())

    def next_tick(self) -> datetime | None:
        """The next tick that has work, or ``None``."""
        with self.engine.connect() as conn:
            state = self._state(conn)
            return as_datetime(self.pipeline.next_tick(conn, state.last_tick))

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        det = self.detector
        if self.session_factory is not None:
            from sentinel.orm.state import scope_of

            with self.session_factory.begin() as session:
                conn = session.connection()
                scope = scope_of(session)
                if scope is None:
                    yield conn
                else:
                    with det.use_scope(scope):
                        yield conn
            return
        # The detection scope ends after the database transaction: deferred
        # actions run before the commit (and can still fail it), detached ones
        # only once the tick has committed (as with an attached session).
        scope = det.begin()
        try:
            with self.engine.begin() as conn, det.use_scope(scope):
                yield conn
                det.pre_commit(scope)
        except BaseException:
            det.abort(scope)
            raise
        det.commit(scope)

    def _tick(self, tick: int) -> TickResult | None:
        started = datetime.now(UTC)
        t0 = _perf()
        with self._transaction() as conn:
            state = self._state(conn, lock=True)
            if state.last_tick is not None and tick <= state.last_tick:
                return None  # another processor did it
            stale = self.pipeline.stale(conn)
            out, next_eid = self.pipeline.run(conn, tick, state.next_eid, stale)
            if self.signal_events:
                self._signal_read(out)
            calls = self._publish(conn, tick) if out.actions else []
            out.purged = self.pipeline.purge(conn, tick)
            p = self.system.programs
            conn.execute(
                p.update().where(p.c.name == self.name).values(last_tick=tick, next_eid=next_eid)
            )
            conn.execute(
                self.system.ticks.insert().values(
                    program=self.name,
                    tick=tick,
                    announcements=out.announcements,
                    changes=out.changes,
                    actions=len(calls),
                    purged=out.purged,
                    started_at=started,
                    seconds=_perf() - t0,
                )
            )
        for r in out.rejected:
            log.warning(
                "%s tick %s: %s %s rejected: %s",
                self.name,
                as_datetime(tick),
                r.event_class,
                r.key,
                r.reason,
            )
        return TickResult(
            tick=as_datetime(tick),  # type: ignore[arg-type]
            announcements=out.announcements,
            changes=out.changes,
            actions=calls,
            purged=out.purged,
            rejected=out.rejected,
            potential=out.potential,
        )

    def _signal_read(self, out: TickOutcome) -> None:
        det = self.detector
        for ident, row in out.read:
            cls = self.program.classes[ident]
            params = {a.name: row[a.ident] for a in cls.definition.attributes}
            params.update(
                occ_time=row["occtime"], det_time=row["dettime"], revoked=bool(row["revoked"])
            )
            ch = self._channels[announcement_event(self.name, cls.name).lower()]
            ts = row["occtime"] if row["occtime"] is not None else row["dettime"]
            det.notify(ch, params, timestamp=float(ts))
        ch = self._channels[tick_event(self.name).lower()]
        det.notify(ch, {"tick": out.tick}, timestamp=float(out.tick))

    def _publish(self, conn: Connection, tick: int) -> list[act.ActionCall]:
        order = {ident: i for i, ident in enumerate(self.pipeline.order)}
        found: list[tuple[tuple[int, int, int], act.ActionCall]] = []
        for ident, x in self.tables.actions.items():
            sig = self.program.actions[ident]
            for cls_ident in sorted({c for c, _ in sig.uses}):
                cls = self.program.classes[cls_ident]
                c = self.tables.classes[cls_ident].changes
                keys = [k.lower() for k in cls.definition.keys]
                q = (
                    sa.select(x, *(c.c[f"n_{k}"].label(f"key_{k}") for k in keys))
                    .join(c, c.c[EID] == x.c[EID])
                    .where(
                        x.c.bicep_tick == tick,
                        x.c.class_ident == cls_ident,
                        x.c.published == 0,
                    )
                )
                for r in conn.execute(q).mappings():
                    st = cls.definition.statements[r["stmt"]]
                    call = act.ActionCall(
                        program=self.name,
                        action=sig.name,
                        args=_args(r, sig),
                        event_class=cls.name,
                        key={k_name: r[f"key_{k_name.lower()}"] for k_name in cls.definition.keys},
                        tick=as_datetime(tick),  # type: ignore[arg-type]
                        occ_time=as_datetime(r["occtime"]),
                        det_time=as_datetime(r["dettime"]),
                        statement=st.text,
                    )
                    found.append(((order[cls_ident], r["stmt"], r[EID]), call))
            conn.execute(x.update().where(x.c.bicep_tick == tick).values(published=1))
        found.sort(key=lambda item: item[0])
        calls = [c for _, c in found]
        det = self.detector
        for call in calls:
            ch = self._channels[call.event.lower()]
            ts = call.occ_time or call.tick
            det.notify(ch, call.params(), timestamp=ts.timestamp())
        return calls

    # -- inspection ------------------------------------------------------------------------------
    def live(self, event_class: str) -> list[dict[str, Any]]:
        """The class's as-of-now events (attributes, ``occTime``, ``detTime``)."""
        return self._rows(event_class, "now")

    def history(self, event_class: str) -> list[dict[str, Any]]:
        """Every version of the class's events, oldest first (``occTime`` is
        ``None`` for a revocation)."""
        return self._rows(event_class, "history")

    def archived(self, event_class: str) -> list[dict[str, Any]]:
        """The archived history of purged events (with ``archive=True``)."""
        return self._rows(event_class, "archive")

    def _rows(self, event_class: str, which: str) -> list[dict[str, Any]]:
        cls = self.program.classes.get(event_class.lower())
        if cls is None:
            raise BicepError(f"program {self.name!r} has no event class {event_class!r}")
        t = getattr(self.tables.classes[cls.ident], which)
        if t is None:
            return []
        order = [t.c.id] if "id" in t.c else [t.c.occtime]
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t).order_by(*order)).mappings().all()
        out = []
        for r in rows:
            d = {a.name: r[a.ident] for a in cls.definition.attributes}
            d["occTime"] = as_datetime(r["occtime"])
            d["detTime"] = as_datetime(r["dettime"])
            if which != "now":
                d["tick"] = as_datetime(r["bicep_tick"])
            out.append(d)
        return out

    def fired(self) -> list[act.ActionCall]:
        """Every action firing still recorded (purged events' firings go with
        them), in tick order."""
        found: list[tuple[tuple[int, int, int, int], act.ActionCall]] = []
        order = {ident: i for i, ident in enumerate(self.pipeline.order)}
        with self.engine.connect() as conn:
            for ident, x in self.tables.actions.items():
                sig = self.program.actions[ident]
                for r in conn.execute(sa.select(x)).mappings():
                    cls = self.program.classes[r["class_ident"]]
                    st = cls.definition.statements[r["stmt"]]
                    found.append(
                        (
                            (r["bicep_tick"], order[cls.ident], r["stmt"], r[EID]),
                            act.ActionCall(
                                program=self.name,
                                action=sig.name,
                                args=_args(r, sig),
                                event_class=cls.name,
                                key={},
                                tick=as_datetime(r["bicep_tick"]),  # type: ignore[arg-type]
                                occ_time=as_datetime(r["occtime"]),
                                det_time=as_datetime(r["dettime"]),
                                statement=st.text,
                            ),
                        )
                    )
        found.sort(key=lambda item: item[0])
        return [c for _, c in found]

    def expirations(self) -> dict[str, dict[tuple[Any, ...], datetime | None]]:
        """When each live event expires (2.5): the latest ``occTime + lifespan``
        among the events its lineage connects it to (``None``: never), as of the
        last tick. Keyed by class name, then by the event's key values."""
        out: dict[str, dict[tuple[Any, ...], datetime | None]] = {}
        with self.engine.connect() as conn:
            for cls in self.program:
                t = self.tables.classes[cls.ident]
                kcols = [t.now.c[k.lower()] for k in cls.definition.keys]
                found: dict[tuple[Any, ...], datetime | None] = {}
                for r in conn.execute(sa.select(t.now.c.bicep_exp, *kcols)):
                    exp = None if r[0] >= UNBOUNDED else as_datetime(r[0])
                    found[tuple(r[1:])] = exp
                out[cls.name] = found
        return out


def _args(row: Any, sig: Any) -> tuple[Any, ...]:
    out = []
    for i in range(len(sig.kinds)):
        v = row[f"p{i + 1}"]
        if sig.times and sig.times[i] and isinstance(v, int) and 0 <= v <= MAX_TIME:
            v = as_datetime(v)  # (a time no datetime holds stays seconds)
        out.append(v)
    return tuple(out)


def _bound_engine(factory: Any) -> Engine | None:
    kw = getattr(factory, "kw", None)
    bind = kw.get("bind") if isinstance(kw, dict) else None
    if isinstance(bind, Engine):
        return bind
    session_factory = getattr(factory, "session_factory", None)  # scoped_session
    if session_factory is not None:
        return _bound_engine(session_factory)
    return None


def _time() -> float:
    import time

    return time.time()


def _perf() -> float:
    import time

    return time.perf_counter()
