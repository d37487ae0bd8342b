"""The process's default detector, binding classes to detectors, and layering."""

from __future__ import annotations

import ast
import gc
from pathlib import Path
from typing import Any

import pytest

import sentinel
from sentinel import (
    LocalEventDetector,
    Reactive,
    bind,
    default_detector,
    event,
    set_default_detector,
    using_default_detector,
)
from sentinel.default import current_default_detector
from sentinel.errors import DuplicateEventError, ReactiveError
from sentinel.reactive import detector_of
from tests.reactive.conftest import fired

ROOT = Path(sentinel.__file__).parent


class TestDefaultDetector:
    def test_created_on_first_use(self, fresh_default: None) -> None:
        assert current_default_detector() is None
        det = default_detector()
        assert isinstance(det, LocalEventDetector)
        assert default_detector() is det

    def test_set_and_restore(self, fresh_default: None) -> None:
        a, b = LocalEventDetector(), LocalEventDetector()
        assert set_default_detector(a) is None
        assert set_default_detector(b) is a
        with using_default_detector(a) as inside:
            assert inside is a and default_detector() is a
        assert default_detector() is b
        with pytest.raises(TypeError, match="event detector or None"):
            set_default_detector("det")  # type: ignore[arg-type]

    def test_unbound_classes_follow_the_default(self, fresh_default: None) -> None:
        class Pump(Reactive):
            @event(end="started")
            def start(self) -> None: ...

        class BigPump(Pump):
            pass

        # No default yet: nothing to signal to, nothing wrapped.
        assert detector_of(Pump) is None
        BigPump().start()

        first = default_detector()  # created now: the classes attach to it
        assert detector_of(BigPump) is first
        got_first = fired(first, "r", "Pump.started")
        BigPump().start()
        assert len(got_first) == 1

        second = LocalEventDetector()
        set_default_detector(second)
        assert second.event("BigPump.started") == BigPump.start.end
        got_second = fired(second, "r", Pump.start.end)
        Pump().start()
        assert len(got_second) == 1
        assert len(got_first) == 1  # the old default no longer hears it
        # ... and its wrappers are gone although its rule still exists.
        assert getattr(Pump.__dict__["start"], "__wrapped__", None) is not None
        second.get_rule("r").delete()
        assert type(Pump.__dict__["start"]).__name__ == "function"

    def test_a_conflicting_new_default_changes_nothing(self, fresh_default: None) -> None:
        first = default_detector()

        class Lamp(Reactive):
            @event
            def switch(self) -> None: ...

        taken = LocalEventDetector()
        taken.explicit("Lamp.switch:end")
        with pytest.raises(DuplicateEventError, match=r"Lamp\.switch:end"):
            set_default_detector(taken)
        assert default_detector() is first
        assert detector_of(Lamp) is first

    def test_explicitly_bound_classes_stay(
        self, fresh_default: None, det: LocalEventDetector
    ) -> None:
        class Valve(Reactive, detector=det):
            @event
            def open(self) -> None: ...

        set_default_detector(LocalEventDetector())
        assert detector_of(Valve) is det
        assert "Valve.open:end" not in default_detector().events


class TestBind:
    def test_rebinding_moves_the_hierarchy(self, det: LocalEventDetector) -> None:
        class Tank(Reactive, detector=det):
            @event
            def fill(self, litres: int) -> None: ...

        class BigTank(Tank):
            pass

        got_old = fired(det, "r", Tank.fill.end)
        other = LocalEventDetector()
        bind(Tank, other)
        assert detector_of(BigTank) is other
        assert type(Tank.__dict__["fill"]).__name__ == "function"  # nobody listens on other
        got_new = fired(other, "r", "BigTank.fill:end")
        BigTank().fill(3)
        assert got_old == [] and len(got_new) == 1
        bind(Tank, det)
        BigTank().fill(4)
        assert len(got_old) == 1 and len(got_new) == 1

    def test_bind_to_the_default(self, fresh_default: None, det: LocalEventDetector) -> None:
        class Tank(Reactive, detector=det):
            @event
            def fill(self) -> None: ...

        bind(Tank, None)
        assert detector_of(Tank) is None
        assert detector_of(Tank) is None
        d = default_detector()
        assert detector_of(Tank) is d and "Tank.fill:end" in d.events

    def test_bad_bindings(self, det: LocalEventDetector) -> None:
        class Tank(Reactive, detector=det):
            pass

        class BigTank(Tank):
            pass

        with pytest.raises(ReactiveError, match="top reactive class"):
            bind(BigTank, det)
        with pytest.raises(ReactiveError, match="reactive class"):
            bind(int, det)
        with pytest.raises(ReactiveError, match="event detector or None"):
            bind(Tank, "det")  # type: ignore[arg-type]

    def test_joined_hierarchies(self, det: LocalEventDetector) -> None:
        other = LocalEventDetector()

        class A(Reactive, detector=det):
            pass

        class B(Reactive, detector=other):
            pass

        with pytest.raises(ReactiveError, match="different detectors"):

            class AB(A, B):
                pass

        class C(Reactive, detector=det):
            pass

        class AC(A, C):
            pass

        with pytest.raises(ReactiveError, match=r"bind .*C as well"):
            bind(A, other)
        assert detector_of(AC) is det  # nothing changed


class TestNames:
    def test_two_live_classes_cannot_share_a_name(self, det: LocalEventDetector) -> None:
        class Stock(Reactive, detector=det):
            @event
            def m(self) -> None: ...

        keep = Stock  # noqa: F841 - alive while the second one is defined

        def another() -> type:
            class Stock(Reactive, detector=det):
                @event
                def n(self) -> None: ...

            return Stock

        with pytest.raises(DuplicateEventError, match="already uses the event name prefix"):
            another()

        def mapped() -> type:  # database events would use the name
            class Stock(Reactive, detector=det):
                __tablename__ = "stock"

            return Stock

        with pytest.raises(DuplicateEventError, match="already uses the event name prefix"):
            mapped()

        def renamed() -> type:
            class Stock(Reactive, detector=det, sentinel_name="OtherStock"):
                @event
                def m(self) -> None: ...

            return Stock

        assert renamed().m.end.name == "OtherStock.m:end"

    def test_bases_without_events_or_tables_may_share_a_name(self, det: LocalEventDetector) -> None:
        """Two applications' declarative ``Base`` classes in one process: neither
        has an event of its own, so neither claims the name; their subclasses do."""

        def one_app() -> type:
            class Base(Reactive, detector=det):
                pass

            return Base

        def another_app() -> type:
            class Base(Reactive, detector=det):
                pass

            return Base

        first, second = one_app(), another_app()

        class Account(second):  # type: ignore[misc, valid-type]
            @event
            def deposit(self) -> None: ...

        assert first is not second
        assert Account.deposit.end.name == "Account.deposit:end"

    def test_a_collected_class_gives_its_name_back(self, det: LocalEventDetector) -> None:
        def define() -> None:
            class Gauge(Reactive, detector=det):
                @event
                def read(self) -> None: ...

        define()
        define()  # the first one is garbage (collected on the clash check)
        gc.collect()

    @pytest.mark.parametrize("defined", ["explicit", "composite"])
    def test_a_name_the_detector_uses_otherwise(
        self, det: LocalEventDetector, defined: str
    ) -> None:
        if defined == "explicit":
            det.explicit("Gauge.read:end")
        else:
            det.define("Gauge.read:end", det.explicit("E1") >> det.explicit("E2"))
        with pytest.raises(DuplicateEventError, match=r"'Gauge.read:end'.*already defines it"):

            class Gauge(Reactive, detector=det):
                @event
                def read(self) -> None: ...


def _module_level_imports(path: Path) -> list[str]:
    """Modules imported at import time (not inside functions or TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    out: list[str] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                out.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                out.append(node.module)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(tree.body)
    return out


@pytest.mark.parametrize(
    "path",
    [*sorted((ROOT / "reactive").glob("*.py")), ROOT / "default.py"],
    ids=lambda p: p.name,
)
def test_layering(path: Path) -> None:
    # reactive depends on the detector layer only: no rules, no SQLAlchemy, no
    # ORM or log layer at import time (sentinel.default imports rules lazily).
    for module in _module_level_imports(path):
        assert not module.startswith(
            ("sentinel.rules", "sentinel.orm", "sentinel.log", "sqlalchemy")
        ), f"{path.name} imports {module}"


def test_public_surface() -> None:
    for name in (
        "Reactive",
        "event",
        "on",
        "bind",
        "object_ref",
        "resolve",
        "rule",
        "default_detector",
        "set_default_detector",
        "using_default_detector",
    ):
        assert name in sentinel.__all__
        assert getattr(sentinel, name) is not None


def _unused(*_: Any) -> None: ...
