"""Immutable values equal by structure: what Snoop expressions and Ode terms share.

An :class:`~sentinel.algebra.expressions.Expression` and an
:class:`~sentinel.ode.terms.Term` are each a tuple of stored arguments (``_args``:
operands and plain values, in operator order) with its hash computed once. Both
algebras build on :class:`Structural`: immutability, equality and hashing by
those arguments, and the operands among them (``children``). :func:`arg` names
a stored argument.
"""

from __future__ import annotations

import typing as t

__all__ = ["Structural", "arg"]

N = t.TypeVar("N")


def arg(index: int, doc: str | None = None) -> t.Any:
    """A read-only attribute: the ``index``-th stored argument. Written with the
    attribute's type, ``start: Expression = arg(0)``."""

    def get(self: Structural[t.Any]) -> t.Any:
        return self._args[index]

    return property(get, doc=doc)


class Structural(t.Generic[N]):
    """Base of immutable values equal and hashed by their stored arguments.

    A subclass stores its arguments with :meth:`_init` and names the class whose
    instances among them are its operands in ``operand_type`` (the root of its
    algebra: an expression's operands are expressions, a term's terms).
    """

    __slots__ = ("_args", "_hash")
    _args: tuple[t.Any, ...]
    _hash: int

    #: Which stored arguments are operands: instances of this class (``N``).
    operand_type: t.ClassVar[type]

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
        assert isinstance(other, Structural)
        return self._hash == other._hash and self._same_args(other)

    def _same_args(self, other: Structural[t.Any]) -> bool:
        """Whether ``other``, of this class and with this hash, stores equal
        arguments."""
        return self._args == other._args

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self}>"

    @property
    def children(self) -> tuple[N, ...]:
        """The operands, in operator order."""
        kind: t.Any = self.operand_type
        return tuple(a for a in self._args if isinstance(a, kind))

    def _args_with(self, children: t.Iterable[N]) -> list[t.Any]:
        """The stored arguments with the operands replaced by ``children``, in
        order (for ``with_children``)."""
        it = iter(children)
        kind: t.Any = self.operand_type
        return [next(it) if isinstance(a, kind) else a for a in self._args]
