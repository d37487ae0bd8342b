"""A :class:`~.detect.CommitFeeder`'s detection state as bytes, and back.

The Spark streaming job (:mod:`.streaming`) keeps, per group of keys, what
the group's detector remembers (orders waiting for their payment), not the
rows it read: :func:`dump` turns a feeder into bytes, :func:`load` makes a
feeder of the same rules that detects from there as the dumped one would.
The state is what the rules keep across transactions (the process-wide store
of ``flush=False`` rules, one sub-store per key value of ``E by key``), the
last commit fed, the logical clock (the last ``t_occ``) and the log's clock.
Under a lifespan (``det.rule(..., lifespan=...)``, an event class's) the
store holds only what has not expired yet, so the state is bounded; a loaded
feeder registers what it holds for purging again.

What lives beside the store cannot be dumped: the timers of temporal events
(``not_within``, ``every``...) and the buffers of rules in occurrence-time
order (``lateness=``). :func:`dumpable` says whether a rule set has neither.
"""

from __future__ import annotations

import hashlib
import pickle
import weakref
import zlib
from math import inf
from typing import Any

from sentinel.detector.scopes import Store
from sentinel.errors import GlobalDetectorError
from sentinel.global_detector.detect import CommitFeeder, is_temporal
from sentinel.rules import LocalEventDetector
from sentinel.temporal import VirtualClock

__all__ = ["dump", "dumpable", "load", "retained"]

#: The format of :func:`dump`'s bytes (the first item of the pickled tuple):
#: 2 adds the rules' layout (:func:`layout`).
FORMAT = 2
_BITEMPORAL = "_sentinel_bitemporal"  # sentinel.bitemporal.service._ATTR
_LAYOUTS: weakref.WeakKeyDictionary[LocalEventDetector, str] = weakref.WeakKeyDictionary()


def layout(rules: LocalEventDetector) -> str:
    """A digest of the event graph a feeder of ``rules`` detects with: each
    node's number, expression, mode and region. The dumped state is the nodes'
    state by number: it means the same only to rules of the same layout."""
    digest = _LAYOUTS.get(rules)
    if digest is None:
        graph = CommitFeeder(rules)._start(0.0).graph
        graph.ensure()
        nodes = [(h.hid, *map(str, key)) for key, h in graph.handlers.items()]
        nodes += [(hid, *map(str, key)) for key, hid in graph.routers.items()]
        text = repr(sorted(nodes)).encode("utf-8", "surrogatepass")
        digest = _LAYOUTS[rules] = hashlib.sha256(text).hexdigest()
    return digest


def dumpable(rules: LocalEventDetector) -> bool:
    """Whether a feeder of ``rules`` can be dumped: no enabled rule has
    temporal events (timers) or is detected in occurrence-time order."""
    for rule in rules.rules.values():
        if not rule.enabled:
            continue
        if is_temporal(rule.event) or getattr(rule, "lateness", None) is not None:
            return False
    return True


class _Parts(dict):  # type: ignore[type-arg]
    """A router's partitions (key value -> sub-store), dumped: a dict of plain dicts."""

    __slots__ = ()


def _plain(store: Store) -> dict[int, list[Any]]:
    """``store`` (and its partitions, however deeply nested) as plain dicts and lists."""
    out: dict[int, list[Any]] = {}
    todo: list[tuple[Store, dict[int, list[Any]]]] = [(store, out)]
    while todo:
        src, into = todo.pop()
        for hid, state in src.items():
            items: list[Any] = []
            for item in state:
                if isinstance(item, dict):
                    parts = _Parts()
                    for key, sub in item.items():
                        parts[key] = {}
                        todo.append((sub, parts[key]))
                    item = parts
                items.append(item)
            if any(items):
                into[hid] = items
    return out


def _rebuild(plain: dict[int, list[Any]], target: Store) -> list[tuple[Store, Any, Any]]:
    """Fill ``target`` from :func:`_plain`'s dicts; returns every store made
    or filled, with the router and key it sits under (``None`` for ``target``)."""
    made: list[tuple[Store, Any, Any]] = [(target, None, None)]
    todo: list[tuple[dict[int, list[Any]], Store]] = [(plain, target)]
    factories = target.factories
    while todo:
        src, into = todo.pop()
        for hid, items in src.items():
            state: list[Any] = []
            for item in items:
                if isinstance(item, _Parts):
                    parts = {}
                    for key, sub in item.items():
                        store = parts[key] = Store(factories, into)
                        made.append((store, hid, key))
                        todo.append((sub, store))
                    item = parts
                state.append(item)
            into[hid] = state
    return made


def dump(feeder: CommitFeeder) -> bytes:
    """The detection state of ``feeder`` (whose rules are :func:`dumpable`) as bytes."""
    if not dumpable(feeder.rules):
        raise GlobalDetectorError(
            "the detection state of rules with temporal events or in occurrence-time "
            "order cannot be dumped (their timers and buffers live beside it)"
        )
    det = feeder.detector
    if det is None:
        body: Any = None
    else:
        clock = det.wall_clock
        assert isinstance(clock, VirtualClock)
        body = (
            det.clock,
            clock.now(),
            _plain(det.graph.global_store),
            _plain(det.process_scope.store),
        )
    data = (FORMAT, layout(feeder.rules), feeder.position, feeder.log_time, body)
    return zlib.compress(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL), 1)


def load(rules: LocalEventDetector, blob: bytes, **options: Any) -> CommitFeeder:
    """A new feeder of ``rules`` (``options``: :class:`~.detect.CommitFeeder`'s)
    standing where the feeder :func:`dump` made ``blob`` of stood. Raises
    :class:`~sentinel.errors.GlobalDetectorError` when ``rules`` are not laid
    out as the dumped feeder's were (:func:`layout`: a rule added, changed or
    removed since) or ``blob`` is of another format."""
    data = pickle.loads(zlib.decompress(blob))
    fmt = data[0]
    if fmt != FORMAT:
        raise GlobalDetectorError(
            f"detection state of format {fmt!r}, not {FORMAT}: saved by another version of "
            "sentinel (a Spark checkpoint: start the query with a new checkpoint)"
        )
    _fmt, made, position, log_time, body = data
    if made != layout(rules):
        raise GlobalDetectorError(
            "the detection state was saved for other rules (a rule was added, changed or "
            "removed since, or the events were defined in another order): the state of "
            "one rule's nodes would be read as another's. A Spark checkpoint: run these "
            "rules with a new checkpoint and output (they read the log from its first "
            "commit), or run the rules the checkpoint was made with"
        )
    feeder = CommitFeeder(rules, **options)
    feeder.position = position
    feeder.log_time = log_time
    if body is None:
        return feeder
    t, now, shared, process = body
    det = feeder._start(now)
    det._t = t
    if det.graph.dirty:  # wired at the first signal: the lifespans' policies are made then
        det.graph.rewire()
    made = _rebuild(shared, det.graph.global_store)
    _rebuild(process, det.process_scope.store)
    svc = det.__dict__.get(_BITEMPORAL)
    if svc is not None and svc.lifespans.policies:
        _register(svc.lifespans, made)
    return feeder


def _register(lifespans: Any, made: list[tuple[Store, Any, Any]]) -> None:
    """Register the loaded stores that hold occurrences with a lifespan for
    the tick after their earliest expiration (a store is registered when an
    occurrence enters it: these entered another detector)."""
    policies = lifespans.policies
    for store, rid, key in made:
        if not any(hid in policies for hid in store):
            continue
        earliest = min((e for _, e in lifespans.stored_expirations(store)), default=inf)
        if earliest < inf:
            lifespans.push(store, earliest, rid, key)


def retained(feeder: CommitFeeder) -> int:
    """How many occurrence entries the feeder's detection state holds."""
    det = feeder.detector
    return 0 if det is None else int(det.stored())
