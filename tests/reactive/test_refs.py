"""Object references: process-local ones for transient objects, held weakly, so
a garbage-collected object (or class) leaves nothing behind."""

from __future__ import annotations

import copy
import gc
import pickle
import weakref
from typing import Any

import pytest

from sentinel import LocalEventDetector, ObjectRef, Reactive, event, object_ref, on, resolve
from sentinel.reactive.refs import LOCAL
from tests.reactive.conftest import Recorder, fired


@pytest.fixture
def Stock(det: LocalEventDetector) -> type:
    class Stock(Reactive, detector=det):
        @event
        def set_price(self, price: float) -> None:
            self.price = price

    return Stock


def test_local_references(Stock: Any) -> None:
    a, b = Stock(), Stock()
    ra, rb = object_ref(a), object_ref(b)
    assert ra == object_ref(a) and ra is object_ref(a)
    assert ra != rb
    assert ra.transient and ra.class_name == "Stock"
    assert ra.key[0] == "local"
    assert repr(ra) == f"<Stock ~{ra.key[1]}>"
    assert resolve(ra) is a and resolve(rb) is b


def test_references_are_plain_values(Stock: Any) -> None:
    r = object_ref(Stock())
    assert pickle.loads(pickle.dumps(r)) == r
    assert resolve(ObjectRef("Stock", ("local", -1))) is None
    with pytest.raises(TypeError, match="ObjectRef"):
        resolve("Stock 1")  # type: ignore[arg-type]


def test_a_copy_is_another_object(Stock: Any) -> None:
    a = Stock()
    assert object_ref(copy.copy(a)) != object_ref(a)
    assert object_ref(copy.deepcopy(a)) != object_ref(a)


def test_a_collected_object_leaves_nothing_behind(det: LocalEventDetector, Stock: Any) -> None:
    rec = Recorder(det)
    gc.collect()
    before = len(LOCAL)
    a = Stock()
    a.set_price(1.0)  # signalled: a has a reference now
    got = fired(det, "inst", on(a).set_price.end)
    ref = object_ref(a)
    assert len(LOCAL) == before + 1
    alive = weakref.ref(a)
    del a
    gc.collect()
    assert alive() is None  # neither the rule nor the log kept the object
    assert len(LOCAL) == before
    assert resolve(ref) is None
    # The reference is never reused: a new object gets a new number, and the
    # rule on the collected object never matches it.
    b = Stock()
    assert object_ref(b) != ref
    b.set_price(2.0)
    assert got == []
    assert rec.occurrences[0].source == ref  # occurrences keep the value


def test_a_collected_class_leaves_nothing_behind(det: LocalEventDetector) -> None:
    def make() -> weakref.ref[type]:
        class Temp(Reactive, detector=det):
            @event
            def m(self) -> None: ...

        class SubTemp(Temp):
            pass

        r = det.rule("r", Temp.m.end, action=lambda o: None)
        SubTemp().m()
        r.delete()
        return weakref.ref(SubTemp)

    alive = make()
    gc.collect()
    assert alive() is None


def test_objects_without_a_dict(det: LocalEventDetector) -> None:
    class Slotted(Reactive, detector=det):
        __slots__ = ("__weakref__", "price")

        @event
        def set_price(self, price: float) -> None:
            self.price = price

    got = fired(det, "r", Slotted.set_price.end)
    s = Slotted()
    s.set_price(1.0)
    assert got[0].source == object_ref(s) and object_ref(s).transient
    assert not hasattr(s, "__dict__")


_FIRST_REF = """
from sentinel import LocalEventDetector, Reactive, object_ref
class Stock(Reactive, detector=LocalEventDetector()):
    pass
print(repr(object_ref(Stock()).key))
"""


def test_two_processes_never_share_a_local_reference() -> None:
    """Each process numbers its transient objects from 1; the key also holds a
    token of the process, so the first object of two runs (two writers of one
    log, read together by the global detector or replay) are two references,
    not one object seen twice."""
    import ast
    import subprocess
    import sys

    keys = [
        ast.literal_eval(
            subprocess.run(
                [sys.executable, "-c", _FIRST_REF], capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(2)
    ]
    assert keys[0][:2] == keys[1][:2] == ("local", 1)  # each run's first object
    assert keys[0] != keys[1]  # and yet two references


def test_a_forked_child_makes_references_of_its_own(Stock: Any) -> None:
    import os

    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    before = object_ref(Stock())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its new object's key and leave at once
        try:
            os.write(write, repr(object_ref(Stock()).key).encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 1000).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert before.key[2] not in child  # another token than the parent's
    assert object_ref(Stock()).key[2] == before.key[2]  # the parent keeps its own


def test_logs_written_before_the_token_still_read_as_transient() -> None:
    assert ObjectRef("Draft", ("local", 9)).transient
    assert ObjectRef("Draft", ("local", 9, "0123456789ab")).transient
    assert not ObjectRef("Draft", (9,)).transient
