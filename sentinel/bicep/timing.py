"""The timing primitives as SQL over a class's change table, and the check
that a statement's condition can hold at all.

:func:`primitive_sql` is the one definition of each primitive (the processor's
statements use it, :mod:`sentinel.bicep.conditions` lists the readings). The
check (:func:`never_holds`) runs that same SQL over every kind of row the
change table can hold, its times taken relative to the tick, so that a
condition whose primitives exclude each other (``FUTURE AND LATE``,
``ANNOUNCEMENT AND REVOCATION``) is refused when the program is compiled,
not left to fire never.
"""

from __future__ import annotations

import itertools
import sqlite3
from contextlib import closing

from sentinel.bicep import model as m

__all__ = ["never_holds", "primitive_sql"]

#: The most comparisons and FIREDs a condition may hold for the check to run
#: (it tries each as true, false and unknown: 3 ** n times each row).
MAX_FREE = 6


def primitive_sql(p: m.Timing, tick: str) -> str:
    """The timing primitive ``p`` as SQL over the change table ``c`` at the tick
    ``tick`` (SQL text; :mod:`sentinel.bicep.conditions` lists the readings)."""
    touched = "c.touched = 1"
    before = "c.o_present = 1"
    after = "c.n_present = 1"
    change = f"{touched} AND {before} AND {after}"
    occurred = f"c.o_occ_tick <= {tick}"
    sql = {
        "ANNOUNCEMENT": f"{touched} AND c.o_present = 0 AND {after}",
        "CHANGE": change,
        "REVOCATION": f"{touched} AND {before} AND c.n_present = 0",
        "ONTIME": f"{after} AND c.n_occ_tick = {tick}",
        "FUTURE": (
            f"{touched} AND {after} AND c.n_occ_tick > {tick} "
            f"AND (c.o_present = 0 OR c.o_occ_tick > {tick})"
        ),
        "LATE": (
            f"{touched} AND {after} AND c.n_occ_tick < {tick} "
            f"AND (c.o_present = 0 OR c.o_occ_tick > {tick})"
        ),
        "RETROACTIVECHANGE": f"{change} AND {occurred} AND c.n_occ_tick <= {tick}",
        "POSTPONE": f"{change} AND {occurred} AND c.n_occ_tick > {tick}",
        "CANCELLATION": (
            f"{touched} AND {before} AND (c.n_present = 0 OR "
            f"(c.n_present = 1 AND {occurred} AND c.n_occ_tick > {tick}))"
        ),
    }[p.primitive]
    if p.primitive == "LATE" and p.low is not None:
        sql += f" AND {tick} - c.n_occ_tick BETWEEN {p.low} AND {p.high}"
    return f"({sql})"


def never_holds(cond: m.Condition) -> bool:
    """Whether no row of a change table can satisfy ``cond``.

    Each row kind is tried: touched or not, a version before and after or
    not, each version's occurrence time before, at or after the tick (or
    none). Comparisons, ``FIRED`` and the bounds of ``LATE(a, b)`` are taken
    as free (true, false or unknown, each on its own), so the answer is
    ``True`` only when the timing primitives alone rule every row out; it is
    ``False`` when the condition has more than :data:`MAX_FREE` of those."""
    free: list[str] = []

    def sql(c: m.Condition) -> str:
        if isinstance(c, m.Timing):
            if c.low is None:
                return primitive_sql(c, "0")
            free.append(f"f{len(free)}")  # LATE(a, b): LATE, and its bounds free
            return f"({primitive_sql(m.Timing('LATE', c.pos), '0')} AND {free[-1]}.v = 1)"
        if isinstance(c, (m.Fired, m.Compare)):
            free.append(f"f{len(free)}")
            return f"({free[-1]}.v = 1)"
        if isinstance(c, m.Not):
            return f"(NOT {sql(c.condition)})"
        op = "AND" if isinstance(c, m.And) else "OR"
        return f"({sql(c.left)} {op} {sql(c.right)})"

    where = sql(cond)
    if len(free) > MAX_FREE:
        return False
    flags = (0, 1)
    times = (None, -1, 0, 1)
    joins = "".join(f", f AS {name}" for name in free)
    with closing(sqlite3.connect(":memory:")) as db:
        db.execute("CREATE TABLE c (touched, o_present, n_present, o_occ_tick, n_occ_tick)")
        db.executemany(
            "INSERT INTO c VALUES (?, ?, ?, ?, ?)",
            itertools.product(flags, flags, flags, times, times),
        )
        db.execute("CREATE TABLE f (v)")
        db.executemany("INSERT INTO f VALUES (?)", [(0,), (1,), (None,)])
        (found,) = db.execute(f"SELECT EXISTS (SELECT 1 FROM c{joins} WHERE {where})").fetchone()
    return not found
