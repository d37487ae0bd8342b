"""Detection scopes: per-transaction state, flushing, savepoints, threads, and
rules that opt out of flushing."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sentinel import LocalEventDetector
from sentinel.errors import ScopeError


@pytest.fixture
def det() -> LocalEventDetector:
    d = LocalEventDetector()
    for name in ("E1", "E2", "E3"):
        d.explicit(name)
    return d


def test_flush_one_scope_keeps_the_others(det: LocalEventDetector) -> None:
    det.rule("r", "E1 ; E2", action=print, context="chronicle")
    a, b = det.begin(), det.begin()
    with det.use_scope(a):
        det.signal("E1")
    with det.use_scope(b):
        det.signal("E1")
    det.flush(a)
    assert (det.stored(a), det.stored(b)) == (0, 1)
    det.flush()
    assert det.stored() == 0


def test_flushed_state_leaves_no_trace_in_later_detections(det: LocalEventDetector) -> None:
    seen: list[Any] = []
    det.rule("r", "E1 ; E2", action=seen.append, context="cumulative")
    det.signal("E1")
    det.flush()
    det.signal("E1")
    det.signal("E2")
    (occ,) = seen
    assert [c.t_occ for c in occ.constituents] == [2, 3]


class TestSavepoints:
    def test_rollback_removes_what_happened_since(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        det.rule("r", "E1 ; E2", action=seen.append, context="chronicle")
        with det.transaction() as scope:
            det.signal("E1", n=1)
            sp = scope.savepoint()
            det.signal("E1", n=2)
            scope.rollback_to(sp)
            det.signal("E2")
            det.signal("E2")
        assert [o.values("n") for o in seen] == [(1,)]

    def test_release_keeps_it(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        det.rule("r", "E1 ; E2", action=seen.append, context="chronicle")
        with det.transaction() as scope:
            sp = scope.savepoint()
            det.signal("E1", n=2)
            scope.release(sp)
            det.signal("E2")
        assert [o.values("n") for o in seen] == [(2,)]

    def test_nested_savepoints_and_the_deferred_net_effect(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        det.rule("d", "E1", action=seen.append, coupling="deferred", context="chronicle")
        with det.transaction() as scope:
            det.signal("E1", n=1)
            outer = scope.savepoint()
            det.signal("E1", n=2)
            inner = scope.savepoint()
            det.signal("E1", n=3)
            scope.rollback_to(inner)
            det.signal("E1", n=4)
            scope.release(outer)
        assert seen[0].values("n") == (1, 2, 4)

    def test_rolling_back_the_outer_discards_the_inner(self, det: LocalEventDetector) -> None:
        with det.transaction() as scope:
            outer = scope.savepoint()
            inner = scope.savepoint()
            scope.rollback_to(outer)
            with pytest.raises(ScopeError, match="unknown or finished savepoint"):
                scope.rollback_to(inner)

    def test_partitions_are_restored(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        det.rule("r", "(E1 ; E2) by k", action=seen.append, context="chronicle")
        with det.transaction() as scope:
            det.signal("E1", k="a")
            sp = scope.savepoint()
            det.signal("E1", k="b")
            det.signal("E2", k="a")  # consumes a's initiator: detection 1
            scope.rollback_to(sp)  # a's initiator is back, b's is gone
            det.signal("E2", k="a")  # detection 2
            det.signal("E2", k="b")  # nothing
        assert [o.values("k") for o in seen] == [("a", "a"), ("a", "a")]
        # the graph's own occurrence (not a copy) initiated both: restored by the rollback
        assert seen[0][2][0] is seen[1][2][0]


def test_threads_never_combine_each_others_occurrences(det: LocalEventDetector) -> None:
    seen: list[Any] = []
    lock = threading.Lock()

    def record(occ: Any) -> None:
        with lock:
            seen.append(occ)

    det.rule("r", "E1 ; E2", action=record, context="chronicle")
    barrier = threading.Barrier(8)

    def work(n: int) -> None:
        barrier.wait()
        for i in range(200):
            with det.transaction():
                det.signal("E1", thread=n, i=i)
                det.signal("E2", thread=n, i=i)
                if i % 3 == 0:
                    det.signal("E1", thread=n, i=i)  # left over at commit

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 * 200
    for occ in seen:
        first, second = occ.constituents
        assert first.scope == second.scope
        assert (first.params["thread"], first.params["i"]) == (
            second.params["thread"],
            second.params["i"],
        )
    assert det.stored() == 0


def test_rule_that_opts_out_of_flushing_spans_transactions(det: LocalEventDetector) -> None:
    spanning: list[Any] = []
    flushed: list[Any] = []
    det.rule("spans", "E1 ; E2", action=spanning.append, flush=False)
    det.rule("flushed", "E1 ; E2", action=flushed.append)
    with det.transaction():
        det.signal("E1")
    with det.transaction():
        det.signal("E2")
    assert len(spanning) == 1 and flushed == []
    a, b = spanning[0].constituents
    assert a.scope != b.scope


def test_flush_everything_includes_process_wide_state(det: LocalEventDetector) -> None:
    spanning: list[Any] = []
    det.rule("spans", "E1 ; E2", action=spanning.append, flush=False)
    det.signal("E1")
    det.flush()
    det.signal("E2")
    assert spanning == []


def test_rules_come_and_go_while_other_threads_signal() -> None:
    # A signal must not reach a handler that a concurrent rule deletion destroyed.
    det = LocalEventDetector()
    det.explicit("b")
    det.explicit("e")
    stop = threading.Event()
    errors: list[BaseException] = []

    def toggle() -> None:
        while not stop.is_set():
            det.rule("t", "b ^ e", action=lambda o: None).delete()

    def signal() -> None:
        try:
            for _ in range(3000):
                det.signal("b")
                det.signal("e")
        except BaseException as e:  # pragma: no cover - the failure being tested
            errors.append(e)
        finally:
            stop.set()

    threads = [threading.Thread(target=toggle), threading.Thread(target=signal)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_nested_partitions_work_after_a_savepoint_rollback() -> None:
    det = LocalEventDetector()
    for name in ("order", "ship", "pay"):
        det.explicit(name)
    seen: list[Any] = []
    det.rule(
        "r",
        "((order ; ship) by order_id ; pay) by customer",
        action=seen.append,
        context="chronicle",
    )
    with det.transaction() as scope:
        det.signal("order", customer="a", order_id=1)
        sp = scope.savepoint()
        det.signal("order", customer="a", order_id=2)
        scope.rollback_to(sp)
        # the restored inner partition must deliver to the restored outer one
        det.signal("ship", customer="a", order_id=1)
        det.signal("pay", customer="a", order_id=1)
    assert len(seen) == 1


def _signalled_in_main_thread(det: LocalEventDetector) -> None:
    det.signal("E1")


def _signalled_from_another_thread(det: LocalEventDetector) -> None:
    t = threading.Thread(target=det.signal, args=("E1",))
    t.start()
    t.join()


def _signalled_in_asyncio_tasks(det: LocalEventDetector) -> None:
    import asyncio

    async def main() -> None:
        async def one() -> None:
            det.signal("E1")

        await asyncio.gather(one(), one())

    asyncio.run(main())


def _signalled_by_a_rule(det: LocalEventDetector) -> None:
    det.rule("cascade", "E1", action=lambda occ: det.signal("E2"))
    det.signal("E1")


def _signalled_in_a_transaction(det: LocalEventDetector) -> None:
    with det.transaction():
        det.signal("E1")


@pytest.mark.parametrize(
    "use",
    [
        _signalled_in_main_thread,
        _signalled_from_another_thread,
        _signalled_in_asyncio_tasks,
        _signalled_by_a_rule,
        _signalled_in_a_transaction,
    ],
    ids=lambda f: f.__name__.lstrip("_"),
)
def test_a_detector_is_freed_once_nothing_refers_to_it(use: Any) -> None:
    """Signalling leaves nothing behind in the thread or its context that keeps
    the detector (its rules, their actions, its pending state) alive: the
    process scope's per-thread view once lived in a context variable, which
    lives as long as the thread."""
    import gc
    import weakref

    det = LocalEventDetector()
    for name in ("E1", "E2"):
        det.explicit(name)
    det.rule("r", "E1 ; E2", action=lambda occ: None, context="chronicle")
    use(det)
    ref = weakref.ref(det)
    del det
    gc.collect()
    assert ref() is None


def test_a_transaction_begun_while_a_rule_is_disabled_waits_for_the_lock() -> None:
    """Disabling a rule walks every open scope's store under the detector's
    lock; ``begin()`` added its scope to that set without it, and the walk
    failed with "Set changed size during iteration" (the rule left disabled,
    nobody told). Here another thread begins a transaction in mid-walk."""
    import weakref

    det = LocalEventDetector()
    det.explicit("A")
    det.explicit("B")
    rule = det.rule("r", "A ; B", action=lambda o: None)
    kept = [det.begin() for _ in range(3)]
    began = threading.Event()

    class Walked(weakref.WeakSet):  # type: ignore[type-arg]
        def __iter__(self) -> Any:
            for i, s in enumerate(super().__iter__()):
                if i == 0 and not began.is_set():
                    t = threading.Thread(target=lambda: (kept.append(det.begin()), began.set()))
                    t.start()
                    t.join(0.3)  # it waits for the lock, or adds to the set now
                yield s

    walked = Walked(det._scopes)
    det._scopes = walked
    rule.disable()
    assert not rule.enabled
    assert began.wait(5)  # it began once the walk was over
    assert len(list(walked)) == len(kept) == 4


def test_a_savepoint_snapshots_and_restores_the_store_under_the_detectors_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The clock's thread fires a transaction's timers into its store under
    the detector's lock; a savepoint's snapshot (and a plain restore) did not
    take it, and failed with "dictionary changed size during iteration" when a
    tick released a partition meanwhile."""
    from sentinel.detector.scopes import Store

    det = LocalEventDetector()
    det.explicit("A")
    det.rule("r", "(A ; A) by k", action=lambda o: None)
    held: list[bool] = []
    for name in ("snapshot", "restore"):
        real = getattr(Store, name)

        def checked(self: Any, *args: Any, _real: Any = real) -> Any:
            held.append(det._lock._is_owned())  # type: ignore[attr-defined]
            return _real(self, *args)

        monkeypatch.setattr(Store, name, checked)
    with det.transaction() as scope:
        det.signal("A", k=1)
        token = scope.savepoint()
        det.signal("A", k=2)
        scope.rollback_to(token)
    assert held == [True, True]
