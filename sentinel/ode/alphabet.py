"""The alphabet an Ode automaton reads: one symbol per kind of point.

A point of the history is one occurrence of the universe's primitive events.
Primitive events of different channels never share an occurrence; events of one
channel may (a class-level and an instance-level event of one call), so a point
is the *set* of universe events it matches, together with the truth of each mask
used on them and, for attribute expressions, whether each bound parameter holds
the machine's own value. Each combination is one symbol: the alphabet's
*minterms*. A letter (a masked primitive event) is the set of symbols where its
event is present and its mask holds.

Symbols of one channel group are numbered from the group's base: for the set T of
universe events present, ``base(T) + sum(weight * bit)`` over T's masks and
bound parameters, so a handler turns an arrival into its symbol with a few
predicate calls.
"""

from __future__ import annotations

import typing as t
from itertools import combinations

from sentinel.algebra.expressions import Primitive
from sentinel.algebra.masks import Predicate, Variable
from sentinel.errors import ExpressionError
from sentinel.ode.terms import Letter

__all__ = ["MAX_SYMBOLS", "Alphabet"]

#: The most symbols an alphabet may have.
MAX_SYMBOLS: t.Final = 4096

Bit = tuple[str, int, t.Any]  # ("mask", universe index, predicate) | ("attr", index, param)


class Alphabet:
    """The symbols of an Ode event's history.

    ``universe`` lists the primitive events in slot order; ``masks[i]`` the
    distinct masks used on event ``i`` and ``attrs[i]`` its parameters bound to
    the attribute variable. Equal alphabets compare equal (the compiler caches
    automata per term and alphabet).
    """

    __slots__ = ("_hash", "attrs", "combos", "k", "masks", "symbols", "universe")

    def __init__(
        self,
        universe: t.Sequence[Primitive],
        masks: t.Sequence[t.Sequence[Predicate]] | None = None,
        attrs: t.Sequence[t.Sequence[str]] | None = None,
    ) -> None:
        self.universe = tuple(universe)
        n = len(self.universe)
        if not n:
            raise ExpressionError(
                "an empty universe: an Ode event reads the history of at least one "
                "primitive event (name one in the expression or in over(...))"
            )
        self.masks = tuple(tuple(m) for m in (masks or [()] * n))
        self.attrs = tuple(tuple(a) for a in (attrs or [()] * n))
        self._hash = hash((self.universe, self.masks, self.attrs))
        groups: dict[str, list[int]] = {}
        for i, u in enumerate(self.universe):
            groups.setdefault(u.name, []).append(i)
        #: frozenset of present events -> (base symbol, bits in order with weights)
        self.combos: dict[frozenset[int], tuple[int, tuple[tuple[Bit, int], ...]]] = {}
        #: symbol -> (present events, the bits that hold)
        self.symbols: list[tuple[frozenset[int], frozenset[Bit]]] = []
        for members in groups.values():
            for size in range(1, len(members) + 1):
                for present in combinations(members, size):
                    bits: list[Bit] = []
                    for i in present:
                        bits.extend(("mask", i, m) for m in self.masks[i])
                        bits.extend(("attr", i, p) for p in self.attrs[i])
                    base = len(self.symbols)
                    count = 1 << len(bits)
                    if base + count > MAX_SYMBOLS:
                        raise ExpressionError(
                            f"the universe's masks and events make more than {MAX_SYMBOLS} "
                            "kinds of points; use fewer masks on one event or fewer events "
                            "of one channel"
                        )
                    weights = tuple((b, 1 << j) for j, b in enumerate(bits))
                    key = frozenset(present)
                    self.combos[key] = (base, weights)
                    for code in range(count):
                        held = frozenset(b for b, w in weights if code & w)
                        self.symbols.append((key, held))
        self.k = len(self.symbols)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Alphabet):
            return NotImplemented
        return (self.universe, self.masks, self.attrs) == (other.universe, other.masks, other.attrs)

    def __hash__(self) -> int:
        return self._hash

    def index(self, event: Primitive) -> int:
        try:
            return self.universe.index(event)
        except ValueError:
            names = ", ".join(u.label for u in self.universe)
            raise ExpressionError(f"{event.label} is not in the universe ({names})") from None

    def letter(self, letter: Letter, variable: Variable | None = None) -> frozenset[int]:
        """The symbols at which ``letter`` is satisfied (its bindings read as "holds
        the machine's own value")."""
        i = self.index(letter.event)
        need: set[Bit] = set()
        if letter.mask is not None:
            need.add(("mask", i, letter.mask))
        for p, v in letter.bindings:
            if variable is None or v != variable:
                raise ExpressionError(f"attribute variable {v.name} has no table here")
            need.add(("attr", i, p))
        return frozenset(
            s for s, (present, held) in enumerate(self.symbols) if i in present and need <= held
        )

    def all_symbols(self) -> frozenset[int]:
        return frozenset(range(self.k))

    def other(self) -> frozenset[int]:
        """The symbols in which no bound parameter holds the machine's value (what a
        machine reads for an event of another attribute value, or none)."""
        return frozenset(
            s for s, (_p, held) in enumerate(self.symbols) if not any(b[0] == "attr" for b in held)
        )

    def __repr__(self) -> str:
        names = ", ".join(u.label for u in self.universe)
        return f"<Alphabet of {self.k} symbols over {names}>"
