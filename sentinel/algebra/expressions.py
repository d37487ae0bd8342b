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

from sentinel.algebra.structural import Structural, arg
from sentinel.errors import ExpressionError, shortened

__all__ = [
    "SOURCE",
    "A",
    "And",
    "Any",
    "Astar",
    "Call",
    "Expression",
    "Interval",
    "KeySpec",
    "Keyed",
    "Not",
    "Or",
    "Primitive",
    "Seq",
    "call_form",
    "call_keywords",
    "text_prefix",
    "text_within",
    "to_text",
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
#: What an event name cannot hold: C0 control characters and DEL.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_KEYWORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?\Z")

#: The call-form operators of Snoop text: keyword -> the expression class that
#: declares it in ``keywords`` (filled when such a class is defined).
_CALL_FORMS: dict[str, type[Expression]] = {}


def call_form(keyword: str) -> type[Expression] | None:
    """The expression class written ``keyword(...)`` in Snoop text (``"A*"`` for
    A*), or ``None``."""
    return _CALL_FORMS.get(keyword)


def call_keywords() -> tuple[str, ...]:
    """Every call-form keyword, in the order the classes were defined."""
    return tuple(_CALL_FORMS)


#: The operators of modules above this one that the Python spelling of its
#: classes builds: ``"relative"`` (``E + [t]``, :class:`sentinel.algebra.temporal.Relative`)
#: and ``"masked"`` (``E.where(...)``, :func:`sentinel.algebra.masks.masked`).
#: Those modules subclass :class:`Expression`, so this one cannot import them:
#: ``sentinel/algebra/__init__.py`` installs them, in one statement, when the
#: package is imported (importing this module imports the package first).
BUILT_ABOVE: dict[str, t.Callable[..., Expression]] = {}


class Interval(t.NamedTuple):
    """``[t] name`` among a call's arguments in Snoop text (``P(E1, [t], E3)``,
    ``P*(E1, [t] price, E3)``): the duration read from ``[t]``, the name after it
    (or ``None``), and where ``[t]`` starts in the text (1-based)."""

    duration: t.Any  # a sentinel.algebra.temporal.Duration
    name: str | None
    line: int
    column: int

    def error(self, message: str) -> ExpressionError:
        """An error the parser reports at this interval rather than at the
        operator's name."""
        e = ExpressionError(message)
        e.position = (self.line, self.column)  # type: ignore[attr-defined]
        return e


class Call(t.NamedTuple):
    """A call-form operator as Snoop text writes it, ``OP(args)[bracket]``,
    handed to the class's :meth:`Expression.from_call`.

    ``args`` holds event expressions, counts (``int``, as ANY's first argument)
    and :class:`Interval` values, in the order written; ``bracket`` is the pair
    of expressions in square brackets after the call (NOT's interval), or
    ``None``.
    """

    keyword: str
    args: tuple[t.Any, ...]
    bracket: tuple[Expression, Expression] | None = None

    def expressions(self, n: int | None = None) -> tuple[Expression, ...]:
        """The arguments, which must be ``n`` event expressions (any number of
        them, at least one, when ``n`` is ``None``)."""
        args = self.args
        count_ok = len(args) == n if n is not None else len(args) >= 1
        if not count_ok or not all(isinstance(a, Expression) for a in args):
            many = n if n is not None else "one or more"
            raise ExpressionError(
                f"{self.keyword} takes {many} event expression(s), got {self.described()}"
            )
        return args

    def refuse_bracket(self) -> None:
        """Raise unless the call has no interval in brackets after it."""
        if self.bracket is not None:
            takes = [k for k, c in _CALL_FORMS.items() if c.call_bracket]
            who = " or ".join(takes) or "no operator"
            raise ExpressionError(f"only {who} takes an interval in brackets, not {self.keyword}")

    def described(self) -> str:
        """The arguments' kinds, for an error: ``2 argument(s): an event, a count``."""
        if not self.args:
            return "none"
        kinds = [
            "an interval"
            if isinstance(a, Interval)
            else "a count"
            if isinstance(a, int)
            else "an event"
            for a in self.args
        ]
        return f"{len(self.args)} argument(s): " + ", ".join(kinds)


class Expression(Structural["Expression"]):
    """Base of every event expression. Immutable; equal by structure."""

    __slots__ = ()

    #: Operator name used in errors and by the printer.
    op: t.ClassVar[str] = "?"

    # -- what an operator says about itself -----------------------------------------
    # Everything the rest of sentinel needs to know about an operator is on its
    # class: how Snoop text writes it (``keywords``, :meth:`from_call`,
    # :meth:`text_parts`), whether detecting it reads parameters
    # (``reads_parameters``, :meth:`parameters_read`) and which module holds its
    # detection strategies (``strategies``). docs/architecture.md, "To add an
    # operator", walks through one.

    #: The keywords Snoop text calls this operator by (``("A",)``: ``A(E1, E2,
    #: E3)``; a trailing ``*`` as in ``"A*"``). Defining a class with keywords
    #: makes the parser read them (see :func:`call_form`).
    keywords: t.ClassVar[tuple[str, ...]] = ()
    #: How many event expressions the call takes (the default :meth:`from_call`);
    #: ``None``: one or more.
    call_arity: t.ClassVar[int | None] = None
    #: Whether the call takes an interval in brackets after it (NOT).
    call_bracket: t.ClassVar[bool] = False
    #: Whether detecting this operator reads its occurrences' parameters. True
    #: unless the class says otherwise, so that replay keeps every parameter of
    #: an operator it knows nothing about (``sentinel.replay.rules``).
    reads_parameters: t.ClassVar[bool] = True
    #: The module whose import registers this operator's detection strategies
    #: (``sentinel.detector.operators.strategy``); the detector imports it the
    #: first time it wires the operator. ``None``: registered some other way.
    strategies: t.ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: t.Any) -> None:
        super().__init_subclass__(**kwargs)
        for keyword in cls.__dict__.get("keywords", ()):
            if not isinstance(keyword, str) or not _KEYWORD.match(keyword):
                raise ExpressionError(
                    f"{cls.__name__}.keywords: {keyword!r} is not a keyword Snoop text can "
                    "call (a name, optionally followed by '*')"
                )
            known = _CALL_FORMS.get(keyword)
            if known is not None and _qualname(known) != _qualname(cls):
                raise ExpressionError(
                    f"{cls.__name__}.keywords: {keyword} already names {_qualname(known)}"
                )
            _CALL_FORMS[keyword] = cls

    @classmethod
    def from_call(cls, call: Call) -> Expression:
        """The expression Snoop text ``call`` (``KEYWORD(args)``) stands for. The
        default takes ``call_arity`` event expressions and no brackets; raise
        :class:`~sentinel.errors.ExpressionError` for arguments that do not fit
        (the parser reports it at the keyword, or at an :class:`Interval` whose
        :meth:`~Interval.error` made it)."""
        call.refuse_bracket()
        return cls(*call.expressions(cls.call_arity))

    def text_parts(self) -> list[Expression | str] | None:
        """How the printer writes this expression: pieces of text and operands,
        in order (the printer prints the operands, so any depth prints without
        recursion). The default writes a call-form operator's first keyword
        with its arguments; ``None`` leaves it to :meth:`to_text` (or to the
        printer's own rules: names, infix operators, ``by``)."""
        if not self.keywords:
            return None
        return [f"{self.keywords[0]}(", *_listed(self._args), ")"]

    def parameters_read(self) -> tuple[str, ...] | None:
        """Which parameters of its primitive events' occurrences detecting this
        operator reads: ``()`` none, names, or ``None`` for every one. Operands
        answer for themselves."""
        return None if self.reads_parameters else ()

    def _same_args(self, other: Structural[t.Any]) -> bool:
        # Operand by operand with a stack, not recursively: expressions of any
        # depth compare. A pair already compared is not compared again, so
        # shared sub-expressions cost once, not once per path to them.
        assert isinstance(other, Expression)
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
        return cls(*args)

    def with_children(self, children: t.Sequence[Expression]) -> Expression:
        """A copy with the operands replaced, in order."""
        return self._from_args(*self._args_with(children))

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
        return BUILT_ABOVE["relative"](self, offset)

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
        return to_text(self)


Expression.operand_type = Expression


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _listed(args: t.Sequence[t.Any]) -> list[t.Any]:
    """``args`` with ``", "`` between them (operands stay expressions, for the
    printer; other values become their text)."""
    items: list[t.Any] = []
    for i, a in enumerate(args):
        if i:
            items.append(", ")
        items.append(a if isinstance(a, Expression) else str(a))
    return items


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
    reads_parameters = False
    strategies = None  # a leaf of the event graph, no strategy
    label: str

    def __init__(self, name: str, selector: t.Hashable | None = None, label: str | None = None):
        if not isinstance(name, str) or not name:
            raise ExpressionError(f"a primitive event needs a non-empty name, not {name!r}")
        if _CONTROL.search(name):
            # a NUL cannot be stored in PostgreSQL's text, and no name is read with one
            raise ExpressionError(
                f"an event name cannot hold a control character (a NUL, a line break): {name!r}"
            )
        self._init(name, selector)
        object.__setattr__(self, "label", label or name)

    name: str = arg(0)
    selector: t.Hashable | None = arg(1)

    def _reduce_node(self) -> tuple[t.Callable[..., Expression], tuple[t.Any, ...]]:
        return (Primitive, (self._args[0], self._args[1], self.label))

    def with_children(self, children: t.Sequence[Expression]) -> Expression:
        return self

    def where(self, spec: t.Any = None, /, **equal: t.Any) -> t.Any:
        """This event masked by a predicate on its parameters (a
        :class:`~sentinel.algebra.masks.Masked` expression): ``deposit.where("amount
        > 1000")``, ``deposit.where(param("amount") > 1000)`` or
        ``deposit.where(currency="EUR")``. See :mod:`sentinel.algebra.masks`."""
        return BUILT_ABOVE["masked"](self, spec, **equal)


class _Binary(Expression):
    __slots__ = ()

    def __init__(self, left: Expression, right: Expression) -> None:
        self._init(_check(left, self.op), _check(right, self.op))

    left: Expression = arg(0)
    right: Expression = arg(1)


class Or(_Binary):
    """``E1 | E2``: occurs when E1 or E2 occurs (once, if one occurrence reaches
    both)."""

    __slots__ = ()
    op = "OR"
    reads_parameters = False
    strategies = "sentinel.detector.operators.disj"


class And(_Binary):
    """``E1 ^ E2``: occurs when both have occurred, in either order (equal times
    allowed; an occurrence never pairs with itself)."""

    __slots__ = ()
    op = "AND"
    reads_parameters = False
    strategies = "sentinel.detector.operators.conj"


class Seq(_Binary):
    """``E1 ; E2``: occurs when E2 occurs strictly after E1."""

    __slots__ = ()
    op = "SEQ"
    reads_parameters = False
    strategies = "sentinel.detector.operators.seq"


class Any(Expression):
    """``ANY(m, E1, ..., En)``: occurs when m of the n distinct events have occurred,
    in any order. ``1 <= m <= n``; the events must be distinct."""

    __slots__ = ()
    op = "ANY"
    keywords = ("ANY",)
    reads_parameters = False
    strategies = "sentinel.detector.operators.conj"

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

    m: int = arg(0)

    @classmethod
    def from_call(cls, call: Call) -> Expression:
        call.refuse_bracket()
        args = call.args
        if not args or not isinstance(args[0], int):
            raise ExpressionError("ANY takes a count first: ANY(m, E1, ..., En)")
        rest = args[1:]
        if not all(isinstance(a, Expression) for a in rest):
            raise ExpressionError("ANY takes one count and then event expressions")
        return cls(args[0], *rest)


class _Ternary(Expression):
    __slots__ = ()
    call_arity = 3
    reads_parameters = False
    strategies = "sentinel.detector.operators.aperiodic"

    def __init__(self, start: Expression, middle: Expression, end: Expression) -> None:
        self._init(_check(start, self.op), _check(middle, self.op), _check(end, self.op))

    start: Expression = arg(0)
    middle: Expression = arg(1)
    end: Expression = arg(2)


class A(_Ternary):
    """``A(E1, E2, E3)``: occurs at each E2 inside the interval opened by E1 and
    closed by E3 (E1 < E2 <= E3)."""

    __slots__ = ()
    op = "A"
    keywords = ("A",)


class Astar(_Ternary):
    """``A*(E1, E2, E3)``: occurs once, at E3, with every E2 of the interval opened
    by E1 (possibly none)."""

    __slots__ = ()
    op = "A*"
    keywords = ("A*",)


class Not(Expression):
    """``NOT(E2)[E1, E3]``: occurs at E3 when no E2 occurred in the closed interval
    from E1 to E3. Argument order follows the text: ``Not(middle, start, end)``."""

    __slots__ = ()
    op = "NOT"
    keywords = ("NOT",)
    call_bracket = True
    reads_parameters = False
    strategies = "sentinel.detector.operators.negation"

    def __init__(self, middle: Expression, start: Expression, end: Expression) -> None:
        # Stored in interval order (start, middle, end) like A and A*.
        self._init(_check(start, "NOT"), _check(middle, "NOT"), _check(end, "NOT"))

    start: Expression = arg(0)
    middle: Expression = arg(1)
    end: Expression = arg(2)

    @classmethod
    def _from_args(cls, *args: t.Any) -> Expression:
        start, middle, end = args
        return cls(middle, start, end)

    @classmethod
    def from_call(cls, call: Call) -> Expression:
        (middle,) = call.expressions(1)
        if call.bracket is None:
            raise ExpressionError("NOT needs its interval: NOT(E2)[E1, E3]")
        return cls(middle, call.bracket[0], call.bracket[1])

    def text_parts(self) -> list[Expression | str]:
        return ["NOT(", self.middle, ")[", self.start, ", ", self.end, "]"]


class Keyed(Expression):
    """``E by key``: E detected separately for each value of ``key`` (see
    :meth:`Expression.by`)."""

    __slots__ = ()
    op = "BY"
    strategies = None  # a region of the graph (detector/regions.py), no strategy

    def __init__(self, expression: Expression, key: KeySpec) -> None:
        _check(expression, "by")
        if key is not SOURCE and not (isinstance(key, str) and _IDENT.match(key)):
            raise ExpressionError(f"a partition key is a parameter name or SOURCE, not {key!r}")
        self._init(expression, key)

    expression: Expression = arg(0)
    key: KeySpec = arg(1)

    def parameters_read(self) -> tuple[str, ...] | None:
        """The key, read from every occurrence inside (none for ``by @source``)."""
        return () if self.key is SOURCE else (str(self.key),)


# -- printing: Snoop text (str(expr); sentinel.algebra.syntax reads it) -------------

_PREC = {Or: 1, Seq: 2, And: 3, Keyed: 4}
_ATOM = 5
_INFIX = {Or: " | ", Seq: " ; ", And: " ^ "}
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[.:][A-Za-z_][A-Za-z0-9_]*)*\Z")


def _name_text(label: str) -> str:
    if _PLAIN_NAME.match(label) and label != "by":
        return label
    return "'" + label.replace("\\", "\\\\").replace("'", "\\'") + "'"


def to_text(expr: Expression) -> str:
    """Print ``expr`` as Snoop text, with only the parentheses the text needs.

    Iterative: an expression of any depth prints (thousands of terms of
    ``a | b | ...``) without exhausting Python's recursion limit.
    """
    text, _whole = _print(expr, None, None)
    return text


def text_within(
    expr: Expression,
    budget: int | None = None,
    refs: t.Mapping[Expression, str] | None = None,
) -> str | None:
    """:func:`to_text`, with two ways to keep the text short: ``budget`` (at most
    that many steps of printing, each an operator, an operand or a piece of text;
    ``None`` when the text needs more) and ``refs`` (sub-expressions printed as
    the text they map to, like ``#12`` for a node of the event graph). The cost
    is bounded by the budget, whatever the expression's depth."""
    text, whole = _print(expr, budget, refs)
    return text if whole else None


def text_prefix(expr: Expression, chars: int) -> tuple[str, bool]:
    """The beginning of :func:`to_text`'s text of ``expr``, cut after the piece
    (a name, an operator, a parenthesis) that makes it ``chars`` characters or
    more, and whether that is the whole text. The cost is bounded by ``chars``
    and the expression's depth, whatever its size (a sub-expression used twice
    at each of n levels prints 2**n times)."""
    return _print(expr, None, None, chars)


def _print(
    expr: Expression,
    budget: int | None,
    refs: t.Mapping[Expression, str] | None,
    chars: int | None = None,
) -> tuple[str, bool]:
    """The text of ``expr``, and True; or, when it takes more than ``budget``
    steps or ``chars`` characters, the text written so far, and False."""
    out: list[str] = []
    todo: list[Expression | str] = [expr]
    steps = 0
    written = counted = 0  # characters in out[:counted]
    while todo:
        if chars is not None:
            while counted < len(out):
                written += len(out[counted])
                counted += 1
            if written >= chars:
                return "".join(out), False
        e = todo.pop()
        if budget is not None:
            steps += 1
            if steps > budget:
                return "".join(out), False
        if isinstance(e, str):
            out.append(e)
            continue
        if refs and e in refs:
            out.append(refs[e])
            continue
        cls = type(e)
        if cls is Primitive:
            assert isinstance(e, Primitive)
            out.append(_name_text(e.label))
        elif cls in _INFIX:
            prec = _PREC[cls]
            left, right = e._args
            parts = [*_wrap(left, prec, False, refs), _INFIX[cls], *_wrap(right, prec, True, refs)]
            todo.extend(reversed(parts))
        elif cls is Keyed:
            assert isinstance(e, Keyed)
            key = "@source" if e.key is SOURCE else str(e.key)
            todo.extend(reversed([*_wrap(e.expression, 4, False, refs), " by " + key]))
        else:
            # Other operators say how they print: text and operands (call-form
            # and temporal ones), or their whole text given a printer for their
            # operands (embedded languages: Ode, masks).
            pieces = e.text_parts()
            if pieces is not None:
                todo.extend(reversed(pieces))
                continue
            whole = getattr(e, "to_text", None)
            if whole is None:
                raise TypeError(f"cannot print {cls.__name__}")
            out.append(whole(to_text))
    return "".join(out), True


def _wrap(
    child: Expression, prec: int, right: bool, refs: t.Mapping[Expression, str] | None
) -> list[Expression | str]:
    p = _ATOM if refs and child in refs else _PREC.get(type(child), _ATOM)
    if p < prec or (right and p == prec):
        return ["(", child, ")"]
    return [child]
