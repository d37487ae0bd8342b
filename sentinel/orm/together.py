"""Running several claimed outbox entries in one transaction.

The global detector writes and claims the entries of one read batch in one
transaction (:meth:`Runner.claim_in <sentinel.orm.worker.Runner.claim_in>`),
then acts on them. :func:`run_together` runs them in **one** session
transaction from the attachment's session factory: each entry's condition and
action in a savepoint of its own, then the ``done`` marks of those that
succeeded (one statement), and one commit for them all. What one commit makes durable is the work
and the ``done`` mark of every entry that succeeded: exactly once, as with a
transaction per entry (:mod:`sentinel.orm.worker`), for one commit (and one
flush to disk) per batch instead of one per entry.

- an entry whose condition or action raises: its savepoint is rolled back
  (nothing of it commits) and, after the commit, the attempt is recorded as
  failed and retried later, as with a transaction of its own;
- an entry whose action ends the shared transaction (a ``commit()``, a
  ``rollback()``, closing the session) fails for good, as it would alone; the
  others of the batch, whose work that undid, are run again, each in a
  transaction of its own;
- a shared transaction that cannot commit (the database went away, a
  deadlock): the entries are run again, each in a transaction of its own.

So an entry's action may run a second time in the same attempt when a
neighbour ended the shared transaction or the commit failed: its database
effects were rolled back, and its outside effects get the entry's idempotency
key, as for any retry. The actions of a batch see each other's uncommitted
work (they share the transaction), in entry order, as they would see it once
committed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import exc as sa_exc

from sentinel.errors import OutboxError
from sentinel.log.outbox import Claimed, ClaimLost, Exhausted
from sentinel.orm.detached import _CONTEXT, _enter, _TransactionGuard
from sentinel.orm.state import KEY, clock_of

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from sentinel.orm.worker import Runner

__all__ = ["run_together"]

log = logging.getLogger("sentinel.orm")


class _Ended(Exception):
    """The shared transaction is gone (an action ended it)."""


def run_together(
    runner: Runner, claims: Sequence[tuple[str, Claimed | Exhausted | None]]
) -> list[str]:
    """Run the entries ``claims`` (keys and what :meth:`Runner.claim_in`
    returned for them, whose transaction has committed) in one transaction
    (module docs); return each one's outcome, in order, as
    :meth:`Runner.run_claimed` would."""
    claimed = [(k, g) for k, g in claims if isinstance(g, Claimed)]
    if len(claimed) < 2:
        return [runner.run_claimed(k, g) for k, g in claims]
    outcomes: dict[str, str] = {}
    with runner._entered():
        engine = runner.attachment.engine()
        ready = []
        for key, got in claimed:
            try:
                ready.append((key, got, runner._prepare(got)))
            except OutboxError as err:  # refused for good, as alone
                outcomes[key] = runner._failed(got, None, (), err, final=True)
        again = _run_shared(runner, engine, ready, outcomes)
        for key, got in again:  # each in a transaction of its own
            outcomes[key] = runner._run_claimed(engine, key, got)
    return [outcomes[k] if isinstance(g, Claimed) else runner.run_claimed(k, g) for k, g in claims]


def _run_shared(
    runner: Runner, engine: Any, ready: list[Any], outcomes: dict[str, str]
) -> list[tuple[str, Claimed]]:
    """Run ``ready`` (key, claim, prepared rule) in one transaction; fill
    ``outcomes``; return the entries to run again one by one."""
    if not ready:
        return []
    try:
        session = runner._new_session()
    except BaseException:
        return [(k, g) for k, g, _ in ready]  # alone, each reports the failure
    leases = {k: runner.heartbeat.hold(engine, g) for k, g, _ in ready}
    failures: list[tuple[Claimed, Any, Any, BaseException]] = []
    done: list[str] = []
    reached: set[str] = set()
    again: list[tuple[str, Claimed]] = []
    try:
        with session.begin() as transaction:
            home = session.connection(bind_arguments={"bind": engine})
            _begin(home)
            for i, (key, got, (rule, constituents, extra, occ)) in enumerate(ready):
                reached.add(key)
                try:
                    status = _one(runner, session, transaction, got, rule, extra, occ, leases)
                except ClaimLost as err:
                    log.warning("%s", err)
                    outcomes[key] = "skipped"
                    continue
                except _Ended as ended:
                    # this one fails for good (as alone); the work of those
                    # before it was undone with the transaction: run them again
                    failures.append((got, rule, constituents, ended.__cause__ or ended))
                    again = [(k, g) for k, g, _ in ready[:i] if k in done]
                    again += [(k, g) for k, g, _ in ready[i + 1 :]]
                    done = []
                    break
                except BaseException as err:
                    failures.append((got, rule, constituents, err))
                    continue
                done.append(key)
                st = session.info.get(KEY)
                att = runner.attachment
                if st is not None and att.sink is not None:
                    st.firings.append((rule, occ, status, None, clock_of(att.detector)()))
            if again or not transaction.is_active:
                raise _Ended
            if done:
                # the done marks, in one statement; ClaimLost if a claim
                # ended meanwhile: nothing commits, and each runs alone
                marks = [g for k, g, _ in ready if k in set(done)]
                runner.store.finish_many(home, marks, runner.id)
            # the rows are ours and locked until the commit: no renewal
            # needed, and one blocked behind the commit must not report a
            # lost claim
            for lease in leases.values():
                runner.heartbeat.release(lease)
    except _Ended:
        pass
    except BaseException as err:  # the commit failed: nothing of it is durable
        log.warning(
            "sentinel's outbox: %d entries run in one transaction could not commit (%s: %s); "
            "running each in a transaction of its own",
            len(ready),
            type(err).__name__,
            err,
        )
        # those it undid, and those it did not reach; the failed ones stay failed
        again = [(k, g) for k, g, _ in ready if k in done or k not in reached]
        done = []
    finally:
        session.close()
        for lease in leases.values():
            runner.heartbeat.release(lease)
    for key in done:
        outcomes[key] = "done"
    for got, rule, constituents, why in failures:
        outcomes[got.key] = runner._failed_or_raise(got, rule, constituents, why)
    return again


def _begin(conn: Any) -> None:
    """SQLite through Python's sqlite3: begin the transaction now. The module
    begins one only before a data change, and a ``RELEASE`` of a savepoint
    opened outside a transaction commits (SQLite's rule), which would commit
    the first entry alone."""
    if conn.dialect.name == "sqlite" and conn.dialect.driver == "pysqlite":
        driver = conn.connection.driver_connection
        if not driver.in_transaction and driver.isolation_level is not None:
            conn.exec_driver_sql("BEGIN")


def _one(
    runner: Runner,
    session: Session,
    transaction: Any,
    got: Claimed,
    rule: Any,
    extra: Any,
    occ: Any,
    leases: dict[str, Any],
) -> str:
    """One entry's condition and action, in a savepoint (its ``done`` mark is
    written with the others' before the commit); raises what its rule raised
    (the savepoint rolled back), :class:`_Ended` when the rule ended the
    shared transaction."""
    savepoint = session.begin_nested()
    token = _enter(rule.name, got, bool(extra.get("committed", True)), session)
    guard = _TransactionGuard(session, transaction, rule.name)
    try:
        try:
            status = runner._run_rule(rule, occ, guard)
            guard.check()
        except BaseException as err:
            if guard.ended or not transaction.is_active:
                try:
                    guard.check()
                except BaseException as why:
                    raise _Ended from why
                raise _Ended from err
            raise
        if leases[got.key].lost:
            raise ClaimLost("the heartbeat found the claim gone", key=got.key)
        savepoint.commit()  # its done mark is written with the others' (_run_shared)
        return status
    except _Ended:
        raise
    except BaseException:
        # already closed when the rule closed it (and failed for it)
        with contextlib.suppress(sa_exc.InvalidRequestError):
            savepoint.rollback()
        raise
    finally:
        guard.remove()
        _CONTEXT.reset(token)
