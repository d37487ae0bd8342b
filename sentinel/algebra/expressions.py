"""Event expressions: the Snoop algebra as immutable, structurally equal values.

Expressions are built with constructors (:class:`Any`, :class:`A`, :class:`Astar`,
:class:`Not`) and Python operators::

    a | b       OR   (Snoop  a | b)
    a & b       AND  (Snoop  a ^ b)
    a >> b      SEQ  (Snoop  a ; b)

Equal expressions compare and hash equal, so the detector represents each distinct
sub-expression once (one node of the event graph, shared by every rule that uses
it). ``str(expr)`` prints Snoop text that :func:`sentinel.parse` reads back to an
equal expression.

Note Python's precedence: ``>>`` binds tighter than ``&``, which binds tighter than
``|``. In Snoop text AND (``^``) binds tighter than SEQ (``;``), which binds tighter
than OR (``|``). Parenthesise freely; the printer emits only the parentheses the
text needs.
"""

from __future__ import annotations

import re
import typing as t

from sentinel.errors import ExpressionError, shortened

__all__ = [
    "SOURCE",
    "A",
    "And",
    "Any",
    "Astar",
    "Expression",
    "KeySpec",
    "Keyed",
    "Not",
    "Or",
    "Primitive",
    "Seq",
]


class _Source:
    """The key that partitions by the occurrence's source object (``by @source``)."""

    _instance: _Source | None = None

    def __new__(cls) -> _Source:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "SOURCE"

    def __reduce__(self) -> str:
        return "SOURCE"


SOURCE: t.Final = _Source()
"""Partition key meaning "the object that signalled the event" (see :meth:`Expression.by`)."""

KeySpec = str | _Source

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class Expression:
    """Base of every event expression. Immutable; equal by structure."""

    __slots__ = ("_args", "_hash")
    _args: tuple[t.Any, ...]
    _hash: int

    #: Operator name used in errors and by the printer.
    op: t.ClassVar[str] = "?"

    def _init(self, *args: t.Any) -> None:
        object.__setattr__(self, "_args", args)
        object.__setattr__(self, "_hash", hash((type(self).__name__, args)))

    def __setattr__(self, name: str, value: t.Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(self) is not type(other):
            return NotImplemented
        assert isinstance(other, Expression)
        if self._hash != other._hash:
            return False
        # Operand by operand with a stack, not recursively: expressions of any
        # depth compare. A pair already compared is not compared again, so
        # shared sub-expressions cost once, not once per path to them.
        pairs: list[tuple[Expression, Expression]] = [(self, other)]
        compared: set[tuple[int, int]] = set()
        while pairs:
            a, b = pairs.pop()
            if a is b:
                continue
            ids = (id(a), id(b))
            if ids in compared:
                continue
            compared.add(ids)
            if type(a) is not type(b) or a._hash != b._hash or len(a._args) != len(b._args):
                return False
            for x, y in zip(a._args, b._args, strict=True):
                if isinstance(x, Expression) and isinstance(y, Expression):
                    pairs.append((x, y))
                elif x != y:
                    return False
        return True

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[t.Any, ...]:
        # A flat table of nodes, not nested reductions: pickle and deepcopy
        # recurse once per level of nesting, so an expression as deep as the
        # detector accepts (tens of thousands of levels) would exhaust the
        # recursion limit.
        return (_unflatten, (_flatten(self),))

    def __copy__(self) -> Expression:
        return self  # immutable

    def _reduce_node(self) -> tuple[t.Callable[..., Expression], tuple[t.Any, ...]]:
        """``(rebuild, args)``: ``rebuild(*args)`` makes an equal expression. Its
        operands may appear in ``args``; pickling replaces them by their places
        in a flat table (see :func:`_flatten`)."""
        return (type(self)._from_args, self._args)

    @classmethod
    def _from_args(cls, *args: t.Any) -> Expression:
        """Rebuild from ``_args`` (the stored arguments, children in operator order)."""
        return cls(*args)

    def with_children(self, children: t.Sequence[Expression]) -> Expression:
        """A copy of this expression with its operands replaced, in order."""
        it = iter(children)
        args = [next(it) if isinstance(a, Expression) else a for a in self._args]
        return type(self)._from_args(*args)

    @property
    def children(self) -> tuple[Expression, ...]:
        """The operand expressions, in operator order."""
        return tuple(a for a in self._args if isinstance(a, Expression))

    # -- the Python spelling of the algebra ---------------------------------------
    def __or__(self, other: Expression) -> Or:
        return Or(self, _check(other, "|"))

    def __and__(self, other: Expression) -> And:
        return And(self, _check(other, "&"))

    def __rshift__(self, other: Expression) -> Seq:
        return Seq(self, _check(other, ">>"))

    def __add__(self, offset: t.Any) -> Expression:
        """``E + [t]``: the relative temporal event ``offset`` after each occurrence
        of E (``offset``: a timedelta, seconds, or a time string like ``"00:10:00"``;
        see :class:`sentinel.algebra.temporal.Relative`)."""
        from sentinel.algebra.temporal import Relative  # defined on top of this module

        return Relative(self, offset)

    def by(self, key: KeySpec) -> Keyed:
        """Partition detection by ``key``: only occurrences with equal keys combine.

        ``key`` is a parameter name (``"order_id"``) or :data:`SOURCE` (the object
        that signalled the event). Detection state is kept per key value, created on
        first use and released when empty. An occurrence that lacks the parameter
        does not take part in this expression.
        """
        return Keyed(self, key)

    def walk(self) -> t.Iterator[Expression]:
        """This expression and every sub-expression, children before parents (a
        sub-expression used twice is visited twice)."""
        todo: list[tuple[Expression, bool]] = [(self, False)]
        while todo:
            e, expanded = todo.pop()
            if expanded:
                yield e
                continue
            todo.append((e, True))
            todo.extend((c, False) for c in reversed(e.children))

    def primitives(self) -> t.Iterator[Primitive]:
        for e in self.walk():
            if isinstance(e, Primitive):
                yield e

    def __str__(self) -> str:
        from sentinel.algebra.syntax import to_text

        return to_text(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self}>"


#: One row of a flattened expression: ``(rebuild, args, operands)``, where
#: ``args[i]`` for each ``i`` in ``operands`` is the row number of an operand.
_Row = tuple[t.Callable[..., Expression], tuple[t.Any, ...], tuple[int, ...]]


def _flatten(root: Expression) -> list[_Row]:
    """``root`` as rows, operands before the expressions that use them (the last
    row is ``root``). An object used twice is one row. Iterative: any depth."""
    rows: list[_Row] = []
    row_of: dict[int, int] = {}  # id(expression) -> its row
    keep: list[Expression] = []  # keeps the ids above alive while flattening
    rebuilders: dict[t.Any, t.Any] = {}  # one object per rebuild function (smaller pickles)
    todo: list[tuple[Expression, bool]] = [(root, False)]
    while todo:
        e, ready = todo.pop()
        if id(e) in row_of:
            continue
        rebuild, args = e._reduce_node()
        operands = [i for i, a in enumerate(args) if isinstance(a, Expression)]
        if not ready:
            todo.append((e, True))
            todo.extend((args[i], False) for i in reversed(operands) if id(args[i]) not in row_of)
            continue
        flat = list(args)
        for i in operands:
            flat[i] = row_of[id(args[i])]
        row_of[id(e)] = len(rows)
        keep.append(e)
        rows.append((rebuilders.setdefault(rebuild, rebuild), tuple(flat), tuple(operands)))
    return rows


def _unflatten(rows: list[_Row]) -> Expression:
    """The expression :func:`_flatten` made ``rows`` of."""
    built: list[Expression] = []
    for rebuild, args, operands in rows:
        if operands:
            full = list(args)
            for i in operands:
                full[i] = built[args[i]]
            args = tuple(full)
        built.append(rebuild(*args))
    return built[-1]


def _check(value: object, where: str) -> Expression:
    if not isinstance(value, Expression):
        if isinstance(value, str):
            # Text is what a newcomer tries first: say how to get an expression.
            raise ExpressionError(
                f"operand of {where} must be an event expression, not the text "
                f"{shortened(repr(value))}: "
                "name the event in Python (a method's events are Class.method.begin and "
                ".end, as in Account.deposit.end; an explicit event is "
                f'detector.explicit("name")), or parse the text first: '
                f"parse({shortened(repr(value))})"
            )
        raise ExpressionError(
            f"operand of {where} must be an event expression, not {type(value).__name__} "
            f"({shortened(repr(value))})"
        )
    return value


class Primitive(Expression):
    """A primitive event: what one signal on ``name`` produces.

    ``selector`` narrows the event to the signals that carry it (an instance-level
    event carries its object's reference); ``None`` accepts every signal on
    ``name``. ``label`` is the name printed for the event (defaults to ``name``);
    it does not take part in equality.
    """

    __slots__ = ("label",)
    op = "primitive"
    label: str

    def __init__(self, name: str, selector: t.Hashable | None = None, label: str | None = None):
        if not isinstance(name, str) or not name:
            raise ExpressionError(f"a primitive event needs a non-empty name, not {name!r}")
        self._init(name, selector)
        object.__setattr__(self, "label", label or name)

    @property
    def name(self) -> str:
        return self._args[0]  # type: ignore[no-any-return]

    @property
    def selector(self) -> t.Hashable | None:
        return self._args[1]  # type: ignore[no-any-return]

    def _reduce_node(self) -> tuple[t.Callable[..., Expression], tuple[t.Any, ...]]:
        return (Primitive, (self._args[0], self._args[1], self.label))

    def with_children(self, children: t.Sequence[Expression]) -> Expression:
        return self

    def where(self, spec: t.Any = None, /, **equal: t.Any) -> t.Any:
        """This event masked by a predicate on its parameters (a
        :class:`~sentinel.algebra.masks.Masked` expression): ``deposit.where("amount
        > 1000")``, ``deposit.where(param("amount") > 1000)`` or
        ``deposit.where(currency="EUR")``. See :mod:`sentinel.algebra.masks`."""
        from sentinel.algebra.masks import Masked, predicate  # defined on top of this module

        return Masked(self, predicate(spec, **equal))


class _Binary(Expression):
    __slots__ = ()

    def __init__(self, left: Expression, right: Expression) -> None:
        self._init(_check(left, self.op), _check(right, self.op))

    @property
    def left(self) -> Expression:
        return self._args[0]  # type: ignore[no-any-return]

    @property
    def right(self) -> Expression:
        return self._args[1]  # type: ignore[no-any-return]


class Or(_Binary):
    """``E1 | E2``: occurs when E1 or E2 occurs (once, if one occurrence reaches
    both)."""

    __slots__ = ()
    op = "OR"


class And(_Binary):
    """``E1 ^ E2``: occurs when both have occurred, in either order (equal times
    allowed; an occurrence never pairs with itself)."""

    __slots__ = ()
    op = "AND"


class Seq(_Binary):
    """``E1 ; E2``: occurs when E2 occurs strictly after E1."""

    __slots__ = ()
    op = "SEQ"


class Any(Expression):
    """``ANY(m, E1, ..., En)``: occurs when m of the n distinct events have occurred,
    in any order. ``1 <= m <= n``; the events must be distinct."""

    __slots__ = ()
    op = "ANY"

    def __init__(self, m: int, *events: Expression) -> None:
        if isinstance(m, bool) or not isinstance(m, int):
            raise ExpressionError(f"ANY needs an integer count first, not {m!r}")
        if len(events) < 2:
            raise ExpressionError(f"ANY needs at least two events, got {len(events)}")
        for e in events:
            _check(e, "ANY")
        if not 1 <= m <= len(events):
            raise ExpressionError(
                f"ANY({m}, ...) over {len(events)} events: m must be between 1 and {len(events)}"
            )
        if len(set(events)) != len(events):
            dup = next(e for e in events if events.count(e) > 1)
            raise ExpressionError(
                f"ANY lists {shortened(str(dup))} more than once; its events must be distinct"
            )
        self._init(m, *events)

    @property
    def m(self) -> int:
        return self._args[0]  # type: ignore[no-any-return]


class _Ternary(Expression):
    __slots__ = ()

    def __init__(self, start: Expression, middle: Expression, end: Expression) -> None:
        self._init(_check(start, self.op), _check(middle, self.op), _check(end, self.op))

    @property
    def start(self) -> Expression:
        return self._args[0]  # type: ignore[no-any-return]

    @property
    def middle(self) -> Expression:
        return self._args[1]  # type: ignore[no-any-return]

    @property
    def end(self) -> Expression:
        return self._args[2]  # type: ignore[no-any-return]


class A(_Ternary):
    """``A(E1, E2, E3)``: occurs at each E2 inside the interval opened by E1 and
    closed by E3 (E1 < E2 <= E3)."""

    __slots__ = ()
    op = "A"


class Astar(_Ternary):
    """``A*(E1, E2, E3)``: occurs once, at E3, with every E2 of the interval opened
    by E1 (possibly none)."""

    __slots__ = ()
    op = "A*"


class Not(Expression):
    """``NOT(E2)[E1, E3]``: occurs at E3 when no E2 occurred in the closed interval
    from E1 to E3. Argument order follows the text: ``Not(middle, start, end)``."""

    __slots__ = ()
    op = "NOT"

    def __init__(self, middle: Expression, start: Expression, end: Expression) -> None:
        # Stored in interval order (start, middle, end) like A and A*.
        self._init(_check(start, "NOT"), _check(middle, "NOT"), _check(end, "NOT"))

    @property
    def start(self) -> Expression:
        return self._args[0]  # type: ignore[no-any-return]

    @property
    def middle(self) -> Expression:
        return self._args[1]  # type: ignore[no-any-return]

    @property
    def end(self) -> Expression:
        return self._args[2]  # type: ignore[no-any-return]

    @classmethod
    def _from_args(cls, *args: t.Any) -> Expression:
        start, middle, end = args
        return cls(middle, start, end)


class Keyed(Expression):
    """``E by key``: E detected separately for each value of ``key`` (see
    :meth:`Expression.by`)."""

    __slots__ = ()
    op = "BY"

    def __init__(self, expression: Expression, key: KeySpec) -> None:
        _check(expression, "by")
        if key is not SOURCE and not (isinstance(key, str) and _IDENT.match(key)):
            raise ExpressionError(f"a partition key is a parameter name or SOURCE, not {key!r}")
        self._init(expression, key)

    @property
    def expression(self) -> Expression:
        return self._args[0]  # type: ignore[no-any-return]

    @property
    def key(self) -> KeySpec:
        return self._args[1]  # type: ignore[no-any-return]
