"""What an attachment listens to, and which databases its log and outbox go to.

Targets. :func:`attach` takes a ``sessionmaker``, a ``scoped_session``, a
``Session`` subclass, or their asyncio counterparts (``async_sessionmaker``,
``async_scoped_session``, an ``AsyncSession`` subclass). Session events are
always the synchronous ``Session``'s (an ``AsyncSession`` runs one, its
``sync_session``, and SQLAlchemy sends its events), so an asynchronous target
is followed through its sessions' synchronous class:

- an ``AsyncSession`` subclass: its ``sync_session_class`` (``Session`` unless
  the class says otherwise, so attaching ``AsyncSession`` itself follows every
  session of the process, like attaching ``Session``);
- an ``async_sessionmaker``: the ``sync_session_class`` it passes its sessions;
  when it passes none, attaching gives it one of its own (a subclass of the
  ``AsyncSession`` class's, removed again at detach), as ``sessionmaker`` does
  for the sessions it makes.

Databases. A transaction's log rows are written, in the transaction, on every
database it holds a connection to when it commits (so each database's log is
the complete record of the transactions that used it, and commits exactly when
that database's part of the transaction does); one that used none writes them on
the *home* database. The home database also receives the outbox entries of
detached rules (joining the transaction if it was not in it yet), the late log
rows and the logs of aborted transactions' detached rules: it is ``log_bind``
when given, else the factory's default bind, else the only database of its
``binds``. Configurations that could not keep the log atomic with the data are
refused when attaching (:func:`check_binds`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from sentinel.errors import AttachError

__all__ = ["Target", "check_binds", "factory_engines", "resolve_target", "sync_engine"]

_TAKES = (
    "attach() takes a sessionmaker, a scoped_session, a Session subclass or their "
    "asyncio counterparts (async_sessionmaker, async_scoped_session, an AsyncSession "
    "subclass)"
)


def _asyncio() -> Any:
    try:
        from sqlalchemy.ext import asyncio as sa_asyncio
    except ImportError:  # pragma: no cover - SQLAlchemy without its asyncio extension
        return None
    return sa_asyncio


@dataclass(eq=False)
class Target:
    """What :func:`resolve_target` found: the object to listen on, the session
    class whose attachment it is, the factory of detached rules' sessions (``None``
    when there is no synchronous one), the factory's ``kw`` (binds) and whether
    it is asynchronous. ``undo`` puts back what attaching changed on the target."""

    listen_on: Any
    session_class: type
    session_factory: Callable[[], Session] | None
    kw: dict[str, Any]
    _: KW_ONLY
    is_async: bool = False
    undo: Callable[[], None] | None = None
    #: The caller named the factory of detached rules' sessions.
    explicit_factory: bool = field(default=False, init=False)


def resolve_target(target: Any, session_factory: Any, *, install: bool = True) -> Target:
    """Resolve ``target`` (see the module docs). With ``install`` an
    ``async_sessionmaker`` without a ``sync_session_class`` gets its own (undone
    by ``Target.undo``); without, nothing is changed (for :func:`detach`).
    Raises :class:`~sentinel.errors.AttachError` for anything else."""
    resolved = _resolve(target, session_factory, install)
    resolved.explicit_factory = session_factory is not None
    return resolved


def _resolve(target: Any, session_factory: Any, install: bool) -> Target:
    if isinstance(target, scoped_session):
        target = target.session_factory
    if isinstance(target, sessionmaker):
        return Target(target, target.class_, session_factory or target, dict(target.kw))
    if isinstance(target, type) and issubclass(target, Session):
        return Target(target, target, session_factory or target, {})
    if isinstance(target, Session):
        raise AttachError(
            f"{_TAKES}, not a Session object: attach the factory your sessions come from",
            target=target,
        )
    aio = _asyncio()
    if aio is not None:
        if isinstance(target, aio.async_scoped_session):
            target = target.session_factory
        if isinstance(target, aio.async_sessionmaker):
            return _async_factory(target, session_factory, install)
        if isinstance(target, type) and issubclass(target, aio.AsyncSession):
            sync_cls: type = target.sync_session_class  # type: ignore[attr-defined]
            return Target(sync_cls, sync_cls, session_factory, {}, is_async=True)
        if isinstance(target, aio.AsyncSession):
            raise AttachError(
                f"{_TAKES}, not an AsyncSession object: attach the factory your sessions come from",
                target=target,
            )
    raise AttachError(f"{_TAKES}, not {type(target).__name__} ({target!r:.60})", target=target)


def _async_factory(target: Any, session_factory: Any, install: bool) -> Target:
    kw: dict[str, Any] = target.kw
    sync_cls = kw.get("sync_session_class")
    undo = None
    if sync_cls is None:
        existing = getattr(target, "_sentinel_sync_class", None)
        if existing is not None:
            sync_cls = existing
        elif install:
            base = target.class_.sync_session_class
            sync_cls = type(base.__name__, (base,), {"__module__": base.__module__})
            kw["sync_session_class"] = sync_cls
            target._sentinel_sync_class = sync_cls

            def undo() -> None:
                if kw.get("sync_session_class") is sync_cls:
                    del kw["sync_session_class"]
                target.__dict__.pop("_sentinel_sync_class", None)

        else:
            sync_cls = target.class_.sync_session_class
    return Target(sync_cls, sync_cls, session_factory, dict(kw), is_async=True, undo=undo)


def sync_engine(bind: Any) -> Engine | None:
    """The synchronous :class:`~sqlalchemy.engine.Engine` behind a bind (an
    engine, a connection, or their asyncio counterparts), or ``None``."""
    if isinstance(bind, Engine):
        return bind
    if isinstance(bind, Connection):
        return bind.engine
    inner = getattr(bind, "sync_engine", None)
    return inner if isinstance(inner, Engine) else None


def factory_engines(kw: dict[str, Any]) -> tuple[Engine | None, list[Engine]]:
    """The default bind's engine and every distinct engine a factory's ``kw``
    names (``bind`` and the values of ``binds``), as far as they are known when
    attaching (a ``get_bind()`` override may choose others at run time)."""
    default = sync_engine(kw.get("bind"))
    engines: list[Engine] = [] if default is None else [default]
    for b in (kw.get("binds") or {}).values():
        e = sync_engine(b)
        if e is not None and e not in engines:
            engines.append(e)
    return default, engines


def _autocommit(engine: Engine) -> bool:
    level = engine.get_execution_options().get("isolation_level") or getattr(
        engine.dialect, "isolation_level", None
    )
    return level == "AUTOCOMMIT"


def check_binds(
    target: Any, kw: dict[str, Any], log_bind: Any, *, logging_on: bool, outbox: bool
) -> tuple[Engine | None, list[Engine]]:
    """Check, when attaching, that the log can be atomic with the data of the
    databases the factory names; return ``(home engine or None, engines)``.

    Refused with :class:`~sentinel.errors.AttachError`: an engine in AUTOCOMMIT
    mode (each statement commits on its own: the log could never commit with the
    data); a ``log_bind`` that is not one of the factory's databases (the outbox
    would commit apart from the data that triggered it); several databases and
    no way to tell the home database (no default bind, no ``log_bind``)."""
    default, engines = factory_engines(kw)
    home: Engine | None = None
    if log_bind is not None:
        home = sync_engine(log_bind)
        if home is None:
            raise AttachError(
                f"attach(log_bind=...) takes an Engine (or AsyncEngine), not "
                f"{type(log_bind).__name__}",
                target=log_bind,
            )
        if engines and home not in engines:
            raise AttachError(
                f"attach(log_bind={home.url!r}): this database is none of those "
                f"{target!r:.60} binds its sessions to, so sentinel's outbox and log rows "
                "could not commit in the same transaction as the data; name one of them",
                target=target,
            )
    elif default is not None:
        home = default
    elif len(engines) == 1:
        home = engines[0]
    elif len(engines) > 1 and (logging_on or outbox):
        raise AttachError(
            f"the sessions of {target!r:.60} use several databases "
            f"({', '.join(repr(str(e.url)) for e in engines)}) and none is the default "
            "bind: name the one that holds sentinel's outbox and late log rows with "
            "attach(..., log_bind=engine) (each transaction's log is written on every "
            "database it used)",
            target=target,
        )
    if logging_on or outbox:
        for e in engines:
            if _autocommit(e):
                raise AttachError(
                    f"the engine {str(e.url)!r} of {target!r:.60} runs in AUTOCOMMIT mode: "
                    "each statement commits on its own, so sentinel's log could not "
                    "commit with the data; attach a factory whose engine uses transactions",
                    target=target,
                )
    return home, engines
