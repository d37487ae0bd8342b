"""What the web view reads: bounded queries on the log's tables and indexes.

Every query here is a keyset page or a lookup on an index, so a page costs the
same on a log of a thousand rows or of millions (``bench/ui.py`` measures it):

- firings: ``rule_firings`` by ``id`` (its primary key), newest first, ``LIMIT``
  one page; pages go on from the last ``id`` shown (``WHERE id < :before``),
  never by ``OFFSET``. A rule filter uses the ``rule`` index, a scope (the
  detection's transaction) the ``(scope, t_occ)`` index, a partition key the
  ``(partition_key, id)`` index, or with a rule ``(rule, partition_key, id)``
  (one query per text the key may stand for,
  :func:`~sentinel.log.partition.key_candidates`, each ``LIMIT`` one page,
  merged here), a time range the ``fired_at`` index (the planner walks the
  range, or the ids back when the range is wide and recent: either way what
  it reads is what the range holds); a status alone is
  checked on the rows the ``id`` walk meets, at most :data:`FIRING_SCAN` ids
  a page (the page says so, and the next goes on below them);
- a firing's constituents: per scope, one walk of the ``event_batches``
  unique index ``(scope, t_first)`` down from the largest ``t_occ`` wanted
  (at most :data:`SCOPE_WALK` entries a query), keeping the rows whose
  ``[t_first, t_last]`` holds a wanted ``t_occ``, then those rows read
  through the ``occurrences`` view by ``id``;
- the log: ``event_batches`` rows (one per transaction), newest first, by
  ``id``, or, with a time range, by ``at_max`` (its index), then their
  occurrences through the view by ``id``;
- the outbox: per status, the ``(status, next_attempt_at)`` index;
- the global cursors: their few rows, and the largest ``commit_seq`` (its index).

Values come back as the log stores them: parameters as the JSON text of their
tagged form (:mod:`sentinel.params`), so a redacted parameter reads as the
writer's marker; nothing here decodes, renders or escapes (the templates do).
A row that does not hold what the writer writes (changed by hand, a damaged
database) raises :class:`~sentinel.errors.LogRowError` naming the row and
what is wrong with it, as :class:`~sentinel.log.LogReader` does.
"""

from __future__ import annotations

import bisect
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from sentinel.errors import LogRowError
from sentinel.log.partition import key_candidates
from sentinel.log.reader import _constituents, _decode, batch_rows
from sentinel.log.tables import LogTables
from sentinel.log.views import VIEW_COLUMNS
from sentinel.ui.operations import LAG_COUNT, Operations
from sentinel.ui.rows import ID_MAX, ID_MIN, MAX_PAGE, Page, _clamp, _iso, _json_text, _read, _stamp

__all__ = ["ID_MAX", "ID_MIN", "LAG_COUNT", "MAX_PAGE", "LogView", "Page"]

#: Constituents of one firing shown (a firing of ``A*`` may combine thousands).
MAX_CONSTITUENTS = 200
#: How many rows of one scope a firing page's lookup of its constituents walks
#: in one query (through the ``(scope, t_first)`` index, newest first).
SCOPE_WALK = 2000
#: Occurrences of one transaction shown on the log page.
MAX_PER_TRANSACTION = 100
#: With a firing status filter and no other index to go by, how many firings'
#: ids one page of firings walks at most.
FIRING_SCAN = 20_000
#: With an event filter, how many transactions the log page looks at per row
#: shown (the names are inside each row's JSON: no index finds them).
EVENT_SCAN_FACTOR = 10
#: The live view's count of firings covers the newest ids, from this many to
#: twice this many below the newest (:meth:`LogView.firing_signal`): a firing
#: committed later than that many newer ones is not signalled.
SIGNAL_WINDOW = 1000
#: What reading a damaged row raises: the database refusing its JSON (SQLite's
#: "malformed JSON", PostgreSQL's "cannot extract elements from an object" or
#: a number out of range), or a value Python cannot take (a text where a
#: number belongs, an infinite time).
_UNREADABLE = (sa.exc.OperationalError, sa.exc.DataError, ValueError, TypeError, OverflowError)


def _merged(
    conn: sa.Connection,
    table: sa.Table,
    q: sa.Select[Any],
    alternatives: list[sa.ColumnElement[bool]],
    limit: int,
    *,
    newest_first: bool,
) -> list[Any]:
    """The first ``limit`` rows, by ``id``, of ``q`` (on ``table``) under any
    of ``alternatives`` (each its own query: the rows of one are not the
    others'), or of ``q`` itself when there are none."""
    if len(alternatives) <= 1:
        return _read(conn, table, q.where(*alternatives))
    rows = [r for alt in alternatives for r in _read(conn, table, q.where(alt))]
    rows.sort(key=lambda r: r.id, reverse=newest_first)
    return rows[:limit]


def _unindexed(
    column: sa.ColumnElement[Any], since: datetime | None, until: datetime | None
) -> sa.ColumnElement[bool]:
    """``since <= column < until`` in a form no index serves (``coalesce``
    of the column): for a time range too wide for its index, read on the
    rows a walk by id meets instead (SQLite would sort the whole range)."""
    value = sa.func.coalesce(column, column)
    parts = []
    if since is not None:
        parts.append(value >= since)
    if until is not None:
        parts.append(value < until)
    return sa.and_(*parts)


class LogView(Operations):
    """The web view's reads of the log tables ``tables`` through ``engine``
    (each call one short connection; safe from several threads)."""

    def __init__(self, engine: sa.Engine, tables: LogTables) -> None:
        self.engine = engine
        self.tables = tables
        #: the per-occurrence view (``sentinel.log.views``)
        self.view = sa.table(
            tables.view_name, *(sa.column(n) for n in VIEW_COLUMNS), schema=tables.schema
        )

    # -- firings ---------------------------------------------------------------------
    def firings(
        self,
        *,
        rule: str | None = None,
        scope: str | None = None,
        key: str | None = None,
        statuses: list[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        before: int | tuple[int, int] | None = None,
        after: int | tuple[int, int] | None = None,
        limit: int = 50,
    ) -> Page:
        """One page of rule firings, newest first: those with ``id < before``
        (or, going back towards the newest, the ``limit`` just above ``after``),
        or, of one ``scope``, by ``(t_occ, id)`` (its index ``(scope, t_occ)``:
        a process scope's firings are without end), ``before`` and ``after``
        then being such pairs (a page gives them as ``T|ID``),
        of ``rule``, of the detection's ``scope``, of the partition ``key``
        (as a person types it: :func:`~sentinel.log.partition.key_candidates`),
        with one of ``statuses``, fired within ``since <= fired_at < until``,
        when given."""
        f = self.tables.firings
        where: list[sa.ColumnElement[bool]] = []
        # Each text the key may stand for is its own range of an index; one
        # query each keeps every one a walk of that range by id (an IN list
        # would sort all the key's firings first on PostgreSQL).
        keyed: list[sa.ColumnElement[bool]] = (
            [f.c.partition_key == c for c in key_candidates(key)] if key else []
        )
        if rule:
            where.append(f.c.rule == rule)
        if scope:
            where.append(f.c.scope == scope)
        if statuses:
            where.append(f.c.status.in_(statuses))
        times: list[sa.ColumnElement[bool]] = []
        if since is not None:
            times.append(f.c.fired_at >= since)
        if until is not None:
            times.append(f.c.fired_at < until)
        cols = [
            f.c.id,
            f.c.rule,
            f.c.scope,
            f.c.t_occ,
            f.c.coupling,
            f.c.status,
            f.c.error,
            f.c.fired_at,
            f.c.finished_at,
            f.c.savepoint,
            f.c.partition_key,
        ]
        # A status or a wide time range is checked on each row the walk by id
        # meets: then one page walks at most FIRING_SCAN ids (a scope's or a
        # key's firings are few; a time range holding at most FIRING_SCAN
        # firings is read through the fired_at index).
        bounded = bool(statuses or times) and not (scope or key)
        scan = FIRING_SCAN
        if times and bounded:
            with self.engine.connect() as conn:
                few = self._at_most(conn, times, scan)
            if few:
                bounded = False
            else:  # keep the planners off the fired_at index: the walk is by id
                times = [_unindexed(f.c.fired_at, since, until)]
        where.extend(times)
        if scope:
            return self._scope_firings(cols, where, key, before, after, limit)
        assert not isinstance(before, tuple) and not isinstance(after, tuple)
        if after is not None:
            if bounded:
                where.append(f.c.id <= _clamp(after + scan))
            q = sa.select(*cols).where(*where, f.c.id > after).order_by(f.c.id).limit(limit + 1)
            with self.engine.connect() as conn:
                got = _merged(conn, f, q, keyed, limit + 1, newest_first=False)
                top = self._max_id(conn) if bounded and len(got) <= limit else None
            more_newer = len(got) > limit
            got = list(reversed(got[:limit]))
            page = Page([self._firing(r) for r in got])
            page.newer = str(got[0].id) if more_newer and got else None
            if top is not None and after + scan < top:
                page.newer = str(after + scan)  # nothing more in this window: the next
                page.note = f"looked at firings #{after + 1} to #{after + scan} for this page"
            page.older = str(got[-1].id) if got else str(_clamp(after + 1))
            return page
        q = sa.select(*cols).where(*where).order_by(f.c.id.desc()).limit(limit + 1)
        with self.engine.connect() as conn:
            hi = before
            if bounded and hi is None:
                hi = _clamp((self._max_id(conn) or 0) + 1)
            if hi is not None:
                q = q.where(f.c.id < hi)
            if bounded:
                assert hi is not None
                q = q.where(f.c.id >= _clamp(hi - scan))
            got = _merged(conn, f, q, keyed, limit + 1, newest_first=True)
            lowest = (
                conn.execute(sa.select(sa.func.min(f.c.id))).scalar()
                if bounded and len(got) <= limit
                else None
            )
        page = Page([self._firing(r) for r in got[:limit]])
        if len(got) > limit:
            page.older = str(got[limit - 1].id)
        elif lowest is not None and hi is not None and hi - scan > lowest:
            page.older = str(hi - scan)  # nothing more in this window: the one before
            page.note = f"looked at firings #{hi - scan} to #{hi - 1} for this page"
        if before is not None:
            page.newer = str(page.rows[0]["id"]) if page.rows else str(_clamp(before - 1))
        return page

    def _scope_firings(
        self,
        cols: list[Any],
        where: list[sa.ColumnElement[bool]],
        key: str | None,
        before: Any,
        after: Any,
        limit: int,
    ) -> Page:
        """:meth:`firings` of one scope (in ``where``): by ``(t_occ, id)``, newest
        first, through the ``(scope, t_occ)`` index; page keys ``T|ID``."""
        f = self.tables.firings
        if key:
            where = [*where, f.c.partition_key.in_(key_candidates(key))]

        def text(r: Any) -> str:
            return f"{r.t_occ}|{r.id}"

        if after is not None:
            t, i = after
            q = (
                sa.select(*cols)
                .where(*where, f.c.t_occ >= t, sa.or_(f.c.t_occ > t, f.c.id > i))
                .order_by(f.c.t_occ, f.c.id)
                .limit(limit + 1)
            )
            with self.engine.connect() as conn:
                got = _read(conn, f, q)
            more_newer = len(got) > limit
            got = list(reversed(got[:limit]))
            page = Page([self._firing(r) for r in got])
            page.newer = text(got[0]) if more_newer and got else None
            page.older = text(got[-1]) if got else f"{t}|{_clamp(i + 1)}"
            return page
        q = sa.select(*cols).where(*where)
        if before is not None:
            t, i = before
            q = q.where(f.c.t_occ <= t, sa.or_(f.c.t_occ < t, f.c.id < i))
        q = q.order_by(f.c.t_occ.desc(), f.c.id.desc()).limit(limit + 1)
        with self.engine.connect() as conn:
            got = _read(conn, f, q)
        page = Page([self._firing(r) for r in got[:limit]])
        if len(got) > limit:
            page.older = text(got[limit - 1])
        if before is not None:
            t, i = before
            page.newer = text(got[0]) if got else f"{t}|{_clamp(i - 1)}"
        return page

    def _at_most(self, conn: sa.Connection, times: list[sa.ColumnElement[bool]], n: int) -> bool:
        """Whether the firings within ``times`` are at most ``n``: counted
        through the ``fired_at`` index, reading at most ``n + 1`` entries."""
        some = sa.select(sa.literal(1)).where(*times).limit(n + 1).subquery()
        found = conn.execute(sa.select(sa.func.count()).select_from(some)).scalar()
        return (found or 0) <= n

    def _max_id(self, conn: sa.Connection) -> int | None:
        return conn.execute(sa.select(sa.func.max(self.tables.firings.c.id))).scalar()

    @staticmethod
    def _firing(r: Any) -> dict[str, Any]:
        return {
            "id": r.id,
            "rule": r.rule,
            "scope": r.scope,
            "t_occ": r.t_occ,
            "coupling": r.coupling,
            "status": r.status,
            "error": r.error or "",
            "fired_at": _iso(r.fired_at),
            "finished_at": _iso(r.finished_at),
            "savepoint": r.savepoint or "",
            "key": r.partition_key or "",
        }

    def latest_firing(self) -> int | None:
        """The newest firing's ``id``."""
        f = self.tables.firings
        with self.engine.connect() as conn:
            return conn.execute(sa.select(sa.func.max(f.c.id))).scalar()

    def firing_signal(self) -> dict[str, Any]:
        """What changes when a firing commits (the live view's signal that more
        came): the newest firing's ``id`` (``latest``), and how many firings
        have an ``id`` of at least ``from`` (``count``), ``from`` being the
        newest id less :data:`SIGNAL_WINDOW` to a multiple of it (so it
        stays put while fewer than that many firings come, and a page can
        compare its count with a later one). On PostgreSQL and MariaDB an id
        is taken at the insert: a firing committed after a newer one leaves
        the newest id as it was, and adds to the count. Two reads of the
        primary key, the count over at most twice :data:`SIGNAL_WINDOW` ids."""
        f = self.tables.firings
        with self.engine.connect() as conn:
            latest = conn.execute(sa.select(sa.func.max(f.c.id))).scalar()
            w = SIGNAL_WINDOW
            bound = 0 if latest is None else (latest - w) // w * w
            q = sa.select(sa.func.count()).select_from(f).where(f.c.id >= bound)
            count = conn.execute(q).scalar()
        return {"latest": latest, "from": bound, "count": int(count or 0)}

    def firing(self, fid: int) -> dict[str, Any] | None:
        """Firing ``fid`` with its constituents resolved from the event log (the
        first :data:`MAX_CONSTITUENTS`), as ``sentinel log firings`` lists them;
        ``None`` when there is no such firing (as for an id no row can have).
        A firing whose constituents are not the list of ``[scope, t_occ]``
        pairs the writer writes raises :class:`~sentinel.errors.LogRowError`."""
        if not ID_MIN <= fid <= ID_MAX:
            return None
        f = self.tables.firings
        q = sa.select(*f.c).where(f.c.id == fid)
        with self.engine.connect() as conn:
            got = _read(conn, f, q)
            if not got:
                return None
            row = got[0]
            out = self._firing(row)
            keys = list(_constituents(row.id, row.constituents, f.name))
            out["n_constituents"] = len(keys)
            keys = keys[:MAX_CONSTITUENTS]
            found = self._occurrences_at(conn, keys)
        out["constituents"] = [
            found.get(k) or {"scope": k[0], "t_occ": k[1], "missing": True} for k in keys
        ]
        return out

    def _occurrences_at(
        self, conn: sa.Connection, keys: list[tuple[str, int]]
    ) -> dict[tuple[str, int], dict[str, Any]]:
        """The logged occurrences ``(scope, t_occ)`` of ``keys``: per scope, one
        query of the unique index ``(scope, t_first)`` for the rows that may
        hold them (``t_first <= t <= t_last`` for one of its ``t``), then the
        view by those rows' ids. Where several rows hold the same occurrence
        (not what the writer writes), the one with the largest id is shown."""
        ids: set[int] = set()
        holding: dict[tuple[str, int], list[int]] = {}  # the rows that should hold each
        wanted_by_scope: dict[str, list[int]] = {}
        for scope, t in set(keys):
            wanted_by_scope.setdefault(scope, []).append(t)
        for scope, ts in wanted_by_scope.items():
            ts.sort()
            for rid, t_first, t_last in self._rows_holding(conn, scope, ts):
                # the wanted t within [t_first, t_last]: those this row may hold
                lo = bisect.bisect_left(ts, t_first)
                hi = bisect.bisect_right(ts, t_last)
                for t in ts[lo:hi]:
                    holding.setdefault((scope, t), []).append(rid)
                    ids.add(rid)
        if not ids:
            return {}
        wanted = set(keys)
        out = {}
        for occ in self._view_rows(conn, sorted(ids)):
            key = (occ["scope"], occ["t_occ"])
            if key in wanted:
                out[key] = occ  # by id: the largest id holding it wins
        # a row whose JSON is not an array of occurrences may read as none
        # rather than fail (MariaDB's JSON_TABLE): a row that should hold a
        # constituent and does not is checked
        odd = {i for k, found in holding.items() if k not in out for i in found}
        damaged = self._undecodable(conn, sorted(odd)) if odd else None
        if damaged is not None:
            raise damaged
        return out

    def _rows_holding(
        self, conn: sa.Connection, scope: str, ts: list[int]
    ) -> list[tuple[int, int, int]]:
        """``(id, t_first, t_last)`` of the rows of ``scope`` that may hold one
        of ``ts`` (sorted): ``t_first <= max(ts)`` and ``t_last >= min(ts)``,
        newest ``t_first`` first, read through the ``(scope, t_first)`` index
        in walks of at most :data:`SCOPE_WALK` entries (a process scope's rows
        are without end): a walk from the largest ``t`` not yet passed, each
        going on below the lowest ``t_first`` the last one met while a ``t``
        below it is left. One query for a transaction's scope (its rows are
        few), or for ``ts`` within :data:`SCOPE_WALK` rows of each other."""
        b = self.tables.batches
        found: list[tuple[int, int, int]] = []
        left = list(ts)
        while left:
            hi, lo = left[-1], left[0]
            q = (
                sa.select(b.c.id, b.c.t_first, b.c.t_last)
                .where(b.c.scope == scope, b.c.t_first <= hi)
                .order_by(b.c.t_first.desc())
                .limit(SCOPE_WALK)
            )
            rows = [(int(r.id), int(r.t_first), int(r.t_last)) for r in conn.execute(q)]
            found.extend(r for r in rows if r[2] >= lo)  # t_last >= min(ts)
            if len(rows) < SCOPE_WALK:
                break  # the walk reached the scope's first row
            lowest = rows[-1][1]
            left = left[: bisect.bisect_left(left, lowest)]
        return found

    def _view_rows(
        self, conn: sa.Connection, ids: list[int], events: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """The occurrences of the ``event_batches`` rows ``ids`` (of ``events``
        only, when given), read through the view; a row among them that cannot
        be read raises :class:`~sentinel.errors.LogRowError` naming it."""
        try:
            return self._read_view(conn, ids, events)
        except _UNREADABLE as err:
            if isinstance(err, sa.exc.DBAPIError) and err.connection_invalidated:
                raise  # the connection, not a row
            conn.rollback()  # PostgreSQL refuses anything more in the failed transaction
            raise self._damaged(conn, ids, err) from err

    def _damaged(self, conn: sa.Connection, ids: list[int], err: Exception) -> Exception:
        """The :class:`~sentinel.errors.LogRowError` naming the row of ``ids``
        whose occurrences could not be read (``err``): the first whose JSON the
        reader's checks refuse, else the first the view cannot read alone;
        ``err`` itself when every row reads alone."""
        b = self.tables.batches
        found = self._undecodable(conn, ids)
        if found is not None:
            return found
        for rid in sorted(ids):
            try:
                self._read_view(conn, [rid])
            except _UNREADABLE as bad:
                conn.rollback()
                scope = conn.execute(sa.select(b.c.scope).where(b.c.id == rid)).scalar()
                why = str(bad).splitlines()[0][:200] if str(bad) else ""
                return LogRowError(
                    f"row {rid} of {b.name} (scope {str(scope)[:80]!r}): its occurrences "
                    f"cannot be read as the log writes them ({type(bad).__name__}: {why})",
                    table=b.name,
                    row_id=rid,
                    column="occurrences",
                )
        return err

    def _undecodable(self, conn: sa.Connection, ids: list[int]) -> LogRowError | None:
        """The :class:`~sentinel.errors.LogRowError` of the first row of ``ids``
        whose values the reader's checks refuse (as ``sentinel log`` reports
        it), else ``None``."""
        b = self.tables.batches
        for row in batch_rows(conn, b, sorted(ids)):
            try:
                _decode(row, b.name)
            except LogRowError as bad:
                return bad
        return None

    def _read_view(
        self, conn: sa.Connection, ids: list[int], events: list[str] | None = None
    ) -> list[dict[str, Any]]:
        v = self.view.c
        q = (
            sa.select(
                v.id,
                v.scope,
                v.t_occ,
                v.event,
                v.ts,
                v.detected_ts,
                v.source_class,
                v.source_key,
                sa.type_coerce(v.params, sa.Text).label("params"),
                v.outcome,
                v.savepoint,
            )
            .where(v.id.in_(ids))
            .order_by(v.id, v.t_occ)
        )
        if events:
            q = q.where(v.event.in_(events))
        return [
            {
                "batch": r.id,
                "scope": r.scope,
                "t_occ": int(r.t_occ),
                "event": r.event,
                "at": _stamp(r.ts),
                "ts": r.ts,
                "detected_at": _stamp(r.detected_ts) if r.detected_ts != r.ts else "",
                "source": (
                    "" if r.source_class is None else f"{r.source_class} {r.source_key or ''}"
                ),
                "params": _json_text(r.params),
                "outcome": r.outcome or "",
                "savepoint": r.savepoint or "",
            }
            for r in conn.execute(q)
        ]

    # -- the event log ---------------------------------------------------------------
    def transactions(
        self,
        *,
        scope: str | None = None,
        events: list[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        before: str | None = None,
        limit: int = 20,
    ) -> Page:
        """One page of the log: up to ``limit`` ``event_batches`` rows (a
        transaction's occurrences, or a later write of one), newest first, each
        with its occurrences (those of ``events`` and within ``since <= at <
        until`` when given; the first :data:`MAX_PER_TRANSACTION`).

        Without a time range, rows go by ``id`` (of one ``scope``: by
        ``t_first``, its unique index ``(scope, t_first)``); with one, rows whose latest
        occurrence time ``at_max`` lies in the range, by ``at_max`` (its
        index), so a range far back costs what a recent one does. With an event
        filter, up to :data:`EVENT_SCAN_FACTOR` times ``limit`` rows are looked
        at for one page; rows without a matching occurrence are skipped.
        ``before`` is the key the previous page returned as ``older``.
        """
        b = self.tables.batches
        timed = since is not None or until is not None
        where: list[sa.ColumnElement[bool]] = []
        if scope:
            where.append(b.c.scope == scope)
        if since is not None:
            where.append(b.c.at_max >= since)
        if until is not None:
            where.append(b.c.at_max < until)
        if before:
            if timed:
                at_text, _, id_text = before.rpartition("|")
                at = datetime.fromisoformat(at_text)
                bid = int(id_text)
                where.append(b.c.at_max <= at)
                where.append(sa.or_(b.c.at_max < at, b.c.id < bid))
            elif scope:
                where.append(b.c.t_first < int(before))
            else:
                where.append(b.c.id < int(before))
        # a scope's rows go by the unique (scope, t_first) index (a process
        # scope's rows are without end: by id, all of them would be sorted)
        by_t = bool(scope) and not timed
        if timed:
            order = [b.c.at_max.desc(), b.c.id.desc()]
        elif by_t:
            order = [b.c.t_first.desc()]
        else:
            order = [b.c.id.desc()]
        scan = limit * EVENT_SCAN_FACTOR if events else limit
        q = (
            sa.select(
                b.c.id,
                b.c.scope,
                b.c.t_first,
                b.c.n,
                b.c.at_min,
                b.c.at_max,
                b.c.outcome,
                b.c.savepoint,
                b.c.commit_seq,
                b.c.written_at,
                b.c.process,
            )
            .where(*where)
            .order_by(*order)
            .limit(scan + 1)
        )
        with self.engine.connect() as conn:
            heads = _read(conn, b, q)
            more = len(heads) > scan
            heads = heads[:scan]
            occs = self._view_rows(conn, [h.id for h in heads], events) if heads else []
            if not (events or timed):
                # a row whose JSON is not an array of occurrences may read as
                # none rather than fail (MariaDB's JSON_TABLE): n tells
                read = Counter(o["batch"] for o in occs)
                odd = [h.id for h in heads if read[h.id] != h.n]
                found = self._undecodable(conn, odd) if odd else None
                if found is not None:
                    raise found
        by_batch: dict[int, list[dict[str, Any]]] = {}
        lo = since.timestamp() if since is not None else None
        hi = until.timestamp() if until is not None else None
        for o in occs:
            if (lo is not None and o["ts"] < lo) or (hi is not None and o["ts"] >= hi):
                continue
            by_batch.setdefault(o["batch"], []).append(o)
        rows: list[dict[str, Any]] = []
        last = None
        for h in heads:
            last = h
            got = by_batch.get(h.id)
            if events and not got:
                continue
            got = got or []
            rows.append(
                {
                    "id": h.id,
                    "scope": h.scope,
                    "n": h.n,
                    "at_min": _iso(h.at_min),
                    "at_max": _iso(h.at_max),
                    "outcome": h.outcome or "",
                    "savepoint": h.savepoint or "",
                    "commit_seq": "" if h.commit_seq is None else h.commit_seq,
                    "written_at": _iso(h.written_at),
                    "process": h.process or "",
                    "occurrences": got[:MAX_PER_TRANSACTION],
                    "more": max(0, len(got) - MAX_PER_TRANSACTION),
                }
            )
            if len(rows) == limit:
                more = more or h is not heads[-1]
                break
        page = Page(rows)
        if more and last is not None:
            if timed:
                page.older = f"{last.at_max.astimezone(UTC).isoformat()}|{last.id}"
            else:
                page.older = str(last.t_first if by_t else last.id)
        if events:
            page.note = f"looked at {len(heads)} transaction(s) for this page"
        return page
