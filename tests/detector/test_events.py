"""The detector's events (sentinel.detector.events): one catalogue, one
listen/remove pair, plug-ins installed from one list, replaceable parts as
declared class attributes (issue 30, item 1)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sentinel import LocalEventDetector
from sentinel.detector import EventDetector, Scope, plugins
from sentinel.detector.events import EVENTS, Dispatch, Listeners, contains, listen, remove
from sentinel.errors import UnknownEventError
from sentinel.replay.recorder import RecordingScheduler, ReplayDetector
from sentinel.rules import Scheduler

ROOT = Path(__file__).resolve().parents[2]


def _noop(*args: Any) -> None:
    pass


def test_listen_calls_the_listener_and_remove_stops_it() -> None:
    det = EventDetector()
    seen: list[Scope | None] = []
    listen(det, "flush", seen.append)
    assert contains(det, "flush", seen.append)
    det.flush()
    remove(det, "flush", seen.append)
    det.flush()
    assert seen == [None]
    assert not contains(det, "flush", seen.append)
    remove(det, "flush", seen.append)  # not listening: nothing


@pytest.mark.parametrize("name", sorted(EVENTS))
def test_a_listener_added_and_removed_leaves_no_cost_behind(name: str) -> None:
    det = LocalEventDetector()
    before = getattr(det.dispatch, name)
    listen(det, name, _noop)
    assert getattr(det.dispatch, name) == (*before, _noop)
    remove(det, name, _noop)
    after = getattr(det.dispatch, name)
    assert after == before
    if not before:  # nobody listened: firing it is one truth test again
        assert not after and type(after) is Listeners


def test_an_unknown_event_name_is_refused_naming_the_catalogue() -> None:
    det = EventDetector()
    with pytest.raises(UnknownEventError, match="did you mean 'flush'") as err:
        listen(det, "flsh", _noop)
    assert "listen(detector, 'flsh', ...)" in str(err.value)
    with pytest.raises(UnknownEventError, match="the detector's events are prepare, "):
        remove(det, "on_commit", _noop)
    with pytest.raises(UnknownEventError, match="'nothing'"):
        contains(det, "nothing", _noop)
    with pytest.raises(TypeError, match="not an event detector"):
        listen(object(), "flush", _noop)
    with pytest.raises(TypeError, match="must be callable"):
        listen(det, "flush", "not a function")  # type: ignore[arg-type]


def test_the_catalogue_and_the_dispatch_agree() -> None:
    assert set(Dispatch.__slots__) == set(EVENTS)
    fresh = Dispatch()
    for name, spec in EVENTS.items():
        assert spec.name == name and spec.when and spec.arguments and spec.contract
        assert getattr(fresh, name) == ()


def test_the_architecture_page_lists_every_event() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## The detector's events", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \|", section, flags=re.MULTILINE)
    assert rows == list(EVENTS)


def test_insert_takes_over_a_decision_and_remove_gives_it_back() -> None:
    det = LocalEventDetector()
    det.explicit("E")
    det.rule("later", "E", action=_noop, coupling="detached")
    calls: list[str] = []

    def first(rule: Any, occ: Any, committed: bool) -> None:
        calls.append("first")

    def second(rule: Any, occ: Any, committed: bool) -> None:
        calls.append("second")

    listen(det, "run_detached", first)
    listen(det, "run_detached", second, insert=True)
    det.signal("E")
    remove(det, "run_detached", second)
    det.signal("E")
    assert calls == ["second", "first"]


def test_occurrence_listeners_tell_the_changed_event() -> None:
    det = EventDetector()
    changes: list[bool] = []
    listen(det, "changed", lambda: changes.append(det.has_listeners))
    listen(det, "occurrence", _noop)
    remove(det, "occurrence", _noop)
    assert changes == [True, False]


class _CountingScheduler(Scheduler):
    delivered = 0

    def deliver(self, items: list[Any], scope: Scope) -> None:
        type(self).delivered += 1
        super().deliver(items, scope)


class _CountingDetector(LocalEventDetector):
    scheduler_class = _CountingScheduler


def test_the_scheduler_is_a_declared_class_attribute() -> None:
    assert LocalEventDetector.scheduler_class is Scheduler
    assert ReplayDetector.scheduler_class is RecordingScheduler
    assert type(ReplayDetector().scheduler) is RecordingScheduler
    det = _CountingDetector()
    assert type(det.scheduler) is _CountingScheduler
    det.explicit("E")
    seen: list[Any] = []
    det.rule("r", "E", action=seen.append)
    det.signal("E")
    assert len(seen) == 1 and _CountingScheduler.delivered == 1
    # a replica keeps the declared part
    assert type(det.replica().scheduler) is _CountingScheduler


def test_every_plug_in_has_install() -> None:
    det = EventDetector()
    assert plugins.PLUGINS
    for name in plugins.PLUGINS:
        module = sys.modules[name]  # the first detector imported them
        assert callable(module.install), name
    assert len(det.dispatch.prepare) == len(plugins.PLUGINS)


def _fresh(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_mask_in_plain_snoop_works_without_importing_ode_first() -> None:
    out = _fresh(
        """
        import sys
        import sentinel

        assert "sentinel.ode" not in sys.modules, "imported by sentinel itself"
        det = sentinel.LocalEventDetector()
        det.explicit("deposit")
        seen = []
        det.rule("big", "deposit[amount > 1000]", action=lambda o: seen.append(o.params["amount"]))
        det.signal("deposit", amount=5)
        det.signal("deposit", amount=5000)
        print(seen)
        """
    )
    assert out == "[5000]"


def test_snoop_text_embedding_ode_parses_before_anything_imported_ode() -> None:
    """``ode{...}`` is a block sentinel ships: the parser finds its reader by
    name (an explicit list), not because some module happened to import Ode."""
    out = _fresh(
        """
        import sys
        import sentinel

        assert "sentinel.ode" not in sys.modules, "imported by sentinel itself"
        expr = sentinel.parse("a ; ode{relative(a, b)}")
        print(type(expr).__name__, "sentinel.ode" in sys.modules)
        try:
            sentinel.parse("a ; nope{x}")
        except sentinel.errors.ExpressionError as err:
            print(str(err).splitlines()[0])
        """
    )
    assert out.splitlines() == [
        "Seq True",
        "unknown block nope{...}; known: ode{...} at line 1, column 5",
    ]


def test_an_event_is_looked_up_and_defined_under_the_detectors_lock() -> None:
    """``define()`` and ``explicit()`` checked the name outside the lock: two
    threads defining one name differently both succeeded, the second silently
    replacing the first."""
    from sentinel import LocalEventDetector

    det = LocalEventDetector()
    looked: list[tuple[object, object, bool]] = []

    class Checked(dict):  # type: ignore[type-arg]
        """Each definition: the name looked up, then set, both under the lock."""

        def get(self, key: object, *args: object) -> object:
            self.owned[key] = det._lock._is_owned()  # type: ignore[attr-defined]
            return super().get(key, *args)

        def __setitem__(self, key: object, value: object) -> None:
            looked.append((key, self.owned.get(key), det._lock._is_owned()))  # type: ignore[attr-defined]
            super().__setitem__(key, value)

    events = Checked(det._events)
    events.owned = {}  # type: ignore[attr-defined]
    det._events = events
    det.explicit("A")
    det.explicit("B")
    det.define("AB", "A ; B")
    assert looked == [("A", True, True), ("B", True, True), ("AB", True, True)]
