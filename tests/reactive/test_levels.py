"""Class-level and instance-level events, and inheritance (paper 4.1)."""

from __future__ import annotations

from typing import Any

import pytest

from sentinel import LocalEventDetector, Primitive, Reactive, event, object_ref, on
from sentinel.errors import ReactiveError, UnknownEventError
from sentinel.reactive import ClassSelector
from tests.reactive.conftest import Recorder, fired


@pytest.fixture
def classes(det: LocalEventDetector) -> tuple[type, type, type]:
    class Stock(Reactive, detector=det):
        def __init__(self, name: str = "") -> None:
            self.name = name

        @event(begin="e2", end="e3")
        def set_price(self, price: float) -> None:
            self.price = price

    class TechStock(Stock):
        pass

    class ChipStock(TechStock):
        pass

    return Stock, TechStock, ChipStock


def names(occs: list[Any]) -> list[str]:
    return [o.source.class_name for o in occs]


class TestClassLevel:
    def test_a_class_level_event_matches_subclass_instances(
        self, det: LocalEventDetector, classes: Any
    ) -> None:
        Stock, TechStock, ChipStock = classes
        on_stock = fired(det, "stock", Stock.set_price.begin)
        on_tech = fired(det, "tech", TechStock.set_price.begin)
        on_chip = fired(det, "chip", ChipStock.set_price.begin)
        for cls in (Stock, TechStock, ChipStock):
            cls().set_price(1.0)
        assert names(on_stock) == ["Stock", "TechStock", "ChipStock"]
        assert names(on_tech) == ["TechStock", "ChipStock"]
        assert names(on_chip) == ["ChipStock"]

    def test_subclass_events_carry_a_class_selector(self, classes: Any) -> None:
        Stock, TechStock, _ = classes
        assert TechStock.set_price.begin.name == "Stock.set_price:begin"
        assert TechStock.set_price.begin.selector == ClassSelector("TechStock")
        assert str(TechStock.set_price.begin) == "TechStock.set_price:begin"
        assert TechStock.set_price.begin != Stock.set_price.begin

    def test_subclass_events_by_name(self, det: LocalEventDetector, classes: Any) -> None:
        _, TechStock, ChipStock = classes
        assert det.event("TechStock.e2") == TechStock.set_price.begin
        got = fired(det, "r", "TechStock.e2 ; ChipStock.set_price:end", context="chronicle")
        TechStock().set_price(1.0)
        ChipStock().set_price(2.0)  # its begin is a TechStock.e2 too (the second initiator)
        assert [c.params["price"] for c in got[0].constituents] == [1.0, 2.0]
        assert names(list(got[0].constituents)) == ["TechStock", "ChipStock"]

    def test_occurrences_are_named_after_the_root_method(
        self, det: LocalEventDetector, classes: Any
    ) -> None:
        _, _, ChipStock = classes
        rec = Recorder(det)
        ChipStock().set_price(1.0)
        assert rec.events() == ["Stock.set_price:begin", "Stock.set_price:end"]

    def test_methods_declared_first_on_a_subclass(
        self, det: LocalEventDetector, classes: Any
    ) -> None:
        Stock, _, _ = classes

        class FundStock(Stock):
            @event
            def rebalance(self) -> None: ...

        class IndexFund(FundStock):
            pass

        assert FundStock.rebalance.end.name == "FundStock.rebalance:end"
        assert IndexFund.rebalance.end.selector == ClassSelector("IndexFund")
        assert "rebalance" not in dir(on(Stock))
        got = fired(det, "r", FundStock.rebalance.end)
        IndexFund().rebalance()
        assert names(got) == ["IndexFund"]


class TestOverrides:
    def test_an_override_calling_super_is_one_event(
        self, det: LocalEventDetector, classes: Any
    ) -> None:
        Stock, _, _ = classes

        class Rounded(Stock):
            def set_price(self, price: float) -> None:
                super().set_price(round(price, 1))

        rec = Recorder(det)
        r = Rounded()
        r.set_price(1.26)
        assert r.price == 1.3
        assert rec.events() == ["Stock.set_price:begin", "Stock.set_price:end"]
        assert rec.occurrences[0].params["price"] == 1.26  # the call the caller made
        assert rec.occurrences[0].source == object_ref(r)

    def test_an_override_without_super_still_signals(
        self, det: LocalEventDetector, classes: Any
    ) -> None:
        Stock, _, _ = classes

        class Frozen(Stock):
            def set_price(self, price: float) -> None:
                pass

        got = fired(det, "r", Stock.set_price.end)
        Frozen().set_price(5.0)
        assert names(got) == ["Frozen"]

    def test_a_plain_mixin_earlier_in_the_mro(self, det: LocalEventDetector, classes: Any) -> None:
        Stock, _, _ = classes

        class Audited:
            def set_price(self, price: float) -> None:
                self.audited = True
                super().set_price(price)  # type: ignore[misc]

        class AuditedStock(Audited, Stock):
            pass

        rec = Recorder(det)
        a = AuditedStock()
        a.set_price(2.0)
        assert a.audited and a.price == 2.0
        assert rec.events() == ["Stock.set_price:begin", "Stock.set_price:end"]

    def test_calling_a_base_implementation_explicitly_signals_nothing(
        self, det: LocalEventDetector, classes: Any
    ) -> None:
        # Base.method(obj) is what super() does: it runs inside the object's own
        # call of the method, which signals (documented in docs/reactive.md).
        Stock, TechStock, _ = classes
        rec = Recorder(det)
        Stock.set_price(TechStock(), 1.0)
        assert rec.events() == []
        Stock.set_price(Stock(), 1.0)  # the object's own method: signals
        assert len(rec.events()) == 2


class TestInstanceLevel:
    def test_only_that_object(self, det: LocalEventDetector, classes: Any) -> None:
        Stock, TechStock, _ = classes
        ibm, dec, sub = Stock("IBM"), Stock("DEC"), TechStock("SUB")
        got = fired(det, "ibm", on(ibm).set_price.begin)
        got_sub = fired(det, "sub", on(sub).e3)
        for s in (dec, ibm, sub, ibm):
            s.set_price(1.0)
        assert [o.source for o in got] == [object_ref(ibm)] * 2
        assert [o.source for o in got_sub] == [object_ref(sub)]

    def test_instance_event_handles(self, classes: Any) -> None:
        Stock, _, _ = classes
        ibm = Stock("IBM")
        p = on(ibm).set_price.begin
        assert p.name == "Stock.set_price:begin"
        assert p.selector == object_ref(ibm)
        assert p.label == f"Stock[~{object_ref(ibm).key[1]}].set_price:begin"
        assert on(ibm).e2 == p
        assert on(ibm).level == "instance" and on(Stock).level == "class"

    def test_named_instance_event_in_snoop_text(
        self, det: LocalEventDetector, classes: Any
    ) -> None:
        Stock, _, _ = classes
        ibm = Stock("IBM")
        set_IBM_price = det.define_primitive(on(ibm).set_price.event("begin", name="set_IBM_price"))
        assert str(set_IBM_price) == "set_IBM_price"
        got = fired(det, "r", "Stock.e3 ; set_IBM_price")
        Stock("DEC").set_price(1.0)
        ibm.set_price(2.0)
        assert [c.params["price"] for c in got[0].constituents] == [1.0, 2.0]

    def test_an_unregistered_instance_event_is_unknown_in_text(
        self, det: LocalEventDetector, classes: Any
    ) -> None:
        Stock, _, _ = classes
        p = on(Stock("IBM")).set_price.begin
        with pytest.raises(UnknownEventError):
            det.expression(str(p))
        assert det.expression(p) == p  # as an expression it is fine

    def test_one_call_is_one_occurrence_for_class_and_instance_events(
        self, det: LocalEventDetector, classes: Any
    ) -> None:
        Stock, _, _ = classes
        ibm = Stock("IBM")
        cls_level = fired(det, "c", Stock.set_price.begin)
        inst_level = fired(det, "i", on(ibm).set_price.begin)
        # SEQ is strict: a call's class-level occurrence cannot initiate a sequence
        # its own instance-level occurrence terminates.
        seq = fired(det, "s", Stock.set_price.begin >> on(ibm).set_price.begin)
        ibm.set_price(1.0)
        assert cls_level[0] == inst_level[0]  # one occurrence (one t_occ) for both
        assert seq == []
        Stock("DEC").set_price(2.0)
        ibm.set_price(3.0)
        assert [c.params["price"] for c in seq[0].constituents] == [2.0, 3.0]

    def test_mixed_rule(self, det: LocalEventDetector, classes: Any) -> None:
        Stock, TechStock, _ = classes
        ibm = Stock("IBM")
        got = fired(det, "mixed", TechStock.set_price.end & on(ibm).set_price.end)
        ibm.set_price(1.0)
        Stock("DEC").set_price(2.0)
        TechStock("T").set_price(3.0)
        assert [c.source.class_name for c in got[0].constituents] == ["Stock", "TechStock"]


class TestOnErrors:
    def test_non_reactive_object_or_class(self) -> None:
        class Plain:
            pass

        with pytest.raises(ReactiveError, match="Plain objects are not reactive"):
            on(Plain())
        with pytest.raises(ReactiveError, match="Plain is not reactive"):
            on(Plain)
        with pytest.raises(ReactiveError, match="not a reactive class"):
            object_ref(Plain())

    def test_unknown_names(self, classes: Any) -> None:
        Stock, _, _ = classes
        with pytest.raises(
            ReactiveError,
            match=r"no event method or event named 'get_price'.*"
            "event methods: set_price; named events: e2, e3",
        ):
            on(Stock).get_price  # noqa: B018
        with pytest.raises(AttributeError):
            on(Stock).__wrapped__  # noqa: B018

    def test_phase_not_declared(self, det: LocalEventDetector) -> None:
        class A(Reactive, detector=det):
            @event
            def m(self) -> None: ...

        with pytest.raises(ReactiveError, match=r"A.m has no begin event"):
            on(A).m.begin  # noqa: B018
        with pytest.raises(ReactiveError, match="'begin' or 'end'"):
            on(A).m.event("middle")

    def test_classmethods_have_no_instance_level_events(self, det: LocalEventDetector) -> None:
        class A(Reactive, detector=det):
            @event
            @classmethod
            def make(cls) -> None: ...

        assert isinstance(on(A).make.end, Primitive)
        with pytest.raises(ReactiveError, match="class-level events only"):
            on(A()).make.end  # noqa: B018
