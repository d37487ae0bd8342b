"""Why a rule fired: the detection behind a row of the rule-firing log.

The rule-firing log keeps, for each rule run, the ids of the primitive
occurrences it combined, not how the operators combined them. Replay knows:
:func:`detections_for` replays the transactions of the given firings through
the application's rules (actions off, as always in replay) and returns, for each
firing, the detection replay made for it, whose ``parts`` nest as the operators
combined them (``sentinel log firings --rules`` prints them as a tree).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sentinel.log import Firing, LogReader
from sentinel.log.tables import DEFAULT_PREFIX
from sentinel.occurrence import finished
from sentinel.replay.batch import Replayer
from sentinel.replay.recorder import fill
from sentinel.replay.rules import Rules, resolve_rules
from sentinel.replay.sources import log_batch

__all__ = ["detections_for"]

#: What identifies a detection in the log: rule, scope, constituents' ids.
Key = tuple[str, str, tuple[tuple[str, int], ...]]


def _key(rule: str, scope: Any, occ: Any) -> Key:
    return (rule, str(scope), tuple((str(c.scope), c.t_occ) for c in occ.constituents))


def detections_for(
    source: str | sa.URL | Engine,
    firings: Sequence[Firing],
    rules: Rules,
    *,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> dict[int, Any]:
    """For each of ``firings`` (read from the log of ``source``), by firing
    ``id``: the detection replay makes for it with ``rules`` (an
    :class:`~sentinel.Occurrence` or a :class:`~sentinel.CompositeOccurrence`,
    parameters decoded). A firing replay does not reproduce (its rule was changed
    or deleted since) is left out; firings inside rolled-back savepoints are
    reproduced (the log says where each savepoint was rolled back).

    Rules that flush (the default) replay only the firings' transactions; rules
    with ``flush=False`` replay the events they listen to across the whole log.
    Raises what :func:`sentinel.replay.replay` raises for bad rules or sources.
    """
    det = resolve_rules(rules)
    names = {f.rule for f in firings} & set(det.rules)
    if not names:
        return {}
    scoped = sorted(n for n in names if det.rules[n].flush)
    spanning = sorted(n for n in names if not det.rules[n].flush)
    found: dict[Key, Any] = {}
    with LogReader(source, schema=schema, prefix=prefix) as reader:
        if scoped:
            scopes = sorted({f.scope for f in firings if f.rule in scoped})
            found.update(_replay(reader, det, scoped, "scope", scopes))
        if spanning:
            found.update(_replay(reader, det, spanning, "t_occ", None))
    out: dict[int, Any] = {}
    for f in firings:
        occ = found.get((f.rule, f.scope, tuple((s, t) for s, t in f.constituents)))
        if occ is not None and f.id is not None:
            out[f.id] = occ
    return out


def _replay(
    reader: LogReader,
    det: Any,
    only: Iterable[str],
    order: Any,
    scopes: list[str] | None,
) -> dict[Key, Any]:
    replayer = Replayer(det, order=order, only=list(only))
    events = replayer.needed_events()
    for chunk in reader.chunks(scopes=scopes, events=events, order=order):
        replayer.feed(log_batch(chunk))
    replayer.finish()
    found: dict[Key, Any] = {}
    for rule, _coupling, scope, occ, _ok, _error in replayer.detector.scheduler.records:
        occ = finished(occ)
        fill(occ)
        found[_key(rule, scope, occ)] = occ
    return found
