"""Appendix B of the Sentinel/Snoop report (Chakravarthy et al. 1995): the STOCK
program, as a SQLAlchemy application on a SQLite file.

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

Here ``STOCK`` is a mapped class, the objects are rows of a SQLite file, and
``OpenOODB->beginTransaction() ... commitTransaction()`` is a SQLAlchemy
transaction that sentinel is attached to: R2 (immediate) fires during the
transaction with {DEC 100, MS 200, IBM 75.95}; R1 (deferred) fires at commit,
inside the transaction, with {IBM 115, DEC 100, MS 200}; and every event of the
transaction is in the event log, written in the same commit.

``set_IBM_price`` is a *begin* event (the preprocessed listing's "end" is a typo,
the Snoop paper, Appendix B; docs/semantics.md).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from sentinel import LocalEventDetector, ObjectRef, Primitive, Reactive, attach, bind, event, on
from sentinel.log import LogReader, migrate


class Base(Reactive, DeclarativeBase):
    """The application's declarative base; reactive, so its classes' methods
    can be event generators."""


class Stock(Base):
    """A stock with a price (the paper's STOCK : public REACTIVE)."""

    __tablename__ = "stock"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(40), unique=True)
    price: Mapped[float] = mapped_column(default=0.0)
    sold: Mapped[int] = mapped_column(default=0)

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


def _short(name: str) -> str:
    return "MS" if name == "Microsoft" else name


def run(
    detector: LocalEventDetector | None = None,
    *,
    database: str | Path | None = None,
    log: list[Any] | None = None,
) -> list[Firing]:
    """Run the program on ``detector`` (a fresh one by default, like the paper's
    ``new LOCAL_EVENT_DETECTOR()``) against the SQLite file ``database`` (a
    temporary one by default); return the rule firings in order. ``log``, if
    given, receives the event log's rows of the program's transaction."""
    det = detector if detector is not None else LocalEventDetector()
    bind(Base, det)  # this application's local event detector
    with tempfile.TemporaryDirectory(prefix="sentinel-stock-") as tmp:
        path = Path(database) if database is not None else Path(tmp) / "stock.db"
        engine = sa.create_engine(f"sqlite:///{path}")
        try:
            return _run(det, engine, log)
        finally:
            engine.dispose()


def define_rules(det: LocalEventDetector, ibm: Any, action1: Any, action2: Any) -> None:
    """The program's events and rules: e4, R1 and R2 (``ibm``: the IBM row, or its
    object reference)."""
    # Instance level: set_IBM_price, the begin of set_price on IBM's row only.
    if isinstance(ibm, ObjectRef):  # replay: the row is known by its reference
        begin = on(Stock).set_price.begin
        set_IBM_price = det.define_primitive(Primitive(begin.name, ibm, "set_IBM_price"))
    else:
        set_IBM_price = det.define_primitive(on(ibm).set_price.event("begin", name="set_IBM_price"))
    # Class level: event e4 = e1 ^ e2, rule R1[e4, cond1, action1, CUMULATIVE, DEFERRED].
    e4 = det.define("Stock.e4", "Stock.e1 ^ Stock.e2")
    det.rule(
        "R1",
        e4,
        condition=_cond,  # cond1
        action=action1,
        context="cumulative",
        coupling="deferred",
    )
    # Mixed: seq_event = e4 ; set_IBM_price; rule R2[seq_event, cond2, action2,,,20, PREVIOUS].
    det.define("seq_event", e4 >> set_IBM_price)
    det.rule(
        "R2",
        "seq_event",
        condition=_cond,  # cond2
        action=action2,
        priority=20,
        trigger_mode="previous",
    )


def _cond(occ: Any) -> bool:
    return True


def replay_rules() -> LocalEventDetector:
    """The program's rules on a fresh detector, for replaying its log (``sentinel
    replay --rules examples.stock.program:replay_rules``): IBM is the first row,
    so its reference is ``Stock`` with key ``(1,)``."""
    det = LocalEventDetector()
    bind(Base, det)
    define_rules(det, ObjectRef("Stock", (1,)), _noop, _noop)
    return det


def _noop(occ: Any) -> None:
    pass


def _run(det: LocalEventDetector, engine: sa.Engine, log: list[Any] | None) -> list[Firing]:
    Base.metadata.create_all(engine)
    migrate.upgrade(engine)  # the event log's tables (`sentinel db upgrade`)
    Session = sessionmaker(engine)
    with Session.begin() as s:  # STOCK IBM, DEC, Microsoft;
        s.add_all(Stock(name=n) for n in ("IBM", "DEC", "Microsoft"))
    with Session() as s:
        names = {stock.id: _short(stock.name) for stock in s.scalars(sa.select(Stock))}
        ibm = s.scalars(sa.select(Stock).where(Stock.name == "IBM")).one()

    firings: list[Firing] = []
    # Immediate rules run inside the calls; the deferred R1 runs once the body of
    # the transaction is over, at pre-commit (still inside the transaction).
    when = ["during the transaction"]

    def record(rule: str) -> Any:
        def action(occ: Any) -> None:
            firings.append(
                Firing(
                    rule,
                    when[0],
                    tuple(
                        (names[c.source.key[0]], c.params.get("price", c.params.get("qty")))
                        for c in occ.constituents
                    ),
                )
            )

        return action

    define_rules(det, ibm, record("R1"), record("R2"))
    attachment = attach(Session, detector=det)
    try:
        with Session.begin() as s:  # OpenOODB->beginTransaction()
            by_name = {stock.name: stock for stock in s.scalars(sa.select(Stock))}
            IBM, DEC, Microsoft = by_name["IBM"], by_name["DEC"], by_name["Microsoft"]
            IBM.set_price(115.00)
            DEC.set_price(100.00)
            Microsoft.sell_stock(200)
            DEC.get_price()
            IBM.set_price(75.95)
            when[0] = "at commit"
            scope = s.info["_sentinel_txn"].scope_id
        # OpenOODB->commitTransaction(): R1 ran before the commit, in it
        attachment.flush_log()  # the commit's own txn:commit row
    finally:
        attachment.detach()
    if log is not None:
        with LogReader(engine) as reader:
            log.extend(r for r in reader.occurrences(scopes=[scope]))
            log.extend(reader.firings())
    return firings


def _params(params: Any) -> str:
    return ", ".join(f"{k}={dict(v) if hasattr(v, 'keys') else v!r}" for k, v in params.items())


def main(database: str | Path | None = None) -> None:
    """Run the program and print its rule firings and log (on the SQLite file
    ``database``, which is kept; a temporary one by default)."""
    print("The STOCK program: stocks are rows of a SQLite file, and two of their methods")
    print("are events: sell_stock's end (named e1) and set_price's begin (e2). One")
    print("transaction sets IBM's price to 115, DEC's to 100, sells 200 Microsoft, and")
    print("sets IBM's price to 75.95. Two rules watch it:")
    print("  R1 on e4 = e1 ^ e2 (a sale and a price change, in either order, of any stock),")
    print("     deferred (it runs once, just before the commit) in the cumulative context")
    print("     (it sees every sale and price change of the transaction);")
    print("  R2 on e4 ; set_IBM_price (e4, then a price change of IBM itself), immediate")
    print("     (it runs at once), priority 20, recent context (the latest of each).\n")
    rows: list[Any] = []
    for firing in run(database=database, log=rows):
        print("  " + str(firing))
    print("\nThe event log of the transaction (written in its commit):\n")
    print(f"  {'t_occ':>5}  {'event':<24} {'source':<10} {'outcome':<9} parameters")
    occurrences = [r for r in rows if hasattr(r, "occurrence")]
    for row in occurrences:
        occ = row.occurrence
        source = "" if occ.source is None else repr(occ.source)
        print(f"  {occ.t_occ:>5}  {occ.event:<24} {source:<10} {row.outcome:<9} "
              f"{_params(occ.params)}")  # fmt: skip

    print("\nThe rule-firing log:\n")
    for f in rows:
        if not hasattr(f, "occurrence"):
            parts = ", ".join(str(t) for _, t in f.constituents)
            print(f"  {f.rule}  {f.coupling:<9} {f.status:<6} at t_occ {f.t_occ:<3} "
                  f"constituents t_occ {parts}")  # fmt: skip


if __name__ == "__main__":
    main()
