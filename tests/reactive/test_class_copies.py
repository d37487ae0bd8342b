"""Class decorators that make a new class from the decorated one.

``@dataclass(slots=True)`` (and ``attrs``, whose classes have slots by default)
builds a second class from the first one's namespace: Python runs
``Reactive.__init_subclass__`` again, for the copy, without the class keywords
and without the ``@event`` placeholders. The copy takes over what the first class
declared (events, ``detector=``, ``sentinel_name=``), and the first class, which
the decorator throws away, stops being reactive.
"""

from __future__ import annotations

from dataclasses import dataclass

import attrs
import pytest

from sentinel import LocalEventDetector, Reactive, event, object_ref, on, using_default_detector
from sentinel.errors import ReactiveError
from sentinel.reactive import attached_classes, detector_of
from sentinel.reactive.info import class_info
from tests.reactive.conftest import fired


def test_a_slots_dataclass_keeps_its_events_and_its_detector(det: LocalEventDetector) -> None:
    @dataclass(slots=True, weakref_slot=True)
    class Point(Reactive, detector=det):
        x: int = 0

        @event
        def move(self, dx: int) -> int:
            self.x += dx
            return self.x

    info = class_info(Point)
    assert info is not None and sorted(info.entries) == ["move"]
    assert detector_of(Point) is det
    assert Point.move._sentinel_owner is Point  # type: ignore[attr-defined]
    assert "__dict__" not in dir(Point())  # it is the slots class
    got = fired(det, "r", Point.move.end)
    p = Point()
    assert p.move(3) == 3
    assert [dict(o.params) for o in got] == [{"dx": 3, "result": 3}]
    assert got[0].source == object_ref(p)
    mine = fired(det, "mine", on(p).move.end)
    p.move(1)
    Point().move(1)
    assert [o.params["result"] for o in mine] == [4]


def test_the_class_a_dataclass_replaces_is_no_longer_reactive(det: LocalEventDetector) -> None:
    first: list[type] = []

    def keep(cls: type) -> type:
        first.append(cls)
        return cls

    @dataclass(slots=True, weakref_slot=True)
    @keep
    class Point(Reactive, detector=det):
        x: int = 0

        @event(end="moved")
        def move(self, dx: int) -> None:
            self.x += dx

    (original,) = first
    assert original is not Point
    assert class_info(original) is None
    assert attached_classes(det) == [Point]
    got = fired(det, "r", "Point.moved")  # the name is the copy's
    Point().move(2)
    assert len(got) == 1


def test_a_slots_dataclass_keeps_its_sentinel_name_and_follows_the_default() -> None:
    det = LocalEventDetector()
    with using_default_detector(det):

        @dataclass(slots=True, weakref_slot=True)
        class Point(Reactive, sentinel_name="Pt"):
            x: int = 0

            @event("both")
            def move(self, dx: int) -> None:
                self.x += dx

        info = class_info(Point)
        assert info is not None and info.name == "Pt"
        assert detector_of(Point) is det
        got = fired(det, "r", "Pt.move:begin")
        Point().move(1)
        assert len(got) == 1


def test_a_slots_dataclass_below_a_reactive_base(det: LocalEventDetector) -> None:
    class Shape(Reactive, detector=det):
        @event
        def scale(self, k: int) -> int:
            return k

    base_rule = fired(det, "base", Shape.scale.end)  # Shape.scale is wrapped now

    @dataclass(slots=True)  # Shape's instances have a __weakref__ already
    class Square(Shape):
        side: int = 1

        def scale(self, k: int) -> int:  # an override, without @event
            self.side *= k
            return self.side

        @event(end="turned")
        def turn(self) -> None: ...

    info = class_info(Square)
    assert info is not None and sorted(info.entries) == ["scale", "turn"]
    # The copy's callable is the override, not the first class's wrapper.
    assert info.entries["scale"].raw.__qualname__.endswith("Square.scale")
    own = fired(det, "own", Square.scale.end)
    turned = fired(det, "turned", "Square.turned")
    sq = Square()
    assert sq.scale(3) == 3
    sq.turn()
    assert [o.params["result"] for o in base_rule] == [3]
    assert [o.params["result"] for o in own] == [3]
    assert len(turned) == 1


def test_a_dataclass_copy_made_while_an_inherited_method_is_listened(
    det: LocalEventDetector,
) -> None:
    class Shape(Reactive, detector=det):
        @event
        def area(self) -> int:
            return 1

    got = fired(det, "r", Shape.area.end)

    @dataclass(slots=True)
    class Dot(Shape):
        x: int = 0

    info = class_info(Dot)
    assert info is not None
    assert not hasattr(info.entries["area"].raw, "__wrapped__")  # the plain copy
    Dot().area()
    assert len(got) == 1


def test_an_attrs_class_keeps_its_events(det: LocalEventDetector) -> None:
    @attrs.define
    class Point(Reactive, detector=det):
        x: int = 0

        @event
        def move(self, dx: int) -> int:
            self.x += dx
            return self.x

    assert "__slots__" in Point.__dict__
    got = fired(det, "r", Point.move.end)
    Point().move(5)
    assert [dict(o.params) for o in got] == [{"dx": 5, "result": 5}]


def test_a_slots_dataclass_without_a_weakref_slot_is_refused_with_advice(
    det: LocalEventDetector,
) -> None:
    with pytest.raises(ReactiveError, match=r"Point instances cannot be referenced weakly.*"
                       r"weakref_slot=True"):  # fmt: skip

        @dataclass(slots=True)
        class Point(Reactive, detector=det):
            x: int = 0

            @event
            def move(self, dx: int) -> None: ...


def test_a_frozen_dataclass_without_slots_is_unchanged(det: LocalEventDetector) -> None:
    @dataclass(frozen=True)
    class Q(Reactive, detector=det):
        x: int = 0

        @event
        def get(self) -> int:
            return self.x

    got = fired(det, "r", Q.get.end)
    assert Q(4).get() == 4
    assert [dict(o.params) for o in got] == [{"result": 4}]
