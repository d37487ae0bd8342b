"""Reading the event log in commit order, and waking up when it grows.

Every transaction that writes log rows takes a *commit sequence number* just
before its commit (:meth:`sentinel.log.LogWriter.take_commit_seq`) and stamps its
rows with it (``event_batches.commit_seq``). How a reader knows it has seen
every number up to some ``n`` depends on the backend:

SQLite and MySQL
    the number is taken by an ``UPDATE`` of a counter row, held until the
    transaction ends. Numbers are handed out in commit order and there are no
    holes: when number ``n`` is visible, every transaction that took a smaller
    number has ended (a rolled-back transaction's number is reused by the
    next one). Log-writing commits wait for each other.
MariaDB
    the number is ``NEXTVAL`` of a sequence, taken in a statement that first
    takes the counter row's lock *shared* (writers share it; it is held to
    the end of the transaction). As on PostgreSQL, a number can be missing
    while a larger one is visible. A hole still there at the next look makes
    the reader take the counter row's lock exclusively (in a transaction of
    its own, ended at once), then the log rows numbered after its position,
    shared: it gets them once every transaction that held the lock shared
    when it asked has ended, among them every one that took a number up to
    the last one handed out before it asked (read from the sequence); the
    rows' locks cover a transaction prepared with ``XA PREPARE``, which lets
    its shared locks go. The numbers up to that one that are still missing
    then never will be visible. While the reader waits for the lock, writers
    that ask for it after the reader wait too, at most a second
    (:meth:`CommitReader.horizon` first asks without waiting, waits at most a
    second, and after a wait in vain asks without waiting for a while).
PostgreSQL
    the number is ``nextval`` of a sequence, taken without a lock, after the
    transaction got its id. Writers do not wait for each other, so a number
    ``g`` handed out may not be visible while a larger one is (a *hole*), or
    while the reader looks: its transaction is still running, or it rolled
    back (``nextval`` is not undone). :meth:`CommitReader.horizon` tells
    them apart. After reading the numbers and then the last one handed out
    (``pg_sequence_last_value``, at least ``g``), it takes a new transaction
    id ``u`` (and ends that transaction at once). The transaction ``T``
    holding ``g`` got its id before it took ``g``, so before ``u``: its id is
    below ``u``. Once a later snapshot has no transaction below ``u`` in
    progress (its ``xmin`` is at least ``u``), ``T`` has ended: committed, its
    rows are visible to every later read; otherwise ``g`` never will be. The
    reader passes the numbers up to the one handed out then for good, and
    until then stops before the first one it does not see. Nothing is
    written for a hole.

So a reader that remembers the last number it processed and asks for larger
ones up to the horizon never skips a commit, reads each once, and reads them
in number order. Number order is consistent with what each transaction could
see when it took its number: a transaction that committed before another took
its number has the smaller one.

A reader that waits for the next commit (:class:`PostgresListener`) is woken
by a ``NOTIFY`` that writers send only while a reader sleeps (PostgreSQL
serializes the commits of notifying transactions).

:class:`CommitReader` reads committed rows after a position, whole commits at a
time; :func:`waiter` returns what waits for the next commit: ``LISTEN`` on
PostgreSQL (the number is sent with ``NOTIFY`` at the commit), polling with
back-off elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import REGCLASS
from sqlalchemy.engine import Connection, Engine

from sentinel.log.commit_order import ADVISORY_SEED, mariadb_names, notify_channel
from sentinel.log.tables import LogTables, Outcome, sequenced_mariadb

__all__ = ["CommitReader", "LogRow", "Poller", "PostgresListener", "waiter"]

log = logging.getLogger("sentinel.global")


class LogRow(NamedTuple):
    """One committed log row as the global detector reads it: one occurrence
    of an ``event_batches`` row. ``params`` is its parameters' compact JSON
    text, or, read with ``parsed=True``, the JSON object as read (the
    feeder takes either)."""

    id: int
    commit_seq: int
    scope: str
    t_occ: int
    event: str
    ts: float
    detected_ts: float
    source_class: str | None
    source_key: str | None
    params: Any
    outcome: str | None


class CommitReader:
    """Reads the committed occurrences of the log (rows whose ``outcome`` is
    committed or NULL) in commit order: by ``commit_seq``, then by row ``id``
    (insertion order within a transaction), then by ``t_occ`` within a row;
    whole commits only.

    A reader that tails the log reads up to :meth:`horizon`, which remembers
    what it proved about the holes of the log it reads (PostgreSQL): use one
    instance per log."""

    def __init__(self, tables: LogTables) -> None:
        self.tables = tables
        #: Every commit number at most this one is visible or will never be.
        self._done = 0
        #: The numbers waited for: (the last number handed out when they were
        #: seen, a transaction id larger than any their holders can have, taken
        #: at the second look, when they were first seen).
        self._gap: tuple[int, str | None, float] | None = None
        self._warned = 0.0
        #: The last commit number handed out, as :meth:`horizon` last read it.
        self.handed = 0
        #: How many log rows the last :meth:`read` returned.
        self.log_rows = 0
        q = tables.commit_sequence_name
        self._seq = f'"{tables.schema}"."{q}"' if tables.schema else f'"{q}"'
        seqs = tables.batches.c.commit_seq
        nums = (
            sa.select(seqs)
            .where(seqs > sa.bindparam("base", type_=sa.BigInteger))
            .group_by(seqs)
            .order_by(seqs)
            .limit(sa.bindparam("span", type_=sa.Integer))
            .subquery()
        )
        #: The numbers after ``base`` (MariaDB's look of :meth:`horizon`).
        self._numbers = sa.select(nums.c.commit_seq).order_by(nums.c.commit_seq)
        #: One look of :meth:`horizon` (PostgreSQL): the last number handed
        #: out and the numbers after ``base``.
        self._look_pg = sa.select(
            sa.func.pg_sequence_last_value(sa.cast(sa.bindparam("q", type_=sa.Text), REGCLASS)),
            sa.select(sa.func.array_agg(nums.c.commit_seq)).scalar_subquery(),
        )
        #: Seconds a hole may be waited for before :meth:`horizon` says so on
        #: the ``sentinel.global`` logger (then again at this interval).
        self.gap_warn = 30.0
        b = tables.batches
        names = mariadb_names(tables)
        #: MariaDB: the last number handed out (the sequence has no cache).
        self._handed_sql = sa.text(f"SELECT next_not_cached_value - 1 FROM {names['seq']}")
        #: MariaDB: the counter row's lock, exclusively, without waiting or
        #: waiting at most a second.
        self._gate_sql = {
            wait: sa.text(
                f"SELECT n FROM {names['counter']} WHERE id = 1 FOR UPDATE "
                + ("WAIT 1" if wait else "NOWAIT")
            )
            for wait in (False, True)
        }
        #: MariaDB: the log rows numbered in a range, locked shared without
        #: waiting: a transaction that wrote one and is prepared (XA) holds it.
        self._rows_gate = sa.text(
            f"SELECT count(*) FROM {names['batches']} "
            "WHERE commit_seq > :lo AND commit_seq <= :hi LOCK IN SHARE MODE NOWAIT"
        )
        #: MariaDB: when :meth:`_gate` may wait next, and how long after a wait
        #: in vain it waits before it waits again.
        self._wait_after = 0.0
        self._wait_pause = _GATE_PAUSE
        self._committed = sa.or_(b.c.outcome.is_(None), b.c.outcome != Outcome.ABORTED.value)
        self._select = sa.select(
            b.c.id,
            b.c.commit_seq,
            b.c.scope,
            b.c.outcome,
            # as text (psycopg would parse JSONB with json.loads): parsed here
            sa.cast(sa.type_coerce(b.c.occurrences, sa.Text), sa.Text).label("occurrences"),
        ).where(self._committed)

    def read(
        self,
        conn: Connection,
        after: int,
        *,
        limit: int = 5000,
        rows: int | None = None,
        parsed: bool = False,
    ) -> list[LogRow]:
        """The committed occurrences with ``commit_seq > after``, in commit
        order, about ``limit`` of them (read as ``rows`` log rows, by default
        ``limit // 100``, at least one) but always whole commits (one commit
        larger than that is read whole). ``parsed``: each row's ``params`` is
        the JSON object as read rather than its text (for
        :class:`~sentinel.global_detector.detect.CommitFeeder`, which then
        does not parse it again)."""
        b = self.tables.batches
        rows_limit = max(1, limit // 100 if rows is None else rows)
        q = (
            self._select.where(b.c.commit_seq > after)
            .order_by(b.c.commit_seq, b.c.id)
            .limit(rows_limit + 1)
        )
        got = conn.execute(q).all()
        if len(got) > rows_limit:
            last = got[-1].commit_seq
            if got[0].commit_seq == last:  # one commit: read all of it
                q = self._select.where(b.c.commit_seq == last).order_by(b.c.id)
                got = conn.execute(q).all()
            else:
                got = [r for r in got if r.commit_seq != last]
        self.log_rows = len(got)
        make = _parsed_rows if parsed else _rows
        return [o for r in got for o in make(r)]

    @property
    def waiting(self) -> bool:
        """Whether the last :meth:`horizon` stopped before a number handed out
        and not yet visible (PostgreSQL): its transaction may commit at any
        moment, or rolled back; look again soon."""
        return self._gap is not None

    def horizon(
        self, conn: Connection, after: int, *, wait: float = 0.0, span: int = 2000
    ) -> int | None:
        """The largest commit number ``h >= after`` such that every number from
        ``after + 1`` to ``h`` is visible now or will never be (see the module
        docs); ``None`` on SQLite and MySQL, where every visible number is
        (numbers are taken under a lock). A number handed out and not visible
        stops it until its transaction committed (it is visible then) or every
        transaction that could hold it has ended (it never will be). Compute
        it *before* reading the rows (:meth:`read`) and read those numbered up
        to it: reading first could miss a commit that became visible in
        between.

        A hole is waited for up to ``wait`` seconds (with back-off, ending the
        connection's transaction before each pause, so it holds no snapshot
        meanwhile) when nothing after ``after`` can be read before it. One
        look reads at most ``span`` numbers: the horizon is at most that far
        past ``after`` (or past what was proved before). Call it outside a
        transaction of your own: it ends the connection's."""
        postgres = conn.dialect.name == "postgresql"
        if not (postgres or sequenced_mariadb(conn.dialect)):
            return None
        deadline = time.monotonic() + wait
        pause = 0.001
        while True:
            h = self._look(conn, after, span, postgres)
            if h > after or self._gap is None:
                return h
            left = deadline - time.monotonic()
            if left <= 0:
                return h
            if conn.in_transaction():
                conn.rollback()
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.05)

    def _look(self, conn: Connection, after: int, span: int, postgres: bool) -> int:
        """One look of :meth:`horizon`: the numbers after the position and the
        last one handed out, the first hole among them, and the proof that
        the numbers missing up to some point never will be visible, which
        each backend makes its own way (:meth:`_proved_pg`,
        :meth:`_proved_gated`)."""
        while True:
            base = max(after, self._done)
            if postgres:
                # every number, whatever its rows' outcome (a commit whose
                # rows are all aborted, by rolled-back savepoints, still used
                # its number), and the last one handed out, read after this
                # statement's snapshot was taken: every visible number a
                # transaction took is at most it; those above it (forged,
                # imported) make no hole
                last, arr = conn.execute(
                    self._look_pg, {"q": self._seq, "base": base, "span": span}
                ).one()
                nums: Sequence[int] = sorted(arr or ())
                handed = int(last or 0)
            else:
                if conn.in_transaction():
                    conn.rollback()  # a fresh snapshot (MariaDB's reads repeat)
                nums = conn.execute(self._numbers, {"base": base, "span": span}).scalars().all()
                # read after the numbers, with the same meaning
                handed = self._mariadb_handed(conn)
            self.handed = handed
            top = base
            for n in nums:
                if n != top + 1 or n > handed:
                    break
                top = n
            gap = self._gap
            if gap is not None and top >= gap[0]:
                self._gap = gap = None  # filled: the transactions committed
            if top >= handed:
                return top  # every number handed out is visible
            if len(nums) == span and top == nums[-1]:
                return top  # no hole among as many as it looked at
            if gap is None:
                # first sight: the numbers usually commit within milliseconds
                self._gap = (handed, None, time.monotonic())
                return top
            proved = (
                self._proved_pg(conn, gap)
                if postgres
                else self._proved_gated(conn, top, handed, gap)
            )
            if proved is None:
                self._warn(conn, top)
                return top
            # what committed up to ``proved`` is visible from now on, the
            # rest never will be
            self._done = proved
            self._gap = None

    def _proved_pg(self, conn: Connection, gap: tuple[int, str | None, float]) -> int | None:
        """PostgreSQL: ``gap[0]`` once every transaction that could hold a
        number up to it has ended, else ``None``."""
        if gap[1] is None:
            # after the sequence was read: the transaction holding a number
            # up to ``gap[0]`` got its id before it, so before this one
            bound = str(conn.execute(_PG_NEW_XID).scalar_one())
            conn.rollback()  # ends the id's transaction at once
            gap = self._gap = (gap[0], bound, gap[2])
        # every transaction with an id below the bound has ended?
        return gap[0] if conn.execute(_PG_ENDED, {"u": gap[1]}).scalar_one() else None

    def _proved_gated(
        self, conn: Connection, top: int, handed: int, gap: tuple[int, str | None, float]
    ) -> int | None:
        """MariaDB: ``handed`` once the counter row's lock and the rows after
        ``top`` were had, else ``None``. Every transaction that took a number
        up to ``handed`` took the counter row's lock, shared, before it, and
        holds it to its end or to its XA PREPARE; a prepared one keeps its
        rows' locks."""
        now = time.monotonic()
        wait = now - gap[2] >= _GATE_PATIENCE and now >= self._wait_after
        had = self._gate(conn, top, handed, wait=wait)
        if wait and (not had or time.monotonic() - now > _GATE_QUICK):
            # writers waited behind it: wait less often (a transaction
            # holding its number long would otherwise hold them up at
            # every hole); meanwhile ask without waiting
            self._wait_after = time.monotonic() + self._wait_pause
            self._wait_pause = min(2 * self._wait_pause, _GATE_MAX_PAUSE)
        elif had:
            self._wait_pause, self._wait_after = _GATE_PAUSE, 0.0
        return handed if had else None

    def _gate(self, conn: Connection, top: int, handed: int, *, wait: bool) -> bool:
        """Take the counter row's lock exclusively, then the log rows numbered
        from ``top + 1`` to ``handed`` shared, and let them go at once
        (MariaDB); whether they were had: asked without waiting, or with
        ``wait`` the counter row's for at most a second (meanwhile writers
        asking for it wait behind this request)."""
        if conn.in_transaction():
            conn.rollback()
        try:
            conn.execute(self._gate_sql[wait])
            conn.execute(self._rows_gate, {"lo": top, "hi": handed})
            return True
        except sa.exc.OperationalError as err:
            extract = getattr(conn.dialect, "_extract_error_code", None)
            code = extract(err.orig) if extract is not None and err.orig is not None else None
            if code in _MARIADB_LOCK_REFUSED:
                return False
            raise
        finally:
            conn.rollback()

    def _mariadb_handed(self, conn: Connection) -> int:
        """The last commit number handed out on MariaDB (the sequence has no
        cache: its next value is one more)."""
        n = conn.execute(self._handed_sql).scalar()
        return max(0, int(n or 0))

    def _warn(self, conn: Connection, top: int) -> None:
        """Say on the logger (every :attr:`gap_warn` seconds) that a number has
        been waited for that long, and which transactions it waits for."""
        gap = self._gap
        now = time.monotonic()
        if gap is None or now - gap[2] < self.gap_warn or now < self._warned:
            return
        self._warned = now + self.gap_warn
        if conn.dialect.name != "postgresql":
            log.warning(
                "sentinel global: commit number %d was handed out %.0f s ago and is not "
                "visible: its transaction is still running, or rolled back; commits "
                "numbered after it are not read until every transaction holding the "
                "lock of %s, shared, has ended (information_schema.INNODB_TRX lists "
                "the running transactions)",
                top + 1,
                now - gap[2],
                self.tables.qualified(self.tables.commit_counter.name),
            )
            return
        running = conn.execute(_PG_RUNNING_BELOW, {"u": gap[1]}).scalars().all()
        log.warning(
            "sentinel global: commit number %d was handed out %.0f s ago and is not "
            "visible: its transaction is still running, or rolled back; commits "
            "numbered after it are not read until the transactions running then have "
            "ended (pg_stat_activity.backend_xid): %s",
            top + 1,
            now - gap[2],
            ", ".join(str(x) for x in running[:10]),
        )

    def unnumbered(self, conn: Connection, after_id: int) -> tuple[int, int]:
        """How many occurrences in rows with an id above ``after_id`` have no
        commit number (written by a process attached without
        ``commit_order=True``), and the largest row id in the log (0: none)."""
        b = self.tables.batches
        n, top = conn.execute(
            sa.select(
                sa.func.sum(sa.case((b.c.commit_seq.is_(None), b.c.n), else_=0)),
                sa.func.max(b.c.id),
            ).where(b.c.id > after_id)
        ).one()
        return int(n or 0), int(top or after_id)

    def behind(self, conn: Connection, after_id: int, was: int, position: int) -> int:
        """The committed occurrences in rows with an id above ``after_id``
        numbered at most ``was``, plus those numbered after ``was`` up to
        ``position``. For a reader that stood at ``was`` when ``after_id`` was
        the log's largest row id and has read up to ``position`` since: the
        occurrences it read since then, plus those numbered behind it meanwhile
        (forged, or written with a stale ``commit_seq``), which it never reads.
        Both sums use the ``commit_seq`` index."""
        b = self.tables.batches
        total = sa.func.coalesce(sa.func.sum(b.c.n), 0)
        old = conn.execute(
            sa.select(total).where(b.c.commit_seq <= was, b.c.id > after_id, self._committed)
        ).scalar()
        new = conn.execute(
            sa.select(total).where(
                b.c.commit_seq > was, b.c.commit_seq <= position, self._committed
            )
        ).scalar()
        return int(old or 0) + int(new or 0)

    def last_id(self, conn: Connection) -> int:
        """The largest row id in the log (0: none)."""
        b = self.tables.batches
        return int(conn.execute(sa.select(sa.func.max(b.c.id))).scalar() or 0)

    def handed_out(self, conn: Connection) -> int:
        """The last commit number handed out (0: none): the counter row on
        SQLite and MySQL, the sequence on PostgreSQL and MariaDB (its last value, taken
        by a transaction that may not have ended yet). Read *after* the rows it
        judges: a committed row numbered above it was not numbered by
        :meth:`~sentinel.log.LogWriter.take_commit_seq` (written by hand,
        imported, or left behind by a reset of the counter or the sequence)."""
        t = self.tables
        if sequenced_mariadb(conn.dialect):
            return self._mariadb_handed(conn)
        if conn.dialect.name == "postgresql":
            q = t.commit_sequence_name
            seq = f'"{t.schema}"."{q}"' if t.schema else f'"{q}"'
            # NULL while nothing was taken since the sequence was made or restarted;
            # needs USAGE (which nextval needs too), not SELECT, on the sequence
            n = conn.execute(_PG_LAST_VALUE, {"q": seq}).scalar()
        else:
            c = t.commit_counter
            n = conn.execute(sa.select(c.c.n).where(c.c.id == 1)).scalar()
        return int(n or 0)

    def head(self, conn: Connection, upto: int | None = None) -> int:
        """The largest commit number in the log (0: none), or the largest at
        most ``upto``."""
        b = self.tables.batches
        q = sa.select(sa.func.max(b.c.commit_seq))
        if upto is not None:
            q = q.where(b.c.commit_seq <= upto)
        return int(conn.execute(q).scalar() or 0)


#: How long a hole is looked at again without waiting for the counter row's
#: lock (MariaDB: :meth:`CommitReader._proved_gated`) before the reader waits
#: for it, making writers that come after it wait too.
_GATE_PATIENCE = 0.05
#: The pause after :meth:`CommitReader._gate` waited in vain, or longer than
#: :data:`_GATE_QUICK` seconds, before it waits again (asking without waiting
#: meanwhile), doubling up to the maximum; a quick wait that had the lock
#: resets it.
_GATE_QUICK = 0.02
_GATE_PAUSE = 1.0
_GATE_MAX_PAUSE = 30.0
#: MariaDB's errors for a lock not had: a wait timed out (also ``NOWAIT``'s),
#: a deadlock (the reader is the one rolled back: it changed nothing).
_MARIADB_LOCK_REFUSED = frozenset({1205, 1213, 3572})

_PG_LAST_VALUE = sa.text("SELECT pg_sequence_last_value(CAST(:q AS regclass))")
#: A new transaction id: larger than every id assigned before it.
_PG_NEW_XID = sa.text("SELECT pg_current_xact_id()")
#: Whether every transaction with an id below ``:u`` has ended (this
#: statement's snapshot has none of them in progress, and it counts every id
#: below ``:u`` as assigned: its ``xmin`` is at least ``:u``).
_PG_ENDED = sa.text("SELECT pg_snapshot_xmin(pg_current_snapshot()) >= CAST(:u AS xid8)")
#: The transactions with an id below ``:u`` in progress now.
_PG_RUNNING_BELOW = sa.text(
    "SELECT CAST(x AS text) FROM pg_snapshot_xip(pg_current_snapshot()) x "
    "WHERE x < CAST(:u AS xid8)"
)


def _rows(r: Any) -> list[LogRow]:
    """A log row's occurrences as :class:`LogRow` s (``params`` as compact JSON
    text, as :meth:`CommitReader.read` gives them)."""
    return [o._replace(params=_dumps(o.params)) for o in _parsed_rows(r)]


def _parsed_rows(r: Any) -> list[LogRow]:
    """A log row's occurrences as :class:`LogRow` s, ``params`` as parsed.

    orjson parses the row's JSON (several times faster than :mod:`json`);
    where it would read the text otherwise than :mod:`json` does, :mod:`json`
    reads it: a lone surrogate, ``NaN`` or a number beyond a float (orjson
    refuses them) and an integer beyond 64 bits (orjson reads a float: a text
    with 19 digits in a row is left to :mod:`json`)."""
    text = r.occurrences
    if isinstance(text, str):
        if not _long_number(text):
            try:
                elems = _fast_loads(text)
            except _FastError:
                elems = json.loads(text)
        else:
            elems = json.loads(text)
    else:  # a driver that returns JSON values itself
        elems = text
    rid, seq, scope, outcome = int(r.id), int(r.commit_seq), r.scope, r.outcome
    try:
        return _make(elems, rid, seq, scope, outcome)
    except OverflowError:
        # JSONB gives a number no float holds (``1e999``, written by hand) back
        # as an integer: read it as the infinity :func:`json.loads` makes of the
        # same text elsewhere, which the feeder refuses, naming the row
        elems = [[t, ev, _time(ts), _time(dts), *rest] for t, ev, ts, dts, *rest in elems]
        return _make(elems, rid, seq, scope, outcome)


_fast_loads = orjson.loads
_FastError = orjson.JSONDecodeError
#: Where orjson and :mod:`json` may read a number differently: an integer of
#: 19 digits or more (orjson reads one beyond 64 bits as a float). Found in
#: the text with every digit made ``0`` and everything else a space (a
#: bytes translation runs at C speed; a regular expression took longer than
#: the parse); a long float, or such digits in a string, cost a second reading.
_DIGITS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_LONG_NUMBER = b"0" * 19


def _long_number(text: str) -> bool:
    """Whether ``text`` has 19 digits in a row."""
    return _LONG_NUMBER in text.encode("utf-8", "surrogatepass").translate(_DIGITS)


def _time(value: Any) -> Any:
    """``value``, or the infinity of its sign if it is an integer no float holds."""
    if type(value) is int:
        try:
            float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    return value


_new = tuple.__new__


def _make(elems: Any, rid: int, seq: int, scope: str, outcome: str | None) -> list[LogRow]:
    """The occurrences ``elems`` of one log row as :class:`LogRow` s."""
    new = _new
    return [
        new(
            LogRow,
            (
                rid,
                seq,
                scope,
                int(t_occ),
                event,
                float(ts),
                float(ts if dts is None else dts),
                source_class,
                source_key,
                params,
                outcome,
            ),
        )
        for t_occ, event, ts, dts, source_class, source_key, params in elems
    ]


_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class Poller:
    """Waits between reads that found nothing: ``min_wait`` seconds at first,
    doubling up to ``max_wait`` while nothing new comes (:meth:`reset` after a
    read that found rows)."""

    def __init__(self, min_wait: float = 0.05, max_wait: float = 1.0) -> None:
        self.min_wait = min_wait
        self.max_wait = max_wait
        self._next = min_wait

    @property
    def ready(self) -> bool:
        """Whether :meth:`prepare` was called since the last wait or reset
        (a poller needs no preparing: always)."""
        return True

    def prepare(self) -> None:
        """Before the last read ahead of a wait (see :class:`PostgresListener`)."""

    def wait(self, stop: threading.Event, limit: float | None = None) -> None:
        w = self._next if limit is None else min(self._next, max(0.0, limit))
        stop.wait(w)
        self._next = min(self.max_wait, self._next * 2)

    def reset(self) -> None:
        self._next = self.min_wait

    def close(self) -> None:
        pass


class PostgresListener(Poller):
    """Waits for a ``NOTIFY`` of a commit that wrote log rows (sent by
    :meth:`~sentinel.log.LogWriter.take_commit_seq`), on a connection of its
    own; at most ``max_wait`` seconds (a safety net: the reader re-reads then,
    whatever happened to the notification).

    Writers notify only while a reader sleeps (PostgreSQL serializes the
    commits of notifying transactions): :meth:`prepare` takes the log's
    advisory lock, shared, on the listening connection, and the wait releases
    it when it ends (so does :meth:`reset`). The reader reads the log once
    more between the two, up to every number handed out
    (:meth:`CommitReader.horizon`), and sleeps only if that read found
    nothing: a writer takes its number, then tries the lock, so one that took
    a number after that read finds the lock held and notifies."""

    def __init__(self, engine: Engine, tables: LogTables, max_wait: float = 5.0) -> None:
        super().__init__(max_wait, max_wait)
        self.channel = notify_channel(tables)
        self._conn: Any = None
        self._engine = engine
        self._lock = {"s": tables.schema, "p": tables.prefix, "k": ADVISORY_SEED}
        self._held = False

    def _connect(self) -> Any:
        if self._conn is None:
            raw = self._engine.raw_connection()
            driver: Any = raw.driver_connection
            driver.autocommit = True
            driver.execute(f'LISTEN "{self.channel}"')
            self._raw, self._conn = raw, driver
        return self._conn

    @property
    def ready(self) -> bool:
        return self._held

    def prepare(self) -> None:
        if self._held:
            return
        try:
            self._connect().execute(_LOCK_SHARED, self._lock)
            self._held = True
        except Exception:  # the wait then polls
            log.warning("sentinel global: LISTEN failed; polling", exc_info=True)
            self.close()

    def _release(self) -> None:
        if self._held and self._conn is not None:
            try:
                self._conn.execute(_UNLOCK_SHARED, self._lock)
            except Exception:
                self.close()
        self._held = False

    def wait(self, stop: threading.Event, limit: float | None = None) -> None:
        timeout = self.max_wait if limit is None else min(self.max_wait, max(0.0, limit))
        if not self._held:  # not announced: writers do not notify
            stop.wait(min(timeout, 1.0))
            return
        try:
            conn = self._connect()
            # wake at the first notification; drain those that came together
            for _ in conn.notifies(timeout=timeout, stop_after=1):
                break
        except Exception:  # the listening connection broke: poll, reconnect later
            log.warning("sentinel global: LISTEN failed; polling", exc_info=True)
            self.close()
            stop.wait(min(timeout, 1.0))
        self._release()

    def reset(self) -> None:
        self._release()

    def close(self) -> None:
        self._held = False
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._raw.invalidate()
            self._conn = None


_LOCK_KEY = "hashtextextended(coalesce(%(s)s::text, current_schema()) || '.' || %(p)s::text, %(k)s)"
_LOCK_SHARED = f"SELECT pg_advisory_lock_shared({_LOCK_KEY})"
_UNLOCK_SHARED = f"SELECT pg_advisory_unlock_shared({_LOCK_KEY})"


def waiter(engine: Engine, tables: LogTables, *, min_wait: float, max_wait: float) -> Poller:
    """A :class:`PostgresListener` on PostgreSQL with psycopg, a
    :class:`Poller` elsewhere."""
    if engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg":
        return PostgresListener(engine, tables, max_wait=max(max_wait, 1.0))
    return Poller(min_wait, max_wait)
