"""Appendix B of the Sentinel/Snoop report (Chakravarthy et al. 1995): the STOCK
program, written with sentinel on plain objects.

The original declares the event interface inside the class::

    event end(e1) int sell_stock(int qty);
    event begin(e2) && end(e3) void set_price(float price);
    event e4 = e1 ^ e2;
    rule R1[e4, cond1, action1, CUMULATIVE, DEFERRED];

and in ``main()`` an instance-level event on IBM and a mixed rule::

    event set_IBM_price("set_IBM_price", IBM, "begin", "void set_price(float price)");
    event seq_event = STOCK_e4 << set_IBM_price;
    rule R2[seq_event, cond2, action2,,,20, PREVIOUS];

then, in one transaction: IBM.set_price(115.00); DEC.set_price(100.00);
Microsoft.sell_stock(200); DEC.get_price(); IBM.set_price(75.95).

``set_IBM_price`` is a *begin* event (the preprocessed listing's "end" is a typo,
seeds/ERRATA.md). R2 fires during the transaction with {DEC 100, MS 200,
IBM 75.95}; R1 fires at commit with {IBM 115, DEC 100, MS 200}.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sentinel import LocalEventDetector, Reactive, bind, event, on, resolve


class Stock(Reactive):
    """A stock with a price (the paper's STOCK : public REACTIVE)."""

    def __init__(self, name: str, price: float = 0.0) -> None:
        self.name = name
        self.price = price
        self.sold = 0

    @event(end="e1")
    def sell_stock(self, qty: int) -> int:
        """Sell ``qty`` shares; returns the total sold so far."""
        self.sold += qty
        return self.sold

    @event(begin="e2", end="e3")
    def set_price(self, price: float) -> None:
        """Set the price."""
        self.price = price

    def get_price(self) -> float:
        """Not an event generator."""
        return self.price


@dataclass(frozen=True)
class Firing:
    """One rule firing: the rule, when it fired, and its constituents as
    (stock name, value) pairs in order of occurrence."""

    rule: str
    when: str
    constituents: tuple[tuple[str, float], ...]

    def __str__(self) -> str:
        inside = ", ".join(f"{name} {value:g}" for name, value in self.constituents)
        return f"{self.rule} fired {self.when}: {{{inside}}}"


def _constituents(occ: Any) -> tuple[tuple[str, float], ...]:
    """Each constituent as (stock name, the parameter it carries)."""
    out = []
    for c in occ.constituents:
        stock = resolve(c.source)  # the live object behind a process-local reference
        value = c.params.get("price", c.params.get("qty"))
        out.append(("MS" if stock.name == "Microsoft" else stock.name, value))
    return tuple(out)


def run(detector: LocalEventDetector | None = None) -> list[Firing]:
    """Run the program on ``detector`` (a fresh one by default, like the paper's
    ``new LOCAL_EVENT_DETECTOR()``) and return the rule firings in order."""
    det = detector if detector is not None else LocalEventDetector()
    bind(Stock, det)  # this application's local event detector
    firings: list[Firing] = []
    # Immediate rules run inside the calls; the deferred R1 runs once the body of
    # the transaction is over, at pre-commit.
    when = ["during the transaction"]

    def record(rule: str) -> Any:
        return lambda occ: firings.append(Firing(rule, when[0], _constituents(occ)))

    IBM, DEC, Microsoft = Stock("IBM"), Stock("DEC"), Stock("Microsoft")

    # Class level: event e4 = e1 ^ e2, rule R1[e4, cond1, action1, CUMULATIVE, DEFERRED].
    e4 = det.define("Stock.e4", "Stock.e1 ^ Stock.e2")
    det.rule(
        "R1",
        e4,
        condition=lambda occ: True,  # cond1
        action=record("R1"),
        context="cumulative",
        coupling="deferred",
    )

    # Instance level: set_IBM_price, the begin of set_price on IBM only.
    set_IBM_price = det.define_primitive(on(IBM).set_price.event("begin", name="set_IBM_price"))
    # Mixed: seq_event = e4 ; set_IBM_price; rule R2[seq_event, cond2, action2,,,20, PREVIOUS].
    det.define("seq_event", e4 >> set_IBM_price)
    det.rule(
        "R2",
        "seq_event",
        condition=lambda occ: True,  # cond2
        action=record("R2"),
        priority=20,
        trigger_mode="previous",
    )

    with det.transaction():  # OpenOODB->beginTransaction() ... commitTransaction()
        IBM.set_price(115.00)
        DEC.set_price(100.00)
        Microsoft.sell_stock(200)
        DEC.get_price()
        IBM.set_price(75.95)
        when[0] = "at commit"
    return firings


def main() -> None:
    print("Appendix B: STOCK with class- and instance-level events")
    print("  R1 on e4 = e1 ^ e2 (class level; cumulative, deferred)")
    print("  R2 on e4 ; set_IBM_price (mixed; recent, priority 20, previous)\n")
    for firing in run():
        print("  " + str(firing))


if __name__ == "__main__":
    main()
