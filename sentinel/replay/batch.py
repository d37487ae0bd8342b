"""The replay step: log rows in, detections out, as Arrow record batches.

:func:`replay_batches` is a plain function from an iterator of record batches of
log rows (:data:`LOG_SCHEMA`; pandas DataFrames are accepted too) to an iterator
of record batches of detections (:data:`DETECTION_SCHEMA`). It is the whole of
replay: the local engine calls it once over the log, the Spark engine once per
partition (in ``mapInArrow``). It needs no Spark.

Input order is the contract:

``order="scope"`` (rules that flush per transaction)
    rows sorted by ``(scope, t_occ)``, or at least: each scope's rows contiguous
    and in ``t_occ`` order. A scope ends when the next scope starts (or the input
    ends); it is then committed or aborted according to the ``outcome`` of its
    rows outside rolled-back savepoints.
``order="t_occ"`` (rules with ``flush=False``)
    rows in ``t_occ`` order (ties by scope). A scope ends at its ``txn:commit``
    or ``txn:abort`` row, or when the input ends.

Rows of a rolled-back savepoint (``savepoint`` not null: its path, such as
``sp1/sp3``) are replayed in their place, inside a savepoint of the replayed
scope that is rolled back before the next row outside it: detection state, and
the detached detections made since, return to what they were before the
savepoint's first row, as online. Savepoints the path names that were released
cost a snapshot and change nothing.

Detections are those of the online run, in the order replay finds them: rule
name, coupling mode, scope and ``t_occ`` of the detection (its terminator's), the
constituents' ids (two parallel lists), their parameters (a JSON array of the
constituents' parameter objects, as the log holds them), the condition's result,
and the error a condition raised (``condition`` is then null).
"""

from __future__ import annotations

import functools
import gc
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from itertools import compress, repeat
from operator import itemgetter
from typing import Any, Final, Literal, TypeVar

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from sentinel.errors import ReplayError, ReplaySourceError
from sentinel.log.records import source_ref
from sentinel.occurrence import Occurrence, params_of
from sentinel.params import dumps
from sentinel.replay.recorder import (
    _PLAIN,
    InstantFailed,
    LazyParams,
    ReplayDetector,
    _fill_named,
    checked_params,
    decode_params,
    row_error,
)
from sentinel.replay.rules import Rules, resolve_rules, rule_events

__all__ = [
    "DETECTION_COLUMNS",
    "DETECTION_SCHEMA",
    "LOG_COLUMNS",
    "LOG_SCHEMA",
    "OPTIONAL_LOG_COLUMNS",
    "Order",
    "Replayer",
    "conform",
    "replay_batches",
]

Order = Literal["scope", "t_occ"]

#: The columns replay reads from a log row (extra columns are ignored).
LOG_SCHEMA: Final = pa.schema(
    [
        pa.field("scope", pa.string(), nullable=False),
        pa.field("t_occ", pa.int64(), nullable=False),
        pa.field("event", pa.string(), nullable=False),
        pa.field("ts", pa.float64(), nullable=False),
        pa.field("detected_ts", pa.float64(), nullable=False),
        pa.field("source_class", pa.string()),
        pa.field("source_key", pa.string()),
        pa.field("params", pa.string(), nullable=False),
        pa.field("outcome", pa.string()),
        pa.field("savepoint", pa.string()),
    ]
)
LOG_COLUMNS: Final = tuple(LOG_SCHEMA.names)
#: Log columns that may be missing (logs before revision 0004): read as nulls.
OPTIONAL_LOG_COLUMNS: Final = ("savepoint",)

_STRINGS = pa.list_(pa.field("element", pa.string()))
_INTS = pa.list_(pa.field("element", pa.int64()))

#: One row per detection. Every field is nullable, as Spark declares them.
DETECTION_SCHEMA: Final = pa.schema(
    [
        pa.field("rule", pa.string()),
        pa.field("coupling", pa.string()),
        pa.field("scope", pa.string()),
        pa.field("t_occ", pa.int64()),
        pa.field("constituent_scopes", _STRINGS),
        pa.field("constituent_t_occs", _INTS),
        pa.field("params", pa.string()),
        pa.field("condition", pa.bool_()),
        pa.field("error", pa.string()),
    ]
)
DETECTION_COLUMNS: Final = tuple(DETECTION_SCHEMA.names)
#: How both engines write detections to Parquet: dictionary encoding only for
#: the columns of few distinct values (rule, coupling). On the others (scope ids,
#: parameter texts) Parquet would build a dictionary it then abandons; skipping
#: it writes a 1M-row log's 434,000 detections in about 0.13 s instead of 0.18 s,
#: to a file of the same size.
DETECTION_PARQUET: Final = {"use_dictionary": ["rule", "coupling"]}

_ENDS: Final = frozenset({"txn:commit", "txn:abort"})
_new = tuple.__new__
_t_occ = itemgetter(1)


_F = TypeVar("_F", bound=Callable[..., Any])

#: While replaying, the cyclic garbage collector's youngest generation waits for
#: this many allocations (CPython's default: 700).
GC_YOUNG_THRESHOLD: Final = 100_000
_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple[int, ...] = ()


def _fewer_collections(method: _F) -> _F:
    """Run ``method`` with the cyclic garbage collector tuned for replay.

    Replay allocates millions of short-lived, acyclic containers (occurrences,
    their parameters, detections) and holds tens of thousands of them at once
    (the detections not yet taken). With CPython's default thresholds the
    collector runs thousands of times per million rows, and each full
    collection traverses everything held: about a third of replay's time. The
    youngest generation's threshold is raised to :data:`GC_YOUNG_THRESHOLD`
    while any replayer in the process is working, and restored after.
    """

    @functools.wraps(method)
    def tuned(*args: Any, **kwargs: Any) -> Any:
        global _gc_users, _gc_saved
        with _gc_lock:
            if not _gc_users:
                _gc_saved = gc.get_threshold()
                if _gc_saved[0]:  # 0: automatic collection is off, and stays so
                    gc.set_threshold(max(_gc_saved[0], GC_YOUNG_THRESHOLD), *_gc_saved[1:])
            _gc_users += 1
        try:
            return method(*args, **kwargs)
        finally:
            with _gc_lock:
                _gc_users -= 1
                if not _gc_users:
                    gc.set_threshold(*_gc_saved)

    return tuned  # type: ignore[return-value]


class Replayer:
    """Feeds log rows to a fresh replay detector and collects its detections.

    One replayer is one partition's worth of replay. ``rules`` is a rules
    reference, a detector or a callable (see :mod:`sentinel.replay.rules`);
    ``only`` restricts replay to the named rules; ``order`` is the input order
    (module docs). ``order="scope"`` refuses rules with ``flush=False`` (they
    combine occurrences of several scopes, which scope order would separate).

    Not thread-safe. Usage: :meth:`feed` batches, :meth:`take` detections when
    convenient, :meth:`finish` at the end of the input, then :meth:`take` the
    rest. ``rows`` counts the log rows fed; ``per_rule`` the detections taken;
    ``failed`` those of them whose condition (or action) raised, by rule.
    """

    def __init__(
        self,
        rules: Rules,
        *,
        order: Order = "scope",
        only: Collection[str] | None = None,
        run_actions: bool = False,
    ) -> None:
        if order not in ("scope", "t_occ"):
            raise ReplayError(f"order must be 'scope' or 't_occ', not {order!r}")
        base = resolve_rules(rules)
        self.detector = det = ReplayDetector.of(base, only=only, run_actions=run_actions)
        active = [r for r in det.rules.values() if r.enabled]
        if order == "scope":
            spanning = [r.name for r in active if not r.flush]
            if spanning:
                raise ReplayError(
                    f"rule(s) {', '.join(map(repr, spanning))} opted out of flushing "
                    "(flush=False): they combine occurrences of several transactions, so "
                    "they replay in t_occ order, not scope by scope"
                )
        self.order: Order = order
        self.listened, self.keyed = rule_events(active)
        # Per event name: _SKIP (nothing listens), _LAZY (decode parameters when
        # read) or _NOW (detection reads them: decode them now).
        self._modes: dict[str, Any] = {}
        self.rows = 0
        self.per_rule: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self._records = det.scheduler.records
        # order="scope": the scope being replayed; order="t_occ": every open scope.
        self._scope: Any = None
        self._scope_id: Any = None
        self._outcome: str | None = None
        #: order="scope": the savepoint path of the last row and the replayed
        #: savepoints open in the scope, outermost first (see _savepoints_to).
        self._path: str | None = None
        self._stack: list[tuple[str, object, int]] = []
        #: order="t_occ": scope id -> [scope, outcome, savepoint path, stack].
        self._open: dict[Any, list[Any]] = {}
        self._refs: dict[tuple[str, str | None], Any] = {}
        #: Scopes whose txn:abort row was read and that have not ended yet. An
        #: aborted scope without one was abandoned online (its session
        #: garbage-collected): nothing ran after it (see _end).
        self._abort_rows: set[Any] = set()
        wanted = self.needed_events()
        self._wanted = None if wanted is None else pa.array(wanted, pa.string())

    # -- input -----------------------------------------------------------------------
    @_fewer_collections
    def feed(self, batch: pa.RecordBatch | Any) -> None:
        """Replay one batch of log rows (a record batch, a table or a pandas
        DataFrame with the :data:`LOG_SCHEMA` columns)."""
        if isinstance(batch, pa.Table):
            for b in batch.to_batches():
                self.feed(b)
            return
        batch = conform(_as_batch(batch))
        n = batch.num_rows
        if not n:
            return
        self.rows += n
        if (
            self._wanted is not None
            and "event" in batch.schema.names
            and batch.schema.field("event").type in _FILTERABLE
        ):
            # Rows nothing listens to are dropped in Arrow, not looped over (other
            # types, such as string views, lack the kernels: the loop skips them).
            batch = batch.filter(pc.is_in(batch.column("event"), value_set=self._wanted))
        missing = [c for c in LOG_COLUMNS if c not in batch.schema.names]
        if missing:
            raise ReplaySourceError(
                f"log rows lack column(s) {', '.join(missing)}; replay needs "
                f"{', '.join(LOG_COLUMNS)}",
                source="input batch",
            )
        self._note_aborts(batch)
        if self.order == "t_occ":
            self._feed_by_t_occ([batch.column(name).to_pylist() for name in LOG_COLUMNS])
        elif not batch.num_rows:
            return
        elif self._path is None and _plain_scopes(batch):
            self._feed_scope_runs(batch)
        else:
            self._feed_by_scope([batch.column(name).to_pylist() for name in LOG_COLUMNS])

    def _occurrence_parts(self) -> tuple[Any, ...]:
        return (self._modes, self._mode, self.detector.inject, self._refs)

    def _mode(self, event: str) -> Any:
        if not self.detector.listens(event):
            mode: Any = _SKIP
        elif event not in self.listened:
            mode = _NOW  # routed by a layer (temporal ticks): it may read anything
        else:
            mode = _NOW if event in self.keyed else _LAZY
        self._modes[event] = mode
        return mode

    def _feed_by_scope(self, cols: list[list[Any]]) -> None:
        modes, mode_of, inject, refs = self._occurrence_parts()
        det = self.detector
        new_scope = det.scope
        scope, cur, outcome = self._scope, self._scope_id, self._outcome
        path, stack = self._path, self._stack
        rows = zip(*cols, strict=True)
        while True:
            try:
                for sid, t, ev, ts, dts, sc, sk, text, oc, sp in rows:
                    if sid != cur:
                        if scope is not None:
                            self._scope = None
                            self._end(scope, outcome, stack)
                        scope = new_scope(sid)
                        # A rolled-back savepoint's rows are "aborted" whatever
                        # the transaction's outcome: the scope's comes from others.
                        cur, outcome, path = sid, oc if sp is None else _UNKNOWN, None
                        self._scope, self._scope_id, self._outcome = scope, cur, outcome
                    if sp is not path and sp != path:
                        self._savepoints_to(scope, stack, sp)
                        self._path = path = sp
                        if sp is None and outcome is _UNKNOWN:
                            self._outcome = outcome = oc
                    m = modes.get(ev)
                    if m is None:
                        m = mode_of(ev)
                    if m is _SKIP:
                        continue
                    p = LazyParams()
                    p.raw = text
                    p.pending = text != "{}"
                    if m is _NOW and p.pending:
                        p.update(_decode_row(text, ev, t, sid))
                        p.pending = False
                    if sc is None:
                        source = None
                    else:
                        source = refs.get((sc, sk))
                        if source is None:
                            source = self._ref(sc, sk)
                    inject(_new(Occurrence, (ev, t, ts, dts, source, p, sid, None)), scope)
                break
            except InstantFailed:
                continue  # recorded; go on with the next row

    def _feed_scope_runs(self, batch: pa.RecordBatch) -> None:
        """:meth:`_feed_by_scope` for a batch outside savepoints (the usual case;
        see :func:`_plain_scopes`), a run of rows of one scope at a time: the
        scope id and outcome are converted once per run, not once per row (the
        run's rows share one scope id object), and no row tests for a savepoint."""
        modes, mode_of, inject, refs = self._occurrence_parts()
        new_scope = self.detector.scope
        use_scope = self.detector.use_scope
        scope, cur, outcome, stack = self._scope, self._scope_id, self._outcome, self._stack
        n = batch.num_rows
        column = batch.column
        scopes = column("scope")
        if n > 1:
            changed = pc.not_equal(scopes.slice(1), scopes.slice(0, n - 1))
            starts = [0, *pc.add(pc.indices_nonzero(changed), 1).to_pylist()]
        else:
            starts = [0]
        where = pa.array(starts, pa.int64())
        sids = scopes.take(where).to_pylist()
        outcomes = column("outcome").take(where).to_pylist()
        t_occs, events, times, detected, texts = (
            column(name).to_pylist() for name in ("t_occ", "event", "ts", "detected_ts", "params")
        )
        # The parameters detection reads (_NOW) are decoded in one orjson call
        # per batch, checked one by one as decode_params checks them.
        decoded = self._decode_now(batch, events, texts)
        next_decoded: Any = None if decoded is None else iter(decoded).__next__
        plain = _PLAIN.issuperset
        no_sources = column("source_class").null_count == n
        classes = keys = None if no_sources else column("source_class").to_pylist()
        if not no_sources:
            keys = column("source_key").to_pylist()
        for lo, hi, sid, oc in zip(starts, [*starts[1:], n], sids, outcomes, strict=True):
            if sid != cur:
                if scope is not None:
                    self._scope = None
                    self._end(scope, outcome, stack)
                scope = new_scope(sid)
                cur, outcome = sid, oc
                self._scope, self._scope_id, self._outcome = scope, cur, outcome
            rows = zip(
                t_occs[lo:hi], events[lo:hi], times[lo:hi], detected[lo:hi],
                _NONE if classes is None else classes[lo:hi],
                _NONE if keys is None else keys[lo:hi],
                texts[lo:hi],
                strict=False,  # _NONE repeats; the rest are slices of one length
            )  # fmt: skip
            # The run's scope is current while its rows are fed, as a
            # transaction's is while it signals online: the scheduler then
            # finds it current and does not set and reset it per detection.
            with use_scope(scope):
                while True:
                    try:
                        for t, ev, ts, dts, sc, sk, text in rows:
                            m = modes.get(ev)
                            if m is None:
                                m = mode_of(ev)
                            if m is _SKIP:
                                continue
                            if m is _NOW and text != "{}":
                                if decoded is None:
                                    d = _decode_row(text, ev, t, sid)
                                else:
                                    d = next_decoded()
                                    if type(d) is not dict:  # read alone (see _decode_now)
                                        d = _decode_row(text, ev, t, sid)
                                    elif not plain(map(type, d.values())):
                                        d = _decode_row(text, ev, t, sid, d)
                                p = LazyParams(d)
                                p.raw = text
                                p.pending = False
                            else:
                                p = LazyParams()
                                p.raw = text
                                p.pending = text != "{}"
                            if sc is None:
                                source = None
                            else:
                                source = refs.get((sc, sk))
                                if source is None:
                                    source = self._ref(sc, sk)
                            inject(_new(Occurrence, (ev, t, ts, dts, source, p, sid, None)), scope)
                        break
                    except InstantFailed:
                        continue  # recorded; go on with the next row

    def _decode_now(
        self, batch: pa.RecordBatch, events: list[str], texts: list[str]
    ) -> list[Any] | None:
        """The parameters of ``batch``'s rows whose parameters detection reads
        (mode _NOW, not ``{}``), in row order, as ``orjson.loads`` reads each text,
        or ``None`` for a row to be read alone: the texts of flat objects joined
        into one JSON array, read at once. ``None`` instead of the list where that
        cannot stand for reading them one by one (a text orjson refuses), or is
        not worth it (no such row).

        Only texts that begin with ``{``, end with ``}`` and hold no other brace
        are joined, with a line break in each separator: then each is read as
        exactly its own value, or the array is refused. (A line break inside a
        string is not JSON, so no string spans two texts; the first text that is
        not one value would begin with an object that closes at its last
        character, which is one value. Corrupt texts such as ``{"id":1`` and
        ``"s":2},{"id":1}`` read as one value each only when joined.) Texts of
        nested values are read alone anyway, by :func:`checked_params`."""
        modes, mode_of = self._modes, self._mode
        now = [e for e in set(events) if (modes.get(e) or mode_of(e)) is _NOW]
        event, params = batch.column("event"), batch.column("params")
        if not now or event.type not in _RUN_TYPES or params.type not in _RUN_TYPES:
            return None
        if params.null_count:
            return None
        mask = pc.and_(
            pc.is_in(event, value_set=pa.array(now, pa.string())), pc.not_equal(params, "{}")
        )
        flat = pc.and_(
            pc.and_(pc.starts_with(params, "{"), pc.ends_with(params, "}")),
            pc.and_(
                pc.equal(pc.count_substring(params, "{"), 1),
                pc.equal(pc.count_substring(params, "}"), 1),
            ),
        )
        joined = pc.and_(mask, flat)
        selected = list(compress(texts, joined.to_pylist()))
        if not selected:
            return None
        try:
            out: list[Any] = _fast_loads("[" + ",\n".join(selected) + "]")
        except _FastError:
            return None
        if len(out) != len(selected):  # pragma: no cover - see above
            return None
        if len(selected) == pc.sum(mask).as_py():
            return out
        # the rows read alone get None, in their place among the others
        values = iter(out).__next__
        return [values() if j else None for j in compress(joined.to_pylist(), mask.to_pylist())]

    def _feed_by_t_occ(self, cols: list[list[Any]]) -> None:
        modes, mode_of, inject, refs = self._occurrence_parts()
        det = self.detector
        opened = self._open
        rows = zip(*cols, strict=True)
        while True:
            try:
                for sid, t, ev, ts, dts, sc, sk, text, oc, sp in rows:
                    m = modes.get(ev)
                    if m is None:
                        m = mode_of(ev)
                    if m is not _SKIP:
                        entry = opened.get(sid)
                        if entry is None:
                            entry = opened[sid] = [
                                det.scope(sid),
                                oc if sp is None else _UNKNOWN,
                                None,
                                [],
                            ]
                        if sp is not entry[2] and sp != entry[2]:
                            self._savepoints_to(entry[0], entry[3], sp)
                            entry[2] = sp
                            if sp is None and entry[1] is _UNKNOWN:
                                entry[1] = oc
                        p = LazyParams()
                        p.raw = text
                        p.pending = text != "{}"
                        if m is _NOW and p.pending:
                            p.update(_decode_row(text, ev, t, sid))
                            p.pending = False
                        if sc is None:
                            source = None
                        else:
                            source = refs.get((sc, sk))
                            if source is None:
                                source = self._ref(sc, sk)
                        inject(_new(Occurrence, (ev, t, ts, dts, source, p, sid, None)), entry[0])
                    if ev in _ENDS:
                        entry = opened.pop(sid, None)
                        if entry is not None:
                            self._end(entry[0], entry[1], entry[3])
                break
            except InstantFailed:
                continue

    def _ref(self, source_class: str, source_key: str | None) -> Any:
        refs = self._refs
        if len(refs) > 65_536:
            refs.clear()
        ref = refs[(source_class, source_key)] = source_ref(source_class, source_key)
        return ref

    def _savepoints_to(self, scope: Any, stack: list[tuple[str, object, int]], path: Any) -> None:
        """Make ``stack`` (the replayed savepoints open in ``scope``, outermost
        first) match the savepoint ``path`` of the next row (None: outside any):
        roll back the savepoints it leaves, begin those it enters. A rollback
        drops the detached detections made since, as the ORM layer does."""
        names = path.split("/") if path else ()
        keep = 0
        while keep < len(stack) and keep < len(names) and stack[keep][0] == names[keep]:
            keep += 1
        info = scope.info
        if keep < len(stack):
            scope.rollback_to(stack[keep][1])
            pending = info.get("detached")
            if pending:
                del pending[stack[keep][2] :]
            del stack[keep:]
        for name in names[keep:]:
            pending = info.get("detached")
            stack.append((name, scope.savepoint(), len(pending) if pending else 0))

    def _note_aborts(self, batch: pa.RecordBatch) -> None:
        """Remember the scopes of ``batch``'s ``txn:abort`` rows (one Arrow
        filter per batch, not a test per row)."""
        event = batch.column("event")
        if event.type in _FILTERABLE:
            scopes = batch.column("scope").filter(pc.equal(event, "txn:abort")).to_pylist()
        else:  # types without the kernel (string views): read the columns
            scopes = [
                s
                for s, e in zip(batch.column("scope").to_pylist(), event.to_pylist(), strict=True)
                if e == "txn:abort"
            ]
        if scopes:
            self._abort_rows.update(scopes)

    def _end(self, scope: Any, outcome: Any, stack: list[tuple[str, object, int]]) -> None:
        if stack:
            self._savepoints_to(scope, stack, None)
        # The process scope (outcome NULL) is never committed online; ending it
        # as committed hands its detached rules over, as online does at once. A
        # scope whose every row replayed was rolled back (_UNKNOWN) has nothing
        # left to hand over either way. An aborted scope without a txn:abort row
        # was abandoned online (its session garbage-collected before it ended):
        # it ended without txn:abort, and no rule ran after it.
        if outcome == "aborted":
            abandoned = scope.id not in self._abort_rows
            self._abort_rows.discard(scope.id)
            self.detector.end_scope(scope, "aborted", abandoned=abandoned)
        else:
            self.detector.end_scope(scope, "committed")

    @_fewer_collections
    def finish(self) -> None:
        """End the scopes still open (the input is over)."""
        if self._scope is not None:
            scope, self._scope = self._scope, None
            self._end(scope, self._outcome, self._stack)
        self._path = None
        opened, self._open = self._open, {}
        for scope, outcome, _path, stack in opened.values():
            self._end(scope, outcome, stack)

    def needed_events(self) -> list[str] | None:
        """The events this replay needs to read (what its rules listen to, and
        transaction ends), or ``None`` for all of them (a layer routes logged
        occurrences by names that are not known in advance)."""
        if self.detector.dispatch.route:
            return None
        return sorted({*self.listened, *_ENDS})

    # -- output ----------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """How many detections are waiting to be taken."""
        return len(self._records)

    @_fewer_collections
    def take(self) -> pa.RecordBatch:
        """The detections recorded since the last call, as one record batch."""
        records = self._records[:]
        self._records.clear()
        if not records:
            return pa.RecordBatch.from_pylist([], schema=DETECTION_SCHEMA)
        names, couplings, scopes, occs, conditions, errors = zip(*records, strict=True)
        self.per_rule.update(names)
        if any(errors):
            self.failed.update(n for n, e in zip(names, errors, strict=True) if e is not None)
        t_occs = [o[1] for o in occs]
        # Each detection's constituents, flattened: their scopes, t_occs and
        # parameters' JSON texts, with one offset per detection. Arrow joins the
        # texts into each detection's JSON array.
        offsets = [0]
        flat_scopes: list[Any] = []
        flat_t: list[int] = []
        texts: list[str] = []
        add_offset, add_scope, add_t, add_text = (
            offsets.append,
            flat_scopes.append,
            flat_t.append,
            texts.append,
        )
        n = 0
        for occ in occs:
            if len(occ) == 8:
                add_scope(occ[6])
                add_t(occ[1])
                p = occ[5]
                if type(p) is LazyParams:
                    if p.pending:
                        _fill_named(occ)  # read before written out (see below)
                    add_text(p.raw)
                else:
                    add_text(dumps(params_of(occ)))
                n += 1
                add_offset(n)
                continue
            parts = occ[2]
            # Composites of primitives are the common case: ordering their parts by
            # t_occ (stably) gives what .constituents gives, without flattening.
            if len(parts) == 2 and len(parts[0]) == 8 and len(parts[1]) == 8:
                a, b = parts
                cons: Any = (b, a) if b[1] < a[1] else parts
            elif all(len(p) == 8 for p in parts):
                cons = sorted(parts, key=_t_occ)
            else:
                cons = occ.constituents
            for c in cons:
                add_scope(c[6])
                add_t(c[1])
                p = c[5]
                if type(p) is LazyParams:
                    # Parameters no rule read are read now, before their text
                    # goes into the detection's JSON array: a corrupt one (``{"a":1``,
                    # or ``{"a":1},{"b":2}``, which would add a value no row
                    # holds) fails the replay naming its row, as where read.
                    if p.pending:
                        _fill_named(c)
                    add_text(p.raw)
                else:
                    add_text(dumps(params_of(c)))
            n += len(cons)
            add_offset(n)
        off = pa.array(offsets, pa.int32())
        joined = pc.binary_join(pa.ListArray.from_arrays(off, pa.array(texts, pa.string())), ",")
        return pa.RecordBatch.from_arrays(
            [
                pa.array(names, pa.string()),
                pa.array(couplings, pa.string()),
                pa.array(scopes, pa.string()),
                pa.array(t_occs, pa.int64()),
                pa.ListArray.from_arrays(off, pa.array(flat_scopes, pa.string()), type=_STRINGS),
                pa.ListArray.from_arrays(off, pa.array(flat_t, pa.int64()), type=_INTS),
                pc.binary_join_element_wise("[", joined, "]", ""),
                pa.array(conditions, pa.bool_()),
                pa.array(errors, pa.string()),
            ],
            schema=DETECTION_SCHEMA,
        )


_fast_loads = orjson.loads
_FastError = orjson.JSONDecodeError


def _decode_row(text: str, event: str, t_occ: int, scope: Any, read: Any = None) -> Any:
    """:func:`decode_params` of a row's ``text`` (:func:`checked_params`, given
    ``read``, what orjson read), naming the row when it cannot be read."""
    try:
        return decode_params(text) if read is None else checked_params(read, text)
    except ReplaySourceError as err:
        raise row_error(err, event, t_occ, scope) from err


_NONE: Final = repeat(None)  # zip stops at the run's end: shared by every run
_FILTERABLE: Final = (pa.string(), pa.large_string(), pa.dictionary(pa.int32(), pa.string()))
_SKIP: Final = "skip"
#: A scope's outcome while only rows of rolled-back savepoints were seen.
_UNKNOWN: Final = "unknown"
_LAZY: Final = "lazy"
_NOW: Final = "now"


_RUN_TYPES: Final = (pa.string(), pa.large_string())


def _plain_scopes(batch: pa.RecordBatch) -> bool:
    """Whether ``batch`` can replay a run of one scope at a time: no row in a
    rolled-back savepoint, and scope ids Arrow compares (strings, not null)."""
    scopes = batch.column("scope")
    return (
        batch.column("savepoint").null_count == batch.num_rows
        and scopes.type in _RUN_TYPES
        and not scopes.null_count
        and batch.schema.field("outcome").type in _RUN_TYPES
    )


def conform(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with the :data:`OPTIONAL_LOG_COLUMNS` it lacks added as nulls
    (rows of a log, or an export, made before they existed)."""
    names = batch.schema.names
    for name in OPTIONAL_LOG_COLUMNS:
        if name not in names:
            batch = batch.append_column(
                LOG_SCHEMA.field(name), pa.nulls(batch.num_rows, LOG_SCHEMA.field(name).type)
            )
    return batch


def _as_batch(batch: Any) -> pa.RecordBatch:
    if isinstance(batch, pa.RecordBatch):
        return batch
    if type(batch).__module__.startswith("pandas"):
        return pa.RecordBatch.from_pandas(batch, preserve_index=False)
    raise ReplaySourceError(
        f"expected Arrow record batches or pandas DataFrames of log rows, not "
        f"{type(batch).__name__}",
        source="input batch",
    )


def replay_batches(
    batches: Iterable[pa.RecordBatch | Any],
    rules: Rules,
    *,
    order: Order = "scope",
    only: Collection[str] | None = None,
    run_actions: bool = False,
    batch_rows: int = 32_768,
) -> Iterator[pa.RecordBatch]:
    """Replay log rows and yield detections: the per-partition step.

    ``batches`` are record batches (or pandas DataFrames) with the
    :data:`LOG_SCHEMA` columns, in the ``order`` described in the module docs;
    ``rules`` a rules reference, detector or callable; ``only`` the names of the
    rules to replay (default: every enabled rule, which for ``order="scope"``
    must all flush per transaction). Yields :data:`DETECTION_SCHEMA` batches of
    up to about ``batch_rows`` detections, and nothing for a partition without
    detections. Conditions are evaluated; actions run only with
    ``run_actions``.

    Raises :class:`~sentinel.errors.RuleReferenceError` for rules that cannot
    be loaded and :class:`~sentinel.errors.ReplayError` for rules that cannot
    replay in ``order`` (on the first ``next()``: this is a generator).

    >>> import pyarrow as pa
    >>> from sentinel import LocalEventDetector
    >>> det = LocalEventDetector()
    >>> _ = det.explicit("order"); _ = det.explicit("payment")
    >>> _ = det.rule("paid", "order ; payment", action=print)
    >>> rows = pa.table({"scope": ["tx1"] * 2, "t_occ": [1, 2], "event": ["order", "payment"],
    ...                  "ts": [0.0, 1.0], "detected_ts": [0.0, 1.0],
    ...                  "source_class": [None, None], "source_key": [None, None],
    ...                  "params": ['{"id":7}', '{"id":7}'], "outcome": ["committed"] * 2},
    ...                 schema=LOG_SCHEMA)
    >>> [d["constituent_t_occs"] for d in pa.Table.from_batches(
    ...     replay_batches(rows.to_batches(), det)).to_pylist()]
    [[1, 2]]
    """
    replayer = Replayer(rules, order=order, only=only, run_actions=run_actions)
    for batch in batches:
        replayer.feed(batch)
        if replayer.pending >= batch_rows:
            yield replayer.take()
    replayer.finish()
    if replayer.pending:
        yield replayer.take()
