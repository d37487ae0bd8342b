"""The occurrence's two forms: plain tuples with positional parameters inside the
graph (which CPython's cyclic garbage collector leaves alone), ``Occurrence``
objects where they leave it."""

from __future__ import annotations

import gc
import pickle
from types import MappingProxyType
from typing import Any

from sentinel import Context, LocalEventDetector
from sentinel.detector.events import listen
from sentinel.occurrence import (
    CompositeOccurrence,
    Occurrence,
    finished,
    has_param,
    leaves,
    names_of,
    param,
    params_of,
    split_params,
)


def keyed() -> tuple[LocalEventDetector, list[Any]]:
    det = LocalEventDetector()
    det.explicit("A")
    det.explicit("B")
    kept: list[Any] = []
    det.rule("r", "(A ; B) by key", action=kept.append, context=Context.CHRONICLE)
    return det, kept


def pending(det: LocalEventDetector) -> list[Any]:
    """The primitive occurrences the graph's stores hold."""
    out: list[Any] = []
    stack: list[Any] = [det.process_scope.store, det.graph.global_store]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)) and not (type(x) is tuple and len(x) == 8):
            stack.extend(x)
        elif type(x) is tuple and len(x) == 8:
            out.append(x)
        elif hasattr(x, "items"):
            stack.extend(x.values())
        elif hasattr(x, "__iter__") and not isinstance(x, (str, bytes)):
            stack.extend(x)
    return out


def test_pending_occurrences_and_kept_detections_leave_the_collector_alone() -> None:
    det, kept = keyed()
    det.signal("A", key=1)
    det.signal("A", key=2)
    det.signal("B", key=1)
    # A collection untracks a plain tuple whose items it has found untracked
    # already, and it meets a container before what it holds: one level of
    # nesting per collection (values, occurrence, a detection's parts).
    for _ in range(3):
        gc.collect()
    (waiting,) = pending(det)
    assert waiting[0] == "A" and param(waiting, "key") == 2
    assert not gc.is_tracked(waiting)
    (detection,) = kept
    assert type(detection) is CompositeOccurrence  # what the action received
    assert not gc.is_tracked(detection[2])  # its parts: the graph's plain tuples
    assert all(type(p) is tuple and not gc.is_tracked(p) for p in detection[2])


def test_an_occurrence_leaves_the_graph_as_an_occurrence_object() -> None:
    det, kept = keyed()
    seen: list[Any] = []
    det.rule("on_a", "A", action=seen.append)
    returned = det.signal("A", key=1, note="x")
    det.signal("B", key=1)
    assert type(returned) is Occurrence and returned.params == {"key": 1, "note": "x"}
    (a,) = seen
    assert type(a) is Occurrence and a == returned
    (detection,) = kept
    assert [type(p) for p in detection.parts] == [Occurrence, Occurrence]
    assert [type(c) for c in detection.constituents] == [Occurrence, Occurrence]
    assert type(detection.terminator) is Occurrence
    assert detection.values("key") == (1, 1)
    assert detection.of("A")[0].params["note"] == "x"


def test_parameters_are_stored_positionally_under_shared_names() -> None:
    det, _ = keyed()
    one = det.signal("A", key=1, note="x")
    two = det.signal("A", key=2, note="y")
    assert one is not None and two is not None
    assert one[5] == (1, "x") and two[5] == (2, "y")
    assert one[7] is two[7] == ("key", "note")  # one names tuple for both
    assert names_of(("key", "note")) is one[7]


def test_the_readers_read_both_forms() -> None:
    positional = Occurrence("E", 1, 0.0, params={"a": 1, "b": None})
    mapping = tuple.__new__(Occurrence, ("E", 1, 0.0, 0.0, None, {"a": 1, "b": None}, "s", None))
    for occ in (positional, mapping):
        assert params_of(occ) == {"a": 1, "b": None}
        assert param(occ, "a") == 1 and param(occ, "c", "none") == "none"
        assert has_param(occ, "b") and not has_param(occ, "c")
    assert split_params({}) == ((), ())
    assert split_params(MappingProxyType({"x": 2})) == ((2,), ("x",))


def test_equality_reads_parameters_as_a_mapping() -> None:
    ab = Occurrence("E", 1, 0.0, params={"a": 1, "b": 2}, scope="s")
    ba = Occurrence("E", 1, 0.0, params={"b": 2, "a": 1}, scope="s")
    other = Occurrence("E", 1, 0.0, params={"a": 1, "b": 3}, scope="s")
    assert ab == ba and hash(ab) == hash(ba)
    assert ab != other
    assert ab != ("E", 1)


def test_an_occurrence_pickled_with_seven_fields_loads_with_eight() -> None:
    old = ("E", 3, 1.0, 1.0, None, {"k": 1}, "s")  # before positional parameters
    occ = pickle.loads(pickle.dumps(Occurrence("E", 3, 1.0, params={"k": 1}, scope="s")))
    assert occ == Occurrence("E", 3, 1.0, params={"k": 1}, scope="s")
    from sentinel.occurrence import _rebuild_occurrence

    assert _rebuild_occurrence(old) == occ and len(_rebuild_occurrence(old)) == 8


def test_finished_converts_each_form_once() -> None:
    prim = ("E", 1, 0.0, 0.0, None, (), "s", ())
    comp = ("E ; F", 2, (prim,))
    assert type(finished(prim)) is Occurrence and type(finished(comp)) is CompositeOccurrence
    made = finished(prim)
    assert finished(made) is made


def test_a_detection_with_unhashable_parameters_hashes_and_equals_its_rebuilt_copy() -> None:
    det, kept = keyed()
    det.signal("A", key=1, data=MappingProxyType({"x": [1]}))  # a database event's kind
    det.signal("B", key=1, rows=[1, 2])
    (c,) = kept
    copy = CompositeOccurrence(c.expression, c.t_occ, c.parts)  # parts as Occurrence objects
    assert c == copy and hash(c) == hash(copy) and copy in {c}
    later = det.signal("B", key=1)
    assert later is not None and c != later


def test_a_mask_on_a_primitive_sees_what_the_occurrence_listener_made() -> None:
    det = LocalEventDetector()
    det.explicit("E")
    fired: list[Any] = []
    det.rule("open", "E[status == 'open']", action=fired.append)

    def normalize(occ: Any) -> Any:  # as the event log's listener does with values
        return (*occ[:5], tuple(str(v).lower() for v in occ[5]), occ[6], occ[7])

    listen(det, "occurrence", normalize)
    det.signal("E", status="OPEN")
    assert [o.params["status"] for o in fired] == ["open"]


def test_a_listener_returning_something_else_replaces_nothing() -> None:
    det = LocalEventDetector()
    det.explicit("E")
    fired: list[Any] = []
    det.rule("r", "E", action=fired.append)
    listen(det, "occurrence", lambda occ: True)
    listen(det, "occurrence", lambda occ: ("not", "an", "occurrence"))
    det.signal("E", k=1)
    assert [o.params for o in fired] == [{"k": 1}]


def test_what_follows_a_sink_in_a_leaf_keeps_the_graphs_tuple() -> None:
    det = LocalEventDetector()
    for name in ("A", "B", "C"):
        det.explicit(name)
    either: list[Any] = []
    pairs: list[Any] = []
    det.rule("either", "A | B", action=either.append)  # a sink first in A's leaf
    det.rule("pair", "A ; C", action=pairs.append)
    det.signal("A", k=1)
    assert [type(o) for o in pending(det)] == [tuple]
    det.signal("C", k=2)
    (pair,) = pairs
    assert [type(p) for p in pair[2]] == [tuple, tuple]
    assert type(either[0]) is Occurrence


def test_leaves_are_the_constituents_in_the_graphs_form() -> None:
    """``leaves`` gives what ``constituents`` holds, in the same (``t_occ``)
    order, as the graph's tuples; a composite's ``scope`` is its terminator's,
    read without making it an ``Occurrence``."""
    det = LocalEventDetector()
    for name in ("A", "B", "C"):
        det.explicit(name)
    kept: list[Any] = []
    det.rule("r", "(A ; B) ; (C ^ A)", action=kept.append, context=Context.CHRONICLE)
    with det.transaction() as scope:
        det.signal("A", n=1)
        det.signal("B", n=2)
        det.signal("C", n=3)
        det.signal("A", n=4)
    (occ,) = kept
    got = leaves(occ)
    assert all(type(o) is tuple and len(o) == 8 for o in got)
    assert [finished(o) for o in got] == list(occ.constituents)
    assert [o[1] for o in got] == sorted(o[1] for o in got)
    # the first A is in both operands (chronicle: C ^ A takes it too), so twice
    assert [params_of(o)["n"] for o in got] == [1, 1, 2, 3]
    assert occ.scope == scope.id == occ.terminator.scope
    prim = det.signal("A", n=5)
    assert leaves(prim) == [prim]
