"""The SQL of one class of an installed program: what each step of a tick runs.

:func:`class_sql` writes, once per program and dialect, the statements a
:class:`~sentinel.bicep.pipeline.Pipeline` runs for one class at a tick: how
its changes are applied to its as-of-now and history tables, the potential
ticks and due events of ONTIME statements, a complex class's derivation from
its query (new, changed and removed events, lineage), and its statements'
``INSERT ... SELECT`` into their action tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from sentinel.bicep.compiler import CompiledClass
from sentinel.bicep.conditions import StatementSQL, mentions_ontime, statement_sql
from sentinel.bicep.readonly import ReadOnly
from sentinel.bicep.sqlpart import EID
from sentinel.bicep.tables import UNBOUNDED, ClassTables, ProgramTables, SystemTables
from sentinel.bicep.times import MAX_TIME

__all__ = ["ClassSQL", "class_sql", "same", "tick_sql"]


@dataclass
class ClassSQL:
    """The SQL of one class's steps of a tick (see :mod:`sentinel.bicep.pipeline`)."""

    cls: CompiledClass
    t: ClassTables
    keys: list[str]
    attrs: list[str]
    apply: list[str]
    potential: str | None
    due: str | None
    derive: list[str]
    #: The query's rows for the staging table (fetched under a read-only guard,
    #: see :mod:`sentinel.bicep.readonly`), and the start of their INSERT.
    derive_rows: tuple[str, str] | None
    new: str | None
    changed: str | None
    removed: str | None
    lineage: list[str]
    statements: list[StatementSQL]
    lineage_classes: tuple[str, ...] = ()
    always_derive: bool = False


def class_sql(
    cls: CompiledClass,
    t: ClassTables,
    *,
    tables: ProgramTables,
    system: SystemTables,
    chronon: int,
    dialect: str,
    read_only: ReadOnly,
) -> ClassSQL:
    """The statements of ``cls`` (its tables ``t``) for a program's ``tables``
    on ``dialect`` with ticks every ``chronon`` seconds."""
    q = tables.qualified

    def _tick(expr: str) -> str:
        return tick_sql(expr, chronon, dialect)

    def _same(a: str, b: str) -> str:
        return same(a, b, dialect)

    keys = [k.lower() for k in cls.definition.keys]
    attrs = [a.ident for a in cls.definition.attributes]
    n, h, c = q(t.now), q(t.history), q(t.changes)
    ls = cls.definition.lifespan
    base_exp = f"c.n_occtime + {ls}" if ls is not None else str(UNBOUNDED)
    a_cols = ", ".join(attrs)
    n_attrs = ", ".join(f"c.n_{a}" for a in attrs)
    apply = [
        f"DELETE FROM {n} WHERE {EID} IN (SELECT {EID} FROM {c} WHERE touched = 1)",
        f"INSERT INTO {n} ({EID}, occtime, dettime, bicep_occ_tick, bicep_base_exp, bicep_exp, "
        f"{a_cols}) SELECT c.{EID}, c.n_occtime, c.n_dettime, c.n_occ_tick, {base_exp}, "
        f"{base_exp}, {n_attrs} "
        f"FROM {c} c WHERE c.touched = 1 AND c.n_present = 1",
        f"INSERT INTO {h} ({EID}, bicep_tick, occtime, dettime, revoked, {a_cols}) "
        f"SELECT c.{EID}, :bicep_tick, c.n_occtime, c.n_dettime, 1 - c.n_present, {n_attrs} "
        f"FROM {c} c WHERE c.touched = 1",
    ]
    has_ontime = any(mentions_ontime(st.condition) for st in cls.definition.statements)
    potential = due = None
    pot = q(system.potential_ticks)
    if has_ontime:
        potential = (
            f"INSERT INTO {pot} (program, class_ident, tick) "
            f"SELECT DISTINCT :bicep_program, :bicep_class, c.n_occ_tick FROM {c} c "
            f"WHERE c.touched = 1 AND c.n_present = 1 AND c.n_occ_tick > :bicep_tick "
            f"AND NOT EXISTS (SELECT 1 FROM {pot} p WHERE p.program = :bicep_program "
            f"AND p.class_ident = :bicep_class AND p.tick = c.n_occ_tick)"
        )
        o_cols = ", ".join(f"o_{a}" for a in attrs)
        nn_cols = ", ".join(f"n_{a}" for a in attrs)
        x_attrs = ", ".join(f"x.{a}" for a in attrs)
        due = (
            f"INSERT INTO {c} ({EID}, touched, o_present, n_present, o_occtime, o_dettime, "
            f"o_occ_tick, n_occtime, n_dettime, n_occ_tick, {o_cols}, {nn_cols}) "
            f"SELECT x.{EID}, 0, 1, 1, x.occtime, x.dettime, x.bicep_occ_tick, x.occtime, "
            f"x.dettime, x.bicep_occ_tick, {x_attrs}, {x_attrs} FROM {n} x "
            f"WHERE x.bicep_occ_tick = :bicep_tick AND NOT EXISTS "
            f"(SELECT 1 FROM {c} y WHERE y.{EID} = x.{EID})"
        )
    derive: list[str] = []
    derive_rows = new = changed = removed = None
    lineage: list[str] = []
    lineage_classes: tuple[str, ...] = ()
    always = False
    if cls.complex:
        assert t.staging is not None and t.lineage is not None and cls.query is not None
        s, lt = q(t.staging), q(t.lineage)
        query, lin = tables.physical_query(cls)
        lineage_classes = lin or ()
        deps = [f"bicep_dep_{i}" for i in range(len(lineage_classes))]
        order = ", ".join(
            ["q.occtime"]
            + [x for a in attrs for x in (f"CASE WHEN q.{a} IS NULL THEN 1 ELSE 0 END", f"q.{a}")]
        )
        part = ", ".join(f"q.{k}" for k in keys)
        # (a time no datetime holds is left out like a missing one)
        not_null = " AND ".join(
            [f"q.occtime BETWEEN 0 AND {MAX_TIME}"] + [f"q.{k} IS NOT NULL" for k in keys]
        )
        s_cols = ", ".join(["occtime", *attrs, *deps, "bicep_rn"])
        q_cols = ", ".join(f"q.{c} AS {c}" for c in ["occtime", *attrs, *deps])
        rows = (
            f"SELECT {q_cols}, ROW_NUMBER() OVER (PARTITION BY {part} ORDER BY {order}) "
            f"AS bicep_rn FROM ({query}) q WHERE {not_null}"
        )
        if read_only.fetches:
            derive = [f"DELETE FROM {s}"]
            derive_rows = (rows, f"INSERT INTO {s} ({s_cols}) VALUES ")
        else:
            derive = [f"DELETE FROM {s}", f"INSERT INTO {s} ({s_cols}) {rows}"]
        on_keys = " AND ".join(f"x.{k} = s.{k}" for k in keys)
        o_cols = ", ".join(f"o_{a}" for a in attrs)
        nn_cols = ", ".join(f"n_{a}" for a in attrs)
        s_attrs = ", ".join(f"s.{a}" for a in attrs)
        x_attrs = ", ".join(f"x.{a}" for a in attrs)
        key_order = ", ".join(f"s.{k}" for k in keys)
        new = (
            f"INSERT INTO {c} ({EID}, touched, o_present, n_present, n_occtime, n_dettime, "
            f"n_occ_tick, {nn_cols}) "
            f"SELECT :bicep_base + ROW_NUMBER() OVER (ORDER BY {key_order}), 1, 0, 1, "
            f"s.occtime, :bicep_tick, {_tick('s.occtime')}, {s_attrs} FROM {s} s "
            f"WHERE s.bicep_rn = 1 AND NOT EXISTS (SELECT 1 FROM {n} x WHERE {on_keys})"
        )
        differs = " AND ".join(
            ["s.occtime = x.occtime", *(_same(f"s.{a}", f"x.{a}") for a in attrs)]
        )
        changed = (
            f"INSERT INTO {c} ({EID}, touched, o_present, n_present, o_occtime, o_dettime, "
            f"o_occ_tick, n_occtime, n_dettime, n_occ_tick, {o_cols}, {nn_cols}) "
            f"SELECT x.{EID}, 1, 1, 1, x.occtime, x.dettime, x.bicep_occ_tick, s.occtime, "
            f":bicep_tick, {_tick('s.occtime')}, {x_attrs}, {s_attrs} "
            f"FROM {s} s JOIN {n} x ON {on_keys} WHERE s.bicep_rn = 1 AND NOT ({differs})"
        )
        removed = (
            f"INSERT INTO {c} ({EID}, touched, o_present, n_present, o_occtime, o_dettime, "
            f"o_occ_tick, n_occtime, n_dettime, n_occ_tick, {o_cols}, {nn_cols}) "
            f"SELECT x.{EID}, 1, 1, 0, x.occtime, x.dettime, x.bicep_occ_tick, NULL, "
            f":bicep_tick, NULL, {x_attrs}, {x_attrs} FROM {n} x "
            f"WHERE NOT EXISTS (SELECT 1 FROM {s} s WHERE s.bicep_rn = 1 AND {on_keys})"
        )
        lineage = [f"DELETE FROM {lt}"]
        for i, dep_cls in enumerate(lineage_classes):
            lineage.append(
                f"INSERT INTO {lt} ({EID}, dep_class, dep_eid) "
                f"SELECT DISTINCT x.{EID}, '{dep_cls}', s.bicep_dep_{i} FROM {s} s "
                f"JOIN {n} x ON {on_keys} WHERE s.bicep_dep_{i} IS NOT NULL"
            )
        always = cls.query.uses_now or bool(cls.query.tables)
    statements = [
        statement_sql(cls, i, c, q(tables.actions[st.action.ident]), dialect)
        for i, st in enumerate(cls.definition.statements)
    ]
    return ClassSQL(
        cls=cls,
        t=t,
        keys=keys,
        attrs=attrs,
        apply=apply,
        potential=potential,
        due=due,
        derive=derive,
        derive_rows=derive_rows,
        new=new,
        changed=changed,
        removed=removed,
        lineage=lineage,
        statements=statements,
        lineage_classes=lineage_classes,
        always_derive=always,
    )


def tick_sql(expr: str, chronon: int, dialect: str) -> str:
    """SQL for the tick that processes the time ``expr`` (see
    :func:`~sentinel.bicep.pipeline.tick_of`)."""
    c = chronon
    div = "DIV" if dialect in ("mysql", "mariadb") else "/"
    return f"((({expr}) + {c - 1}) {div} {c}) * {c}"


def same(a: str, b: str, dialect: str) -> str:
    """SQL for ``a`` and ``b`` being equal, NULL equal to NULL."""
    if dialect == "sqlite":
        return f"{a} IS {b}"
    if dialect == "postgresql":
        return f"{a} IS NOT DISTINCT FROM {b}"
    return f"{a} <=> {b}"
