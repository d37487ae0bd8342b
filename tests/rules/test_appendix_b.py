"""Appendix B's STOCK program with explicit events (seeds/000, Appendix B).

STOCK declares ``event end(e1) sell_stock``, ``event begin(e2) && end(e3)
set_price``, ``e4 = e1 ^ e2``; R1 on e4 is cumulative and deferred; the instance
event set_IBM_price is a *begin* event of IBM.set_price (ERRATA: the preprocessed
listing's "end" is a typo), and R2 on ``e4 ; set_IBM_price`` is recent, priority
20, PREVIOUS. Here the method events are signalled explicitly on channels; one call
of IBM.set_price is one occurrence matching both the class-level e2 and the
instance-level set_IBM_price.
"""

from __future__ import annotations

from typing import Any

import pytest

from sentinel import LocalEventDetector, Primitive
from sentinel.detector import Channel


class Stock:
    """The paper's three calls per set_price: begin, the body, end."""

    def __init__(self, det: LocalEventDetector, name: str) -> None:
        self.det, self.name = det, name

    def set_price(self, price: float) -> None:
        det = self.det
        det.notify(
            det.channel("STOCK.set_price:begin"),
            {"price": price},
            source=self.name,
            selectors=(self.name,),
        )
        det.notify(
            det.channel("STOCK.set_price:end"),
            {"price": price},
            source=self.name,
            selectors=(self.name,),
        )

    def sell_stock(self, qty: int) -> int:
        det = self.det
        det.notify(
            det.channel("STOCK.sell_stock:end"),
            {"qty": qty},
            source=self.name,
            selectors=(self.name,),
        )
        return qty


def build(firings: list[tuple[str, Any]]) -> LocalEventDetector:
    det = LocalEventDetector()
    e1 = det.define_primitive(Primitive("STOCK.sell_stock:end", label="STOCK_e1"))
    e2 = det.define_primitive(Primitive("STOCK.set_price:begin", label="STOCK_e2"))
    det.define_primitive(Primitive("STOCK.set_price:end", label="STOCK_e3"))
    det.define("STOCK_e4", e1 & e2)
    det.define_primitive(Primitive("STOCK.set_price:begin", selector="IBM", label="set_IBM_price"))
    det.rule(
        "R1",
        "STOCK_e4",
        action=lambda o: firings.append(("R1", o)),
        context="cumulative",
        coupling="deferred",
    )
    det.rule(
        "R2",
        "STOCK_e4 ; set_IBM_price",
        action=lambda o: firings.append(("R2", o)),
        priority=20,
        trigger_mode="previous",
    )
    return det


def stock_params(occ: Any) -> list[tuple[str, float]]:
    return [(c.source, next(iter(c.params.values()))) for c in occ.constituents]


def run(det: LocalEventDetector, firings: list[tuple[str, Any]]) -> None:
    ibm, dec, ms = Stock(det, "IBM"), Stock(det, "DEC"), Stock(det, "MS")
    with det.transaction():
        ibm.set_price(115.00)
        dec.set_price(100.00)
        ms.sell_stock(200)
        ibm.set_price(75.95)
        firings.append(("commit", None))


@pytest.mark.parametrize("reverse_leaves", [False, True], ids=["class-first", "instance-first"])
def test_r2_fires_first_then_r1_at_commit(
    reverse_leaves: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if reverse_leaves:
        # Serve the instance-level leaf before the class-level one.
        original = Channel.targets
        monkeypatch.setattr(Channel, "targets", lambda self, sel=(): original(self, sel)[::-1])
    firings: list[tuple[str, Any]] = []
    det = build(firings)
    run(det, firings)
    assert [name for name, _ in firings] == ["R2", "commit", "R1"]
    r2, r1 = firings[0][1], firings[2][1]
    assert stock_params(r2) == [("DEC", 100.0), ("MS", 200), ("IBM", 75.95)]
    assert stock_params(r1) == [("IBM", 115.0), ("DEC", 100.0), ("MS", 200)]
