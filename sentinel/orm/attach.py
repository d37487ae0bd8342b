"""Attaching sentinel to a SQLAlchemy session factory.

:func:`attach` listens to the session events of a ``sessionmaker`` (or
``scoped_session``, or ``Session`` subclass) and drives its detector with them:

===================================  =============================================
SQLAlchemy                           sentinel
===================================  =============================================
``after_transaction_create`` (root)  a detection scope per root transaction;
                                     ``txn:begin``
``after_transaction_create``         a savepoint of the scope
(``begin_nested``)
``after_begin``                      remember the database (where the log goes)
``after_flush``                      ``Class:insert`` / ``:update`` / ``:delete``
                                     made (signalled at ``after_flush_postexec``)
``before_commit`` (root),            the pre-commit step, once the session has
``after_flush_postexec``,            nothing left to flush (see
``after_transaction_end``            :mod:`sentinel.orm.commit`):
(a savepoint released at commit)     ``txn:pre_commit`` (deferred rules), then the
                                     log and the outbox written in the transaction
``after_commit`` (root)              ``txn:commit``; flush the scope; detached
                                     rules to the worker pool (a session that
                                     joined a transaction begun outside it: at
                                     that transaction's commit, see
                                     :meth:`Attachment._hand_over`)
``after_commit`` (``begin_nested``)  release the savepoint
``after_transaction_end``            savepoint not released: roll detection back
                                     to it; root not committed: ``txn:abort``,
                                     flush the scope, log it as aborted
===================================  =============================================

``after_transaction_end`` stands for ``after_rollback`` / ``after_soft_rollback``:
it is the one event SQLAlchemy sends for every end of a transaction (a
rollback, a ``close()`` without commit, a rollback that itself failed), and it
comes after the database rollback.

Per detector (whatever number of session factories is attached to it) sentinel
installs: the reactive layer's scope hook (an object's method events go to its
session's transaction), an occurrence listener (the log), the scheduler's rule
observer (rule firings; a failed rule dooms its transaction), the detached
executor (the outbox) and a rule check (detached actions must be importable).
:meth:`Attachment.detach` (or :func:`detach`) removes everything again.

Where the code is: :func:`attach` and :func:`detach` here;
:class:`~sentinel.orm.attachment.Attachment` and its session-event handlers in
:mod:`sentinel.orm.attachment`, with its parts for a session inside a transaction
begun outside it (:mod:`sentinel.orm.outer`) and for a transaction that ended
without a commit sentinel saw (:mod:`sentinel.orm.endings`); what is installed
on the detector, in :mod:`sentinel.orm.integration`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import event as sa_event
from sqlalchemy.orm import Session, sessionmaker

from sentinel.errors import AttachError
from sentinel.log import LogPolicy, LogWriter
from sentinel.log.signing import OutboxSigner
from sentinel.log.tables import DEFAULT_PREFIX
from sentinel.orm.attachment import Attachment, LogOptions, OutboxOptions
from sentinel.orm.binds import Target, check_binds, resolve_target
from sentinel.orm.integration import _ATTACHED, _INTEGRATIONS, _LOCK, _Integration
from sentinel.orm.logsink import LogSink
from sentinel.orm.outbox import check_importable
from sentinel.rules import LocalEventDetector

__all__ = ["Attachment", "attach", "attachments", "detach", "global_actions"]


def attach(
    target: Any,
    *,
    detector: LocalEventDetector | None = None,
    log: bool | LogWriter | LogPolicy = True,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    outbox: bool = True,
    workers: int = 2,
    max_attempts: int = 5,
    backoff: float = 0.5,
    max_backoff: float = 60.0,
    lease: float = 60.0,
    flush_every: int = 10_000,
    log_empty: bool = False,
    log_condition_false: bool = False,
    session_factory: Callable[[], Session] | None = None,
    log_bind: Any = None,
    context: Callable[[], AbstractContextManager[Any]] | None = None,
    outbox_key: str | bytes | OutboxSigner | None = None,
    commit_order: bool = False,
) -> Attachment:
    """Attach sentinel to the sessions ``target`` makes: a ``sessionmaker``, a
    ``scoped_session``, a ``Session`` subclass, or their asyncio counterparts
    (``async_sessionmaker``, ``async_scoped_session``, an ``AsyncSession``
    subclass; see :mod:`sentinel.orm.binds`).

    From now on each root transaction of those sessions is a detection scope of
    ``detector`` (default: :func:`sentinel.default_detector`): method events of
    objects in a session belong to its transaction, its flushes signal database
    events (:mod:`sentinel.orm.db_events`), its commit runs the deferred rules
    and writes the event log in the same transaction, and detached rules run after
    it (see the module docs and ``docs/orm.md``).

    ``log``
        ``True`` (log every occurrence, in the tables ``schema`` / ``prefix``),
        a :class:`~sentinel.log.LogPolicy` (the same, with parameters excluded or
        redacted), a :class:`~sentinel.log.LogWriter`, or ``False`` (no event log;
        the outbox still needs the tables).
    ``outbox``
        detached rules go through the durable outbox (``False``: they do not run).
    ``workers``
        threads running detached rules in this process (0: none; run
        ``sentinel worker`` or :meth:`Attachment.drain`). ``max_attempts``,
        ``backoff`` / ``max_backoff`` (seconds, doubled per attempt) and ``lease``
        (how long a claim outlives its worker's last heartbeat: a running rule's
        claim is renewed every ``lease / 3`` seconds) tune them.
    ``flush_every``
        a transaction with more unwritten occurrences than this writes them at
        its next flush (outside savepoints), bounding memory.
    ``log_empty``
        also log transactions in which nothing happened but their own
        ``txn:*`` events (by default a read-only unit of work writes nothing,
        so a ``with Session.begin():`` around queries stays read-only).
    ``log_condition_false``
        also record rule runs whose condition was false in the rule-firing log
        (by default only rules that fired or failed are recorded).
    ``session_factory``
        makes the sessions of detached rules (default: ``target``; an asyncio
        target needs a synchronous one for its detached rules).
    ``log_bind``
        the *home* database (an ``Engine``, or ``AsyncEngine``) of sessions bound
        to several: the outbox and the late log rows go there (default: the
        factory's default bind). Each transaction's log is written on every
        database it used.
    ``context``
        a callable returning a context manager that each detached rule runs in,
        with its claim and commit (Flask: ``context=app.app_context``).
    ``outbox_key``
        signs the outbox rows this attachment writes, and makes its workers
        refuse rows without a valid signature (:mod:`sentinel.log.signing`);
        default: the ``SENTINEL_OUTBOX_KEY`` environment variable, if set. With
        ``log=`` a :class:`~sentinel.log.LogWriter`, give the key to the writer.
    ``commit_order``
        numbers each transaction that writes log rows in commit order
        (``event_batches.commit_seq``), which a global detector needs to read this
        process's events (``docs/global.md``). Off by default: on SQLite and
        MySQL the number is taken under a lock held until the commit, so the
        log-writing commits of all processes wait for each other from their
        last log write on (PostgreSQL and MariaDB take it without waiting for
        other writers; their readers wait for a number a running transaction
        holds).

    Raises :class:`~sentinel.errors.AttachError` for a target that is not a
    session factory or is already attached (directly, or through a subclass or
    base class of its sessions), or whose databases could not keep the log atomic
    with the data (:func:`sentinel.orm.binds.check_binds`),
    :class:`~sentinel.errors.DetachedActionError`
    if a detached rule on the detector has an action a worker could not import,
    and the :class:`~sentinel.errors.LogSchemaError` family when the target is
    bound to an engine whose log tables are missing or outdated. Nothing is
    attached when it raises.

    >>> Session = sessionmaker(engine)                      # doctest: +SKIP
    >>> attachment = sentinel.attach(Session, detector=det)  # doctest: +SKIP
    """
    det = _detector(detector)
    outbox_options = OutboxOptions(
        outbox=outbox,
        workers=workers,
        max_attempts=max_attempts,
        backoff=backoff,
        max_backoff=max_backoff,
        lease=lease,
        session_factory=session_factory,
        context=context,
        outbox_key=outbox_key,
    )
    log_options = LogOptions(
        log=log,
        schema=schema,
        prefix=prefix,
        flush_every=flush_every,
        log_empty=log_empty,
        log_condition_false=log_condition_false,
        commit_order=commit_order,
        log_bind=log_bind,
    )
    writer = log_options.make_writer()
    signer = outbox_options.signer_for(writer, log_options)
    with _LOCK:
        resolved = resolve_target(target, session_factory)
        try:
            return _attach_resolved(
                target, resolved, det, writer, signer, log_options, outbox_options
            )
        except BaseException:
            if resolved.undo is not None:
                resolved.undo()
            raise


def _detector(detector: LocalEventDetector | None) -> LocalEventDetector:
    if detector is None:
        from sentinel.default import default_detector

        return default_detector()
    if not isinstance(detector, LocalEventDetector):
        raise AttachError(
            f"attach(detector=...) takes a LocalEventDetector, not {type(detector).__name__}",
            target=detector,
        )
    return detector


def _attach_resolved(
    target: Any,
    resolved: Target,
    det: LocalEventDetector,
    writer: LogWriter,
    signer: OutboxSigner | None,
    log_options: LogOptions,
    outbox_options: OutboxOptions,
) -> Attachment:
    _refuse_attached(target, resolved.session_class)
    logging_on = log_options.logging_on
    outbox = outbox_options.outbox
    for r in det.rules.values():
        check_importable(r)
    home, engines = check_binds(
        target, resolved.kw, log_options.log_bind, logging_on=logging_on, outbox=outbox
    )
    if signer is not None:
        writer.signer = signer
    sink = LogSink(writer) if logging_on else None
    att = Attachment(
        target,
        resolved,
        det,
        writer,
        sink,
        home=home,
        log_options=log_options,
        outbox_options=outbox_options,
    )
    if logging_on or outbox:
        # missing or outdated tables: fail now, not at a commit (through a
        # synchronous engine only: an asyncio one answers inside its event loop)
        checked = [att._engine] if att.is_async else (engines if logging_on else [home])
        for e in checked:
            if e is not None:
                writer.check(e)
    if sink is not None and att._engine is not None:
        sink.engine = att._engine
    _install(att, det)
    return att


def _refuse_attached(target: Any, session_class: type[Session]) -> None:
    for cls, other in _ATTACHED.items():
        if issubclass(session_class, cls) or issubclass(cls, session_class):
            same = cls is session_class
            raise AttachError(
                f"{target!r:.80} is already attached"
                + (
                    ""
                    if same
                    else f" through {other.target!r:.80} (its sessions are also "
                    f"{cls.__name__} sessions)"
                )
                + "; detach it first (attachment.detach())",
                target=target,
            )


def _install(att: Attachment, det: LocalEventDetector) -> None:
    """Install ``att``'s session listeners, and the detector's hooks with its
    first attachment; all or nothing."""
    listen_on = att._listen_on
    integ = _INTEGRATIONS.get(det)
    fresh = integ is None
    if integ is None:
        integ = _INTEGRATIONS[det] = _Integration(det)
    try:
        if fresh:
            integ.install()
        integ.attachments.append(att)
        integ.refresh_listener()
        for name, fn in att._handlers:
            sa_event.listen(listen_on, name, fn)
    except BaseException:
        for name, fn in att._handlers:
            if sa_event.contains(listen_on, name, fn):
                sa_event.remove(listen_on, name, fn)
        if att in integ.attachments:
            integ.attachments.remove(att)
        if fresh:
            integ.uninstall()
            _INTEGRATIONS.pop(det, None)
        else:
            integ.refresh_listener()
        raise
    _ATTACHED[att.session_class] = att
    att._attached = True


def detach(target: Any) -> None:
    """Detach sentinel from ``target`` (what was given to :func:`attach`, or the
    :class:`Attachment`). Raises :class:`~sentinel.errors.AttachError` if it is
    not attached."""
    if isinstance(target, Attachment):
        target.detach()
        return
    try:
        session_class = resolve_target(target, None, install=False).session_class
    except AttachError:
        raise AttachError(f"{target!r:.80} is not attached", target=target) from None
    att = _ATTACHED.get(session_class)
    if att is None:
        raise AttachError(f"{target!r:.80} is not attached", target=target)
    att.detach()


def attachments() -> list[Attachment]:
    """Every attachment in force (for inspection and tests)."""
    with _LOCK:
        return list(_ATTACHED.values())


def global_actions(
    rules: LocalEventDetector,
    bind: Any,
    *,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    workers: int = 0,
    lease: float = 60.0,
    max_attempts: int = 5,
    session_factory: Callable[[], Session] | None = None,
) -> Attachment:
    """The action runner of a global detector that runs its rules' actions in
    its own process: pass it as
    ``GlobalDetector(rules, bind, actions=global_actions)``
    (:class:`~sentinel.global_detector.GlobalDetector` calls it with its own
    options; ``sentinel global`` does). The global detector depends on the log
    layer only; running an action needs a session, which is this layer's.

    Returns an attachment of ``session_factory`` (default: a ``sessionmaker``
    on ``bind``) to a copy of ``rules`` whose rules are all disabled: what an
    action signals is logged, with a commit number, and detected by the global
    detector from the log, once, never a second time by this attachment. Its
    :attr:`~Attachment.runner` runs the outbox entries the global detector
    writes (``workers`` threads, or 0: in the caller's thread), with
    ``lease`` and ``max_attempts`` as :func:`attach`'s."""
    runner_rules = rules.replica()
    for rule in runner_rules.rules.values():
        rule.disable()
    return attach(
        session_factory or sessionmaker(bind),
        detector=runner_rules,
        schema=schema,
        prefix=prefix,
        workers=workers,
        lease=lease,
        max_attempts=max_attempts,
        commit_order=True,
    )
