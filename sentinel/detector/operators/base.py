"""The handler protocol every operator strategy follows.

A *handler* is one node of the event graph detecting in one parameter context. It
receives occurrences on numbered input slots (slot ``i`` is the operator's
``i``-th operand), keeps its state in the scope's :class:`~sentinel.detector.scopes.Store`
under its id, and emits composite occurrences to its outputs (parent handlers'
slots and rule sinks). Entry points:

``on<i>(store, occ)``
    one occurrence arrives on slot ``i``.
``on<i>_batch(store, occs)``
    several occurrences arrive on slot ``i`` at one instant (a continuous child
    detected several at once, or one signal reached the slot by several routes).
    Each is paired against the state as it was before the batch; the default
    processes them one after the other, which is that for every context but
    continuous and unrestricted, which override it.

A handler that one signal can reach by more than one route is *buffered* by the
graph: its arrivals of one instant are collected and handed to
:meth:`Handler.process_instant` in the operator's ``role_order`` (for SEQ,
terminators before initiators), so that the result never depends on which route was
served first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from functools import cmp_to_key
from importlib import import_module
from itertools import zip_longest
from operator import itemgetter
from typing import Any, ClassVar, TypeVar

from sentinel.algebra.expressions import Expression
from sentinel.detector.contexts import Context
from sentinel.detector.scopes import Store
from sentinel.occurrence import CompositeOccurrence, Occurrence

__all__ = [
    "Detection",
    "Entry",
    "Handler",
    "composite",
    "handler_class",
    "instant_order",
    "register",
    "strategy",
    "timestamp",
]

Entry = Callable[[Store, Any], None]

#: A detection as a strategy holds it: ``(expression, t_occ, parts)``. The graph
#: tells one instant's arrivals apart by identity (``EventGraph.drain``, OR's
#: merge, AND never pairing an occurrence with itself), so every output must
#: receive the same object.
Detection = tuple[Any, ...]

_new: Any = tuple.__new__
C = CompositeOccurrence


def composite(expr: Expression, t_occ: int, parts: tuple[Any, ...]) -> tuple[Any, ...]:
    """A detection as handlers emit it: a plain ``(expression, t_occ, parts)``
    tuple (see :func:`sentinel.occurrence.finished`; a ``CompositeOccurrence``
    works too, at three times the cost)."""
    return (expr, t_occ, parts)


def timestamp(occ: Any) -> float:
    """An occurrence's time: a primitive's ``timestamp``, a composite's
    terminator's (the operators that measure time: temporal, WITHIN)."""
    while len(occ) != 8:
        occ = occ[2][-1]
    return occ[2]  # type: ignore[no-any-return]


#: The order occurrences were processed in, for strategies that compare it:
#: ``t_occ`` (arrival order, the default).
ARRIVAL = itemgetter(1)


class Handler:
    """Base of the per-operator, per-context strategies.

    ``seq`` is the key giving the order in which the handler's occurrences were
    processed (strategies that compare it use it: ``t_occ`` by default; a node
    detecting in occurrence-time order gets the bitemporal layer's key).
    """

    __slots__ = ("expr", "height", "hid", "out", "outb", "seq", "twins")

    #: Number of input slots (``None``: as many as the expression has operands).
    arity: ClassVar[int | None] = 2
    #: Slots in the order an instant's arrivals are processed when buffered.
    role_order: ClassVar[tuple[int, ...]] = (0, 1)
    #: One occurrence reaching several slots at one instant counts once (OR).
    merge_slots: ClassVar[bool] = False
    #: A pure filter (a mask): stores nothing and passes on, unchanged, each
    #: occurrence whose parameters satisfy ``self.test(params)``. The wiring
    #: lets a signal reach the rules on such a filter of a primitive event
    #: without entering the graph (``Channel.direct``).
    filters: ClassVar[bool] = False
    #: Slots whose entry does nothing on the handler's empty state: it neither
    #: stores nor detects (a sequence's terminator with no initiator). The leaf
    #: compiler does not make a partition that does not exist for them
    #: (``codegen.Gen``): there would be nothing to do in it but release it.
    idle_slots: ClassVar[frozenset[int]] = frozenset()
    #: Whether occurrences it stores can expire one by one (lifespans, WITHIN's
    #: window: :meth:`stored` and :meth:`purge`). A strategy whose state
    #: summarises the history (an automaton) cannot forget one occurrence; the
    #: bitemporal layer refuses a lifespan there.
    expires: ClassVar[bool] = True

    def __init__(self, hid: int, expr: Expression) -> None:
        self.hid = hid
        self.expr = expr
        self.out: tuple[Entry, ...] = ()
        self.outb: tuple[Entry, ...] = ()
        self.height = 1
        self.seq: Callable[[Any], Any] = ARRIVAL
        #: Whether equal occurrences may reach this handler as distinct objects (an
        #: expression detected both inside and outside a partition, ``E by k`` and
        #: ``E``): then an instant's arrivals are compared by value, not identity.
        self.twins = False

    def new_state(self) -> list[Any]:
        raise NotImplementedError

    def set_order(self, seq: Callable[[Any], Any]) -> None:
        """Process occurrences in the order ``seq`` gives (the bitemporal layer,
        for a node in occurrence-time order; :attr:`seq`). A strategy that
        compares orders elsewhere than through ``self.seq`` overrides it."""
        self.seq = seq

    def slots(self) -> int:
        return self.arity if self.arity is not None else len(self.expr.children)

    def entry(self, slot: int) -> Entry:
        return getattr(self, f"on{slot}")  # type: ignore[no-any-return]

    def entry_batch(self, slot: int) -> Entry:
        """The batch entry point of ``slot``: ``on<slot>_batch``, or, for a
        strategy without one, ``on<slot>`` applied to each occurrence in turn
        (looked up here rather than set on the class)."""
        batch: Entry | None = getattr(self, f"on{slot}_batch", None)
        return batch if batch is not None else _sequential(self.entry(slot))

    # -- inlining (codegen.py) ---------------------------------------------------------
    def gen_detect(self, g: Any, store: str, occ: str, parts: str) -> None:
        """Write: build the detection ``(expr, t_occ of occ, (parts))`` and deliver
        it to the outputs."""
        c = g.var("c")
        g.line(f"{c} = ({g.const(self.expr)}, {occ}[1], ({parts}))")
        g.emit(self, store, c)

    # -- emitting ---------------------------------------------------------------
    def emit(self, store: Store, occ: Any) -> None:
        for f in self.out:
            f(store, occ)

    def emit_batch(self, store: Store, occs: list[Any]) -> None:
        if len(occs) == 1:
            occ = occs[0]
            for f in self.out:
                f(store, occ)
        elif occs:
            for f in self.outb:
                f(store, occs)

    # -- buffered processing ----------------------------------------------------
    def process_instant(self, store: Store, batches: Sequence[list[Any]]) -> None:
        """Process one instant's arrivals (``batches[i]`` for slot ``i``) in role
        order."""
        for slot in self.role_order:
            batch = batches[slot]
            if len(batch) == 1:
                self.entry(slot)(store, batch[0])
            elif batch:
                self.entry_batch(slot)(store, batch)

    # -- lifespans (sentinel.bitemporal.lifespan) --------------------------------
    def stored(self, state: list[Any]) -> Iterator[Any]:
        """Every occurrence this handler's ``state`` holds (primitive or
        composite), in no particular order."""
        for item in state:
            if item is None:
                continue
            t = type(item)
            if t is list or t is deque:
                yield from item
            elif t is Occurrence or t is tuple or t is CompositeOccurrence:
                yield item

    def purge(self, state: list[Any], dead: Callable[[Any], bool], removed: list[Any]) -> None:
        """Remove from ``state`` every stored occurrence ``dead`` says has
        expired, appending it to ``removed``. The default suits strategies whose
        stored occurrences are independent of one another (each a slot, or an
        entry of a list or deque, order kept); strategies that keep occurrences
        that only mean something together override it."""
        for i, item in enumerate(state):
            if item is None:
                continue
            t = type(item)
            if t is list or t is deque:
                if any(dead(o) for o in item):
                    kept = [o for o in item if not dead(o) or removed.append(o)]  # type: ignore[func-returns-value]
                    state[i] = deque(kept) if t is deque else kept
            elif (t is Occurrence or t is tuple or t is CompositeOccurrence) and dead(item):
                removed.append(item)
                state[i] = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} #{self.hid} {self.expr}>"


# -- which strategy detects which operator -----------------------------------------------

#: operator (expression class) -> context -> strategy class.
_STRATEGIES: dict[type[Expression], dict[Context, type[Handler]]] = {}

H = TypeVar("H", bound=type[Handler])


def strategy(operator: type[Expression], *contexts: Context) -> Callable[[H], H]:
    """Class decorator: the decorated handler class detects ``operator`` in
    ``contexts`` (in every context when none is given). Written on the strategy
    class itself, so the class says what it detects::

        @strategy(ex.Seq, Context.RECENT)
        class SeqRecent(Handler): ...

    Later registrations for the same operator and context replace earlier ones.
    """

    def register_class(cls: H) -> H:
        if not (isinstance(cls, type) and issubclass(cls, Handler)):
            raise TypeError(f"@strategy decorates a Handler subclass, not {cls!r}")
        table = _STRATEGIES.setdefault(operator, {})
        for context in contexts or tuple(Context):
            table[context] = cls
        return cls

    return register_class


def register(expr_type: type[Expression], strategies: dict[Context, type[Handler]]) -> None:
    """Register the strategies of an operator, one per context, all at once (the
    spelling of layers that register a table; :func:`strategy` is the decorator)."""
    _STRATEGIES[expr_type] = dict(strategies)


def handler_class(expr: Expression, context: Context) -> type[Handler]:
    """The strategy detecting ``expr``'s operator in ``context``. An operator
    with no strategy registered yet whose class names its module
    (:attr:`Expression.strategies`) has that module imported first."""
    kind = type(expr)
    table = _STRATEGIES.get(kind)
    if table is None and kind.strategies is not None:
        import_module(kind.strategies)
        table = _STRATEGIES.get(kind)
    try:
        return table[context]  # type: ignore[index]
    except (KeyError, TypeError):
        where = f" (its module {kind.strategies} registers none)" if kind.strategies else ""
        raise TypeError(f"no detection strategy for {kind.__name__} in {context}{where}") from None


def _sequential(single: Entry) -> Entry:
    def batch(store: Store, occs: list[Any]) -> None:
        for occ in occs:
            single(store, occ)

    return batch


# -- the order of occurrences ----------------------------------------------------------


def _shape(occ: Any) -> tuple[str, ...]:
    """The tree of ``occ`` in preorder: ``text/number of parts`` for a composite,
    ``""`` for a primitive occurrence. Breaks ties between distinct composites
    over the same constituents (``E1 ; E2`` and ``E1 ^ E2``)."""
    out: list[str] = []
    stack = [occ]
    while stack:
        o = stack.pop()
        if len(o) == 8:
            out.append("")
        else:
            out.append(f"{o[0]}/{len(o[2])}")
            stack.extend(reversed(o[2]))
    return tuple(out)


def instant_order(occs: list[Any]) -> None:
    """Sort distinct occurrences into the canonical order, in place: by ``t_occ``,
    then by their constituents' ``t_occ`` in tree order (a prefix first), then by
    their shape (:func:`_shape`). The order does not depend on which route or
    operand delivered an occurrence, so an instant's arrivals are processed alike
    whatever the spelling of the expression."""
    if len(occs) < 2:
        return
    times = [o[1] for o in occs]
    if len(set(times)) == len(times):  # no ties: the constituents need not be read
        occs.sort(key=itemgetter(1))
        return
    occs.sort(key=cmp_to_key(_compare))


def _compare(a: Any, b: Any) -> int:
    """``a`` against ``b`` in the canonical order, reading the constituents only as
    far as they differ: deep composites of one instant compare at the cost of their
    common prefix."""
    if a[1] != b[1]:
        return -1 if a[1] < b[1] else 1
    for x, y in zip_longest(_leaf_times(a), _leaf_times(b)):
        if x != y:
            if x is None:
                return -1
            if y is None:
                return 1
            return -1 if x < y else 1
    sa, sb = _shape(a), _shape(b)
    return (sa > sb) - (sa < sb)


def _leaf_times(occ: Any) -> Iterator[int]:
    stack = [occ]
    while stack:
        o = stack.pop()
        if len(o) == 8:
            yield o[1]
        else:
            stack.extend(reversed(o[2]))
