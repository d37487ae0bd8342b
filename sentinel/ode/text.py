"""Ode terms as text: the printer behind ``str(term)`` and an Ode event's
``ode{...}``, and the words the text reserves.

The printer reads what each term class says it is, its ``op`` (the operator's
name in errors and in the text syntax), so it sits below the term classes:
:meth:`~sentinel.ode.terms.Term.__str__` and
:meth:`~sentinel.ode.event.OdeEvent.to_text` call it, and the parser
(:mod:`sentinel.ode.syntax`) reads back what it prints.
"""

from __future__ import annotations

import re
import typing as t

if t.TYPE_CHECKING:
    from sentinel.algebra.expressions import Primitive
    from sentinel.ode.terms import Term

__all__ = ["CALLS", "KEYWORDS", "event_text", "name_text", "term_text"]

#: The words Ode text calls an operator by, ``word(...)``, and the operator
#: (its ``op``) each calls.
CALLS: t.Final = {
    "relative": "relative",
    "rel": "relative",
    "prior": "prior",
    "sequence": "sequence",
    "seq": "sequence",
    "firstAfter": "firstAfter",
    "before": "before",
    "happened": "happened",
    "prefix": "prefix",
}
#: The other words an event name cannot be without quotes (the constants
#: ``NULL``, ``any`` and ``first`` among them).
KEYWORDS: t.Final = frozenset(
    {"every", "exists", "over", "true", "false", "null", "NULL", "any", "first"}
)
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[.:][A-Za-z_][A-Za-z0-9_]*)*\Z")

#: How tightly each operator binds in text (by ``op``); an operand binding less
#: tightly than its operator is parenthesised.
_PREC: dict[str, int] = {
    "exists": 0,
    "|": 1,
    "∨": 2,
    "∧": 3,
    "/": 4,
    "/+": 4,
    "*": 5,
    "!": 6,
    "<n>": 6,
    "every": 6,
    "=": 7,
}
_ATOM = 8
_INFIX = {"|": " | ", "∨": " || ", "∧": " ^ ", "/": " / ", "/+": " /+ ", "*": " * "}
#: The operators written as calls, each by its ``op``.
_CALLED = frozenset({*CALLS.values(), "relative+"})
_CONSTANTS = {"NULL": "NULL", "any": "any", "first": "first"}


def name_text(label: str, *, call: bool = False) -> str:
    """An event name as Ode text (quoted unless it is a plain name that is not a
    keyword, or, before ``(``, an operator)."""
    if _PLAIN.match(label) and label not in KEYWORDS and not (call and label in CALLS):
        return label
    return "'" + label.replace("\\", "\\\\").replace("'", "\\'") + "'"


def term_text(term: Term) -> str:
    """``term`` as Ode text, with only the parentheses it needs."""
    x: t.Any = term  # each operator's own fields, found by its op
    op = x.op
    if op == "event":
        binds = x.bindings
        out = name_text(x.event.label, call=bool(binds))
        if binds:
            out += "(" + ", ".join(f"{p} = {v.name}" for p, v in binds) + ")"
        if x.mask is not None:
            out += f"[{x.mask}]"
        return out
    if op in _CONSTANTS:
        return _CONSTANTS[op]
    if op == "variable":
        return str(x.name)
    if op == "scoped":
        return term_text(x.children[0])
    if op in _INFIX:
        prec = _PREC[op]
        left, right = x.children
        return _wrap(left, prec, False) + _INFIX[op] + _wrap(right, prec, True)
    if op == "!":
        return "!" + _wrap(x.children[0], 6, False)
    if op == "<n>":
        return f"<{x.n}> " + _wrap(x.children[0], 6, False)
    if op == "every":
        return f"every <{x.n}> " + _wrap(x.children[0], 6, False)
    if op == "=":
        return _wrap(x.children[0], 8, False) + f" = {x.variable}"
    if op == "exists":
        return f"exists {', '.join(x.variables)}: " + term_text(x.children[0])
    if op in _CALLED:
        return f"{op}(" + ", ".join(term_text(c) for c in x.children) + ")"
    raise TypeError(f"cannot print {type(term).__name__}")


def _wrap(child: Term, prec: int, right: bool) -> str:
    p = _PREC.get(child.op, _ATOM)
    inner = term_text(child)
    if p < prec or (right and p == prec):
        return f"({inner})"
    return inner


def event_text(term: Term, over: t.Sequence[Primitive] | None) -> str:
    """An Ode event's text: the term, then ``over (...)`` when the universe was
    declared."""
    out = term_text(term)
    if over is not None:
        out += " over (" + ", ".join(name_text(u.label) for u in over) + ")"
    return out
