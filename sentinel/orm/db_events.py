"""Database events: insert, update and delete of reactive mapped objects.

Every mapped class that is also :class:`~sentinel.Reactive` has three primitive
events per detector, named like method events but with the operation as the
phase: ``Stock:insert``, ``Stock:update``, ``Stock:delete``. They follow the
reactive layer's scheme (``docs/reactive.md``):

- one detector channel per operation for the top mapped reactive class of an
  inheritance hierarchy (the *root*): every occurrence's ``event`` is the root's,
  ``"Stock:update"``, also for a ``TechStock`` row;
- the root's class-level event has no selector; a subclass's class-level event
  (``TechStock:update``) carries the subclass's
  :class:`~sentinel.reactive.ClassSelector`; an instance-level event carries the
  row's :class:`~sentinel.ObjectRef` (``<Stock 42>``, the same reference its
  method events carry).

They are made by the ORM layer after each flush of an attached session
(SQLAlchemy's ``after_flush``: the statements have run, primary keys are known,
attribute history is still there) and signalled at the flush's end
(``after_flush_postexec``: what a rule changes then, the next flush writes), in
the session's transaction scope: the
inserts in the order the objects were added, then the updates, then the deletes
(``session.deleted``, then the rows a ``delete-orphan`` cascade deleted); a row
deleted and inserted again in one flush (one UPDATE) signals its delete before
the inserts. Only the rows the flush wrote signal; statements that bypass the
unit of work (ORM bulk ``insert``/``update``/``delete``, ``bulk_save_objects``,
Core) do not.
Parameters:

``insert``
    ``new``: the column attributes' values (those the object holds after the
    INSERT; server-side defaults that were not fetched are absent).
``update``
    ``old`` and ``new``: the column attributes whose value changed, before and
    after (an old value that was never loaded is absent from ``old``). Only rows
    with a net change of a column attribute signal. ``new`` also holds the
    values SQLAlchemy wrote itself in the UPDATE (a ``version_id_col``'s new
    version, ``onupdate=`` values of the updated tables' columns the flush did
    not set), as the object holds them after it (see :func:`_add_generated`);
    their previous values, which the flush overwrote, are not in ``old``.
``delete``
    ``old``: the column attributes' values the object held.

The occurrence time of a row's events is the time of the flush, unless the class
names a column attribute holding it: ``__sentinel_occurred_at__ = "eta"``. The
events of an insert and an update then occur at the row's (new) value of that
attribute, those of a delete at its old value (``docs/bitemporal.md``); NULL
means the time of the flush; a value that is not a time raises
:class:`~sentinel.errors.OccurrenceTimeError` and the flush fails.

Values are made loggable like method parameters (:mod:`sentinel.params`); a
column value the log cannot store raises
:class:`~sentinel.params.UnloggableParameter` naming the event and
``new.<attribute>``, and the flush fails (nothing is written).

Use them by name in Snoop text, or through :func:`db_events`::

    det.rule("audit", "Stock:update", action=...)                # any Stock row
    det.rule("ibm", db_events(ibm).update, action=...)          # one row
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa
from sqlalchemy.orm import InstanceState, Mapper, PassiveFlag
from sqlalchemy.orm.attributes import get_history, instance_state
from sqlalchemy.orm.base import NO_VALUE
from sqlalchemy.sql.elements import ClauseElement
from sqlalchemy.types import TypeEngine

from sentinel.algebra.expressions import Primitive
from sentinel.errors import DuplicateEventError, ReactiveError
from sentinel.occurrence import ObjectRef, names_of, occurrence_time
from sentinel.params import normalize
from sentinel.reactive import ClassSelector, detector_of, object_ref
from sentinel.reactive.classes import PLAIN, class_info

#: The parameters' names of database events (interned: shared by every occurrence).
_NEW = names_of(("new",))
_OLD = names_of(("old",))
_OLD_NEW = names_of(("old", "new"))

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from sentinel.detector import Channel, EventDetector, Scope

__all__ = [
    "KINDS",
    "OCCURRED_AT",
    "DBEvents",
    "db_events",
    "define_db_events",
    "note_expressions",
    "signal_flush",
    "signal_made",
]

#: The class attribute naming the column attribute that holds a row's occurrence time.
OCCURRED_AT: Final = "__sentinel_occurred_at__"

log = logging.getLogger("sentinel.orm")

#: The database operations that are events.
KINDS: Final = ("insert", "update", "delete")
_NO_INIT = PassiveFlag.PASSIVE_NO_INITIALIZE


def _mapper(cls: type) -> Mapper[Any] | None:
    m: Any = sa.inspect(cls, raiseerr=False)
    return m if isinstance(m, Mapper) else None


def db_root(cls: type) -> type | None:
    """The class whose channels ``cls``'s database events use: the top mapped
    class of its inheritance hierarchy that is reactive (``None`` when ``cls`` is
    not a reactive mapped class)."""
    mapper = _mapper(cls)
    if mapper is None or class_info(cls) is None:
        return None
    root: type | None = None
    for m in mapper.iterate_to_root():
        if class_info(m.class_) is not None:
            root = m.class_
    return root


def _selectors(cls: type, root: type) -> tuple[ClassSelector, ...]:
    """The class selectors an occurrence of a ``cls`` row carries: every
    reactive class from ``cls`` up to, not including, ``root``."""
    out = []
    for k in cls.__mro__:
        if k is root or not issubclass(k, root):
            continue
        info = class_info(k)
        if info is not None:
            out.append(info.selector)
    return tuple(out)


def _primitive(
    cls: type, root: type, kind: str, selector: Any = None, label: str = ""
) -> Primitive:
    info, root_info = class_info(cls), class_info(root)
    assert info is not None and root_info is not None
    channel = f"{root_info.name}:{kind}"
    if selector is None and cls is not root:
        selector = info.selector
    return Primitive(channel, selector, label or f"{info.name}:{kind}")


def class_primitives(cls: type) -> list[Primitive]:
    """The class-level database events of ``cls`` (empty when it is not a
    reactive mapped class)."""
    root = db_root(cls)
    if root is None:
        return []
    return [_primitive(cls, root, kind) for kind in KINDS]


def define_db_events(detector: EventDetector, classes: Iterable[type]) -> None:
    """Define the database events of ``classes`` (the reactive mapped ones) on
    ``detector``, so rules can name them in text. A name the detector already
    uses for something else is reported in the log and left alone."""
    for cls in classes:
        for prim in class_primitives(cls):
            try:
                detector.define_primitive(prim)
            except DuplicateEventError as err:
                log.warning("database event %s not defined: %s", prim.label, err)


class DBEvents:
    """The database events of one reactive mapped class (class level) or of one
    persistent object (instance level); see :func:`db_events`."""

    __slots__ = ("_cls", "_prefix", "_ref", "_root")

    def __init__(self, cls: type, root: type, ref: ObjectRef | None) -> None:
        self._cls = cls
        self._root = root
        self._ref = ref
        info = class_info(cls)
        assert info is not None
        if ref is None:
            self._prefix = info.name
        else:
            self._prefix = f"{info.name}[{','.join(map(str, ref.key))}]"

    def event(self, kind: str, *, name: str | None = None) -> Primitive:
        """The ``kind`` event (``"insert"``, ``"update"`` or ``"delete"``),
        labelled ``name`` if given (register it with
        ``detector.define_primitive`` to use the name in text)."""
        if kind not in KINDS:
            raise ReactiveError(
                f"a database event is 'insert', 'update' or 'delete', not {kind!r}",
                owner=self._prefix,
            )
        label = name or f"{self._prefix}:{kind}"
        prim = _primitive(self._cls, self._root, kind, self._ref, label)
        det = detector_of(self._cls)
        if det is not None:
            det.channel(prim.name)  # so rules can use it before the first flush
            if self._ref is None and name is None:
                det.define_primitive(prim)
        return prim

    @property
    def insert(self) -> Primitive:
        """Rows inserted (class level only: an object has no identity before)."""
        if self._ref is not None:
            raise ReactiveError(
                f"{self._prefix} is persistent already: instance-level insert events never "
                "occur; use the class-level event db_events(Class).insert",
                owner=self._prefix,
            )
        return self.event("insert")

    @property
    def update(self) -> Primitive:
        """Rows updated (a net change of a column attribute)."""
        return self.event("update")

    @property
    def delete(self) -> Primitive:
        """Rows deleted."""
        return self.event("delete")

    def __repr__(self) -> str:
        return f"<database events of {self._prefix}>"


def db_events(target: Any) -> DBEvents:
    """The database events of a reactive mapped class (class level: any row of
    it or of its subclasses) or of one persistent object (instance level: that
    row only)::

        db_events(Stock).insert          # Stock:insert
        db_events(TechStock).update      # TechStock:update (TechStock rows only)
        db_events(ibm).delete            # the row of ibm

    Raises :class:`~sentinel.errors.ReactiveError` for a class that is not both
    reactive and mapped, and for an object that has no primary key yet (flush
    it first: its events are identified by its row).
    """
    cls = target if isinstance(target, type) else type(target)
    root = db_root(cls)
    if root is None:
        raise ReactiveError(
            f"{cls.__qualname__} has no database events: it must be a mapped class that "
            "derives from sentinel.Reactive",
            owner=cls.__qualname__,
        )
    if isinstance(target, type):
        return DBEvents(cls, root, None)
    ref = object_ref(target)
    if ref.transient:
        raise ReactiveError(
            f"{cls.__qualname__} object {target!r:.60} has no primary key yet; flush it (or "
            "load it) before asking for its instance-level database events",
            owner=cls.__qualname__,
        )
    return DBEvents(cls, root, ref)


# -- signalling ------------------------------------------------------------------------


class _Plan:
    """What signalling the database events of one class needs (cached)."""

    __slots__ = (
        "channels",
        "compared",
        "generated",
        "keys",
        "mapper",
        "name",
        "occurred_at",
        "onupdate",
        "selectors",
        "tables_of",
        "version_key",
        "version_table",
    )

    def __init__(self, detector: EventDetector, cls: type, root: type) -> None:
        info, root_info = class_info(cls), class_info(root)
        assert info is not None and root_info is not None
        self.name = info.name
        mapper = _mapper(cls)
        assert mapper is not None
        self.mapper: Mapper[Any] = mapper
        self.keys = tuple(p.key for p in self.mapper.column_attrs)
        #: The attributes whose type compares values with ``==`` (SQLAlchemy's
        #: history, and whether it writes an UPDATE, go by the type's
        #: ``compare_values``: a type may find ``"IBM"`` and ``"ibm"`` equal).
        self.compared = frozenset(k for k in self.keys if _plain_equality(mapper, k))
        self.selectors = _selectors(cls, root)
        self.channels: dict[str, Channel] = {
            kind: detector.channel(f"{root_info.name}:{kind}") for kind in KINDS
        }
        #: The attribute holding the rows' occurrence time (``__sentinel_occurred_at__``).
        self.occurred_at: str | None = getattr(cls, OCCURRED_AT, None)
        if self.occurred_at is not None and self.occurred_at not in self.keys:
            raise ReactiveError(
                f"{cls.__qualname__}.{OCCURRED_AT} names {self.occurred_at!r}, which is not "
                "a column attribute of the class",
                owner=cls.__qualname__,
            )
        # Values SQLAlchemy writes itself in an UPDATE (into the object once the
        # statement ran): the version counter, and the onupdate= values of the
        # updated tables' columns the flush did not set.
        self.version_key: str | None = None
        self.version_table: Any = None
        vcol = mapper.version_id_col
        if vcol is not None and mapper.version_id_generator is not False:
            self.version_key = mapper.get_property_by_column(vcol).key
            self.version_table = vcol.table
        #: (attribute, table) of the columns with an onupdate= (or a
        #: server_onupdate= fetched at the flush).
        self.onupdate: tuple[tuple[str, Any], ...] = tuple(
            (p.key, c.table)
            for p in mapper.column_attrs
            for c in p.columns
            if isinstance(c, sa.Column)
            and (c.onupdate is not None or c.server_onupdate is not None)
        )
        self.generated = self.version_key is not None or bool(self.onupdate)
        #: The tables each column attribute is written to.
        self.tables_of: dict[str, frozenset[Any]] = {
            p.key: frozenset(c.table for c in p.columns if isinstance(c, sa.Column))
            for p in mapper.column_attrs
        }


def _plain_equality(mapper: Mapper[Any], key: str) -> bool:
    impl = getattr(mapper.class_manager.get(key), "impl", None)
    fn = getattr(getattr(impl, "is_equal", None), "__func__", None)
    return fn is TypeEngine.compare_values


def _plan(plans: dict[type, _Plan | None], detector: EventDetector, cls: type) -> _Plan | None:
    try:
        return plans[cls]
    except KeyError:
        pass
    root = db_root(cls)
    plan = None
    if root is not None and detector_of(cls) is detector:
        plan = _Plan(detector, cls, root)
    plans[cls] = plan
    return plan


def _when(plan: _Plan, values: dict[str, Any], event: str) -> float | None:
    """The occurrence time of a row's event: its ``occurred_at`` attribute's value
    (None: the time of the flush)."""
    name = plan.occurred_at
    if name is None:
        return None
    value = values.get(name)
    return None if value is None else occurrence_time(value, event)


def _value(v: Any, event: str, param: str) -> Any:
    # A string (or bytes, or int) too large for the log passes: the log's
    # listener refuses it unless the attachment's log policy leaves the
    # column out.
    if type(v) in PLAIN or type(v) is bytes:
        return v
    return normalize(v, event=event, param=param)


def _needed(ch: Channel, sels: tuple[Any, ...], ref: Any) -> bool:
    if ch.any:
        return True
    sel = ch.selected
    if not sel:
        return False
    return ref in sel or any(s in sel for s in sels)


def _flushed(
    session: Session, flush_context: Any
) -> tuple[list[InstanceState[Any]], list[Any], list[Any], list[InstanceState[Any]]]:
    """What the flush described by ``flush_context`` (SQLAlchemy's unit of
    work, as ``after_flush`` receives it) wrote, in the order its events are
    signalled: the states of the rows an insert took over (deleted, then
    inserted again with the same primary key: SQLAlchemy's "row switch" turns
    the pair into an UPDATE), the objects inserted and updated, in the
    session's order, and the states of the rows deleted: those of
    ``session.deleted``, then those deleted by a ``delete-orphan`` cascade,
    which are not in ``session.deleted``.

    Only what the flush wrote: an object it left alone (``session.flush(objects)``
    leaves out the others; an object added by an ``after_flush`` listener waits
    for the next flush) is not in its unit of work, or only as a related object
    (``listonly``). Without ``flush_context`` the session's collections are
    taken as they are."""
    if flush_context is None:
        deleted = [instance_state(o) for o in session.deleted]
        return [], list(session.new), list(session.dirty), deleted
    states: dict[InstanceState[Any], tuple[bool, bool]] = flush_context.states
    new = [o for o in session.new if states.get(instance_state(o)) == (False, False)]
    dirty = [o for o in session.dirty if states.get(instance_state(o)) == (False, False)]
    deleted = [instance_state(o) for o in session.deleted]
    deleted = [st for st in deleted if st in states and states[st][0]]
    seen = set(deleted)
    deleted.extend(st for st, (isdelete, _) in states.items() if isdelete and st not in seen)
    # a deleted state left listonly: its row was switched to an insert's object
    switched = [st for st in deleted if states[st][1]]
    if switched:
        deleted = [st for st in deleted if not states[st][1]]
    return switched, new, dirty, deleted


def signal_flush(
    detector: EventDetector,
    plans: dict[type, _Plan | None],
    session: Session,
    scope: Scope,
    flush_context: Any = None,
    into: list[tuple[Any, ...]] | None = None,
    expressions: dict[Any, dict[str, Any]] | None = None,
) -> None:
    """Signal the database events of the flush that just ran in ``session`` (call
    from ``after_flush`` with its ``flush_context``), in ``scope``: of the rows
    it wrote (see :func:`_flushed`). Nothing is computed for a class whose
    events nobody listens to (and no occurrence listener, such as the log).

    With ``into``, the events are not signalled but appended to it, each as
    the arguments of ``detector.emit``: the attachment makes them in
    ``after_flush``, where the objects' history tells what the flush wrote,
    and signals them in ``after_flush_postexec`` (:func:`signal_made`), once
    SQLAlchemy has reset that history, so that what a rule changes in an
    object is a change the next flush writes (changed in ``after_flush``, it
    was reset with the rest and never written). ``expressions``:
    :func:`note_expressions` of the flush's ``before_flush``."""
    always = detector.has_listeners
    # positional: the parameters' names are constants
    emit: Callable[..., Any] = detector.emit if into is None else _collect(into)
    switched, inserted, updated, deleted = _flushed(session, flush_context)
    if switched:
        _signal_deletes(detector, plans, switched, scope, always, emit)
    for obj in inserted:
        plan = _plan(plans, detector, type(obj))
        if plan is None:
            continue
        ch = plan.channels["insert"]
        if not (always or ch.any or ch.selected):
            continue
        ref = ObjectRef(plan.name, plan.mapper.primary_key_from_instance(obj))
        if not (always or _needed(ch, plan.selectors, ref)):
            continue
        event = f"{plan.name}:insert"
        state_dict = instance_state(obj).dict
        new = {k: _value(state_dict[k], event, f"new.{k}") for k in plan.keys if k in state_dict}
        emit(
            ch,
            (MappingProxyType(new),),
            _NEW,
            ref,
            (*plan.selectors, ref),
            scope,
            _when(plan, new, event),
        )
    for obj in updated:
        plan = _plan(plans, detector, type(obj))
        if plan is None:
            continue
        ch = plan.channels["update"]
        if not (always or ch.any or ch.selected):
            continue
        ref = object_ref(obj)
        if not (always or _needed(ch, plan.selectors, ref)):
            continue
        event = f"{plan.name}:update"
        old: dict[str, Any] = {}
        new = {}
        # Only attributes set since the last flush can have changed: SQLAlchemy
        # keeps their committed values. Plain values are compared here as
        # SQLAlchemy's history compares them (==, where the column's type does);
        # anything else (a value never loaded, a mutable type, a type comparing
        # its own way) asks the attribute's history.
        state = instance_state(obj)  # what sa.inspect(obj) returns, without its registry
        touched = state.committed_state
        current = state.dict
        compared = plan.compared
        for k in plan.keys:
            if k not in touched:
                continue
            was, now = touched[k], current.get(k, touched)
            if type(was) in PLAIN and type(now) in PLAIN and k in compared:
                if was == now:
                    continue
                old[k] = was
                new[k] = now
                continue
            hist = get_history(obj, k, _NO_INIT)
            if not (hist.added or hist.deleted):
                continue
            if hist.deleted:
                old[k] = _value(hist.deleted[0], event, f"old.{k}")
            new[k] = _value(hist.added[0], event, f"new.{k}") if hist.added else None
        # set to SQL expressions (``Stock.qty + 5``): the UPDATE wrote them and
        # SQLAlchemy expired them (read again when next used): their old values,
        # noted before the flush (when they were loaded), and no new ones
        exprs = None if expressions is None else expressions.get(state)
        if exprs:
            for k, was in exprs.items():
                if was is not NO_VALUE:
                    old[k] = _value(was, event, f"old.{k}")
        elif not new:
            continue  # no column changed (a collection, or the same value set again)
        if plan.generated:
            _add_generated(plan, new, current, event)
        when = None
        if plan.occurred_at is not None:
            when = _when(plan, {plan.occurred_at: current.get(plan.occurred_at)}, event)
        emit(
            ch,
            (MappingProxyType(old), MappingProxyType(new)),
            _OLD_NEW,
            ref,
            (*plan.selectors, ref),
            scope,
            when,
        )
    _signal_deletes(detector, plans, deleted, scope, always, emit)


def note_expressions(session: Session) -> dict[Any, dict[str, Any]] | None:
    """Before a flush: the attributes of ``session``'s changed objects set to a
    SQL expression (``stock.qty = Stock.qty + 5``), with their old values
    (SQLAlchemy's ``NO_VALUE`` when not loaded), by state. The flush writes
    them and expires them, forgetting the old value: after it, nothing tells
    that the row changed."""
    found: dict[Any, dict[str, Any]] | None = None
    # the identity map's modified states (what session.dirty starts from,
    # without its history checks): not every object the session holds
    modified = getattr(session.identity_map, "_modified", None)
    states = session.identity_map.all_states() if modified is None else list(modified)
    for state in states:
        touched = state.committed_state
        if not touched:
            continue
        current = state.dict
        for k in touched:
            if isinstance(current.get(k), ClauseElement):
                if found is None:
                    found = {}
                found.setdefault(state, {})[k] = touched[k]
    return found


def _collect(into: list[tuple[Any, ...]]) -> Callable[..., Any]:
    def collect(*args: Any) -> None:
        into.append(args)

    return collect


def signal_made(detector: EventDetector, events: list[tuple[Any, ...]]) -> None:
    """Signal the events :func:`signal_flush` made ``into`` a list, in order."""
    emit = detector.emit
    for args in events:
        emit(*args)


def _add_generated(plan: _Plan, new: dict[str, Any], current: Any, event: str) -> None:
    """Add to ``new`` (an updated row's changed columns) the values SQLAlchemy
    wrote itself in the flush's UPDATE, as the object holds them now: the new
    version of a ``version_id_col`` (the statement updated the row: SQLAlchemy
    bumps it at every UPDATE of the row), and the ``onupdate=`` values of the
    columns the flush did not set, in the tables it updated (one with a changed
    column, and the version's). A value not in the object (a SQL expression's,
    expired until reloaded) stays out."""
    tables: set[Any] = set()
    tables_of = plan.tables_of
    for k in new:
        tables.update(tables_of.get(k, ()))
    key = plan.version_key
    if key is not None:
        tables.add(plan.version_table)
        if key not in new and key in current:
            new[key] = _value(current[key], event, f"new.{key}")
    for key, table in plan.onupdate:
        if key not in new and table in tables and key in current:
            new[key] = _value(current[key], event, f"new.{key}")


def _signal_deletes(
    detector: EventDetector,
    plans: dict[type, _Plan | None],
    deleted: list[InstanceState[Any]],
    scope: Scope,
    always: bool,
    emit: Callable[..., Any],
) -> None:
    """Signal the delete events of the rows of ``deleted`` (states, in order)."""
    for state in deleted:
        # from the state: an orphan's object may be gone (garbage-collected)
        plan = _plan(plans, detector, state.class_)
        if plan is None:
            continue
        ch = plan.channels["delete"]
        if not (always or ch.any or ch.selected):
            continue
        ident = state.identity
        if ident is None:  # pragma: no cover - a deleted row has its identity
            continue
        ref = ObjectRef(plan.name, tuple(ident))
        if not (always or _needed(ch, plan.selectors, ref)):
            continue
        event = f"{plan.name}:delete"
        state_dict = state.dict
        old = {k: _value(state_dict[k], event, f"old.{k}") for k in plan.keys if k in state_dict}
        emit(
            ch,
            (MappingProxyType(old),),
            _OLD,
            ref,
            (*plan.selectors, ref),
            scope,
            _when(plan, old, event),
        )


def prepare_name(detector: EventDetector, expr: Primitive) -> None:
    """For the detector's ``prepare`` event (the reactive layer's plug-in,
    :func:`sentinel.reactive.hub.install`, calls it once this module is loaded): a text
    expression naming ``Stock:update`` before sentinel was attached on that
    detector finds the database events of its reactive mapped classes defined
    here, on first use."""
    name = expr.name
    if expr.selector is not None or not name.endswith(_SUFFIXES) or name in detector.events:
        return
    from sentinel.reactive.hub import hub_for

    define_db_events(detector, list(hub_for(detector).classes))


_SUFFIXES: Final = tuple(f":{kind}" for kind in KINDS)
