"""Installing a program: its tables, its validation, its version.

:func:`install` creates the tables of a program's classes and actions (see
:mod:`sentinel.bicep.tables`), checks every complex class's rewritten query by
running it with ``LIMIT 0`` in a savepoint (so unknown tables and columns are
reported against the program text), and records the program (its digest, text,
chronon and options) and its classes in the system tables.

Installing the same program again does nothing. A *changed* program (another
digest, chronon or option) is refused with
:class:`~sentinel.errors.BicepProgramChangedError` unless ``upgrade=True``:
then it becomes the next version. The new version starts with empty event
classes (the old version's tables are dropped, or kept renamed with
``keep=True``, see :func:`kept_name`); the clock (last tick) and the event-id
counter carry on.

A table name in use, an old table that would be kept under one, and what the
database cannot hold are refused before anything is written.

On SQLite and PostgreSQL everything happens in the caller's transaction; on
MariaDB, whose DDL commits at once, a failure drops what was created.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from sentinel.bicep.compiler import CompiledProgram, check_storage, compile_program
from sentinel.bicep.limits import name_offset
from sentinel.bicep.parser import error_at
from sentinel.bicep.readonly import read_only_for
from sentinel.bicep.sqlpart import locate_database_error
from sentinel.bicep.tables import (
    MAX_NAME,
    ProgramTables,
    SystemTables,
    index_name,
    system_tables,
)
from sentinel.errors import BicepError, BicepProgramChangedError, BicepProgramError

__all__ = ["Installed", "install", "installed", "kept_name", "uninstall"]


@dataclass(frozen=True)
class Installed:
    """A program as recorded in the database."""

    name: str
    version: int
    digest: str
    source: str
    dialect: str
    chronon: int
    options: dict[str, Any]
    last_tick: int | None
    next_eid: int


_CHECKED: set[tuple[str, str | None, str]] = set()


def _system(conn: Connection, schema: str | None, prefix: str) -> SystemTables:
    st = system_tables(schema, prefix)
    key = (repr(conn.engine.url), schema, prefix)
    if key in _CHECKED:
        return st
    if not sa.inspect(conn).has_table(st.programs.name, schema=schema):
        raise BicepError(
            f"the BiCEPL system tables ({st.programs.name}, ...) do not exist: create them with "
            f"`sentinel db upgrade --url ...`"
            + (f" --schema {schema}" if schema else "")
            + (f" --prefix {prefix}" if prefix != "sentinel_" else "")
            + " (or sentinel.log.migrate.upgrade(engine))"
        )
    _CHECKED.add(key)
    return st


def installed(
    conn: Connection,
    name: str,
    *,
    schema: str | None = None,
    prefix: str = "sentinel_",
    lock: bool = False,
) -> Installed | None:
    """The program ``name`` as installed, or ``None``. With ``lock``, its row
    stays locked until the transaction ends (ticks and installs of one program
    wait for each other and then read what the other committed)."""
    st = _system(conn, schema, prefix)
    q = sa.select(st.programs).where(st.programs.c.name == name)
    if lock and conn.dialect.name == "sqlite":
        # SQLite has no row locks, and its driver begins a transaction only at
        # the first write: write first, so the database's write lock is ours
        # before the row is read (a SELECT before it could read a row another
        # connection is about to change, and a second tick would run).
        conn.execute(
            st.programs.update()
            .where(st.programs.c.name == name)
            .values(version=st.programs.c.version)
        )
    elif lock:
        q = q.with_for_update()
    row = conn.execute(q).mappings().first()
    if row is None:
        return None
    return Installed(
        name=row["name"],
        version=row["version"],
        digest=row["digest"],
        source=row["source"],
        dialect=row["dialect"],
        chronon=row["chronon"],
        options=json.loads(row["options"]),
        last_tick=row["last_tick"],
        next_eid=row["next_eid"],
    )


def _differences(old: CompiledProgram, new: CompiledProgram) -> list[str]:
    out: list[str] = []
    old_classes = {c.ident: c for c in old}
    new_classes = {c.ident: c for c in new}
    for ident in new_classes.keys() - old_classes.keys():
        out.append(f"class {new_classes[ident].name} added")
    for ident in old_classes.keys() - new_classes.keys():
        out.append(f"class {old_classes[ident].name} removed")
    for ident in old_classes.keys() & new_classes.keys():
        a, b = old_classes[ident].definition, new_classes[ident].definition
        if compile_digest_of(a) != compile_digest_of(b):
            out.append(f"class {b.name} changed")
    return sorted(out)


def compile_digest_of(cls: Any) -> str:
    from sentinel.bicep.compiler import _digest
    from sentinel.bicep.model import Program

    return _digest(Program("", (cls,)))


def install(
    engine: sa.Engine,
    program: CompiledProgram,
    *,
    chronon: int,
    schema: str | None = None,
    prefix: str = "sentinel_",
    archive: bool = False,
    upgrade: bool = False,
    keep: bool = False,
) -> Installed:
    """Install ``program`` in ``engine``'s database, in one transaction.

    Returns the installed program. Raises
    :class:`~sentinel.errors.BicepProgramChangedError` for a changed program
    without ``upgrade``, :class:`~sentinel.errors.BicepProgramError` when a
    complex class's query fails on the database (at its place in the program),
    and :class:`~sentinel.errors.BicepError` when the system tables are missing.
    """
    created: list[sa.Table] = []
    inserted: list[bool] = []
    try:
        with engine.begin() as conn:
            return _install(
                conn, program, chronon, schema, prefix, archive, upgrade, keep, created, inserted
            )
    except BaseException:
        if engine.dialect.name in ("mysql", "mariadb") and created:
            # MariaDB committed each CREATE TABLE (and the program's row with the
            # first): remove them.
            st = system_tables(schema, prefix)
            with engine.begin() as conn:
                for table in reversed(created):
                    if table.info.get("view"):
                        conn.exec_driver_sql(f"DROP VIEW IF EXISTS {_qualified(table)}")
                    else:
                        table.drop(conn, checkfirst=True)
                if inserted:
                    conn.execute(st.programs.delete().where(st.programs.c.name == program.name))
        raise


def _install(
    conn: Connection,
    program: CompiledProgram,
    chronon: int,
    schema: str | None,
    prefix: str,
    archive: bool,
    upgrade: bool,
    keep: bool,
    created: list[sa.Table],
    inserted: list[bool],
) -> Installed:
    program = program.with_dialect(_dialect(conn), storage=False)
    st = _system(conn, schema, prefix)
    options = {"archive": archive}
    current = installed(conn, program.name, schema=schema, prefix=prefix, lock=True)
    if current is not None:
        same = (
            current.digest == program.digest
            and current.chronon == chronon
            and current.options == options
        )
        if same:
            # Installed: its database holds it, whatever limits this version
            # of sentinel puts on a new program.
            return current
        old = compile_program(
            current.source, name=program.name, dialect=_dialect(conn), prefix=prefix, storage=False
        )
        differences = _differences(old, program)
        if current.chronon != chronon:
            differences.append(f"chronon {current.chronon} s -> {chronon} s")
        if current.options != options:
            differences.append(f"options {current.options} -> {options}")
        if not upgrade:
            raise BicepProgramChangedError(
                f"program {program.name!r} is installed as version {current.version}, and the "
                f"program given differs ({'; '.join(differences) or 'its text'}); installing it "
                f"is a new version: Processor.install(upgrade=True) or `sentinel bicep install "
                f"--upgrade` (version {current.version + 1} starts with empty event classes)",
                name=program.name,
                installed=current.version,
                differences=differences,
            )
    check_storage(program)
    tables = ProgramTables(program, schema=schema, prefix=prefix, archive=archive)
    _check_names(program, tables)
    # Names are checked before the first write: on MariaDB each DDL statement
    # commits what came before it (an old version's tables would stay renamed).
    taken = _names_in_use(conn, schema)
    retirement = None
    if current is not None:
        retirement = _plan_retirement(
            conn, current, program.name, schema, prefix, keep=keep, taken=taken
        )
    _check_free(program, tables, taken)
    now = datetime.now(UTC)
    # Write the program's row first: SQLite's driver opens the transaction at the
    # first DML statement, so the DDL after it is part of the transaction too.
    if current is None:
        conn.execute(
            st.programs.insert().values(
                name=program.name,
                version=1,
                digest=program.digest,
                source=program.text,
                dialect=_dialect(conn),
                chronon=chronon,
                options=json.dumps(options),
                last_tick=None,
                next_eid=1,
                installed_at=now,
            )
        )
        inserted.append(True)
    else:
        conn.execute(
            st.programs.update()
            .where(st.programs.c.name == program.name)
            .values(
                version=current.version + 1,
                digest=program.digest,
                source=program.text,
                dialect=_dialect(conn),
                chronon=chronon,
                options=json.dumps(options),
                installed_at=now,
            )
        )
    if retirement is not None:
        retirement.run(conn)
        conn.execute(st.classes.delete().where(st.classes.c.program == program.name))
        conn.execute(
            st.potential_ticks.delete().where(st.potential_ticks.c.program == program.name)
        )
    for table in tables.tables:
        table.create(conn)
        created.append(table)
    for view, sql in tables.views().items():
        conn.exec_driver_sql(sql)
        created.append(sa.Table(view, sa.MetaData(), schema=schema, info={"view": True}))
    for cls in program:
        if cls.query is not None:
            _validate(conn, program, tables, cls)
    conn.execute(
        st.classes.insert(),
        [
            {
                "program": program.name,
                "ident": cls.ident,
                "name": cls.name,
                "kind": "complex" if cls.complex else "subscribed",
                "mutable": cls.mutable,
                "lifespan": cls.definition.lifespan,
                "stratum": cls.stratum,
                "definition": json.dumps(
                    {
                        "attributes": [[a.name, a.type.text] for a in cls.definition.attributes],
                        "keys": list(cls.definition.keys),
                        "depends_on": list(cls.depends_on),
                    }
                ),
                "stale": False,
            }
            for cls in program
        ],
    )
    result = installed(conn, program.name, schema=schema, prefix=prefix)
    assert result is not None
    return result


def _qualified(table: sa.Table) -> str:
    return f"{table.schema}.{table.name}" if table.schema else table.name


def _dialect(conn: Connection) -> str:
    return conn.dialect.name


def _names_in_use(conn: Connection, schema: str | None) -> dict[str, str]:
    """The tables and views of ``schema``, by lower-case name, each with what
    holds it (for messages)."""
    insp = sa.inspect(conn)
    names = insp.get_table_names(schema=schema) + insp.get_view_names(schema=schema)
    return {n.lower(): "" for n in names}


def _check_free(program: CompiledProgram, tables: ProgramTables, taken: dict[str, str]) -> None:
    """Refuse to install over a table or view that exists: another program's
    (``p`` with class ``i_x`` and ``p_n`` with class ``x`` both name
    ``sentinel_p_n_i_x``), the application's, or an old version's kept by this
    upgrade (``taken``: the names in use once the old version is retired)."""
    owners: list[tuple[str, str, int]] = []
    for ident, ct in tables.classes.items():
        cls = program.classes[ident]
        at = name_offset(program.text, cls.definition)
        names = [t.name for t in ct.all] + [tables.name("v", ident)]
        owners += [(n, f"class {cls.name}", at) for n in names]
    for ident, x in tables.actions.items():
        cls_ident, index = program.actions[ident].uses[0]
        action = program.classes[cls_ident].definition.statements[index].action
        owners.append((x.name, f"action {action.name}", action.pos.offset))
    for name, owner, offset in owners:
        holder = taken.get(name.lower())
        if holder is None:
            continue
        what = owner.split()[0]
        if holder:
            message = (
                f"the table {name} of {owner} is the name {holder} is kept under "
                f"(keep=True); rename the {what}, or upgrade without keeping"
            )
        else:
            message = (
                f"the table {name} of {owner} exists already in the database (another "
                f"program's, or your own); rename the {what} or the program"
            )
        raise error_at(program.text, offset, message, cls=BicepProgramError)


def _check_names(program: CompiledProgram, tables: ProgramTables) -> None:
    for table in tables.tables:
        if len(table.name) > MAX_NAME:
            raise BicepProgramError(
                f"table name {table.name} is longer than {MAX_NAME} characters; use a shorter "
                "program name, table prefix, or class/action name"
            )


def _validate(conn: Connection, program: CompiledProgram, tables: ProgramTables, cls: Any) -> None:
    sql, lineage = tables.physical_query(cls)
    probe = f"SELECT * FROM ({sql}) bicep_q LIMIT 0"
    try:
        with conn.begin_nested(), read_only_for(program.dialect).reading(conn):
            result = conn.execute(sa.text(probe), {"bicep_now": 0})
            width = len(result.keys())
            result.close()
    except sa.exc.DBAPIError as err:
        message = str(getattr(err, "orig", err)).strip().splitlines()[0]
        offset, name = locate_database_error(cls.query, message)
        hint = ""
        if name is not None:
            import difflib

            known = [c.name for c in program] + [
                c for c in cls.query.identifiers if c not in ("occtime", "dettime")
            ]
            close = difflib.get_close_matches(
                name.split(".")[-1],
                [k for k in known if k.lower() != name.split(".")[-1].lower()],
                n=1,
            )
            if close:
                hint = f"; did you mean {close[0]}?"
        raise error_at(
            program.text,
            offset,
            f"the database rejects the query of {cls.name}: {message}{hint}",
            cls=BicepProgramError,
        ) from None
    expected = 1 + len(cls.definition.attributes) + len(lineage or ())
    if width != expected:  # pragma: no cover - guarded by parse_query's column count
        raise error_at(
            program.text,
            cls.query.cls.query_pos.offset,
            f"the query of {cls.name} returns {width - 1 - len(lineage or ())} column(s) for "
            f"{len(cls.definition.attributes)} attribute(s)",
            cls=BicepProgramError,
        )


def kept_name(table: str, version: int) -> str:
    """The name version ``version``'s table ``table`` is kept under by an
    upgrade with ``keep=True``: ``<table>_v<version>``, or, when that is longer
    than a table name may be, the start of ``table``, a digest of the whole
    name and ``_v<version>``, so that two long names never end up the same.

    >>> kept_name("sentinel_shop_h_delivery", 1)
    'sentinel_shop_h_delivery_v1'
    >>> len(kept_name("sentinel_shop_h_" + "x" * 47, 12))
    63
    """
    name = f"{table}_v{version}"
    if len(name) <= MAX_NAME:
        return name
    suffix = f"_{hashlib.sha256(name.encode()).hexdigest()[:10]}_v{version}"
    return f"{table[: MAX_NAME - len(suffix)]}{suffix}"


#: An index: its name, its columns, whether it is unique.
_Index = tuple[str, list[str], bool]


@dataclass
class _Retirement:
    """What retiring an installed version does, checked before it is done:
    drop its views, then drop its tables or rename them (in this order)."""

    schema: str | None
    views: list[str]
    drops: list[sa.Table]
    renames: list[tuple[sa.Table, str, list[_Index]]]  # table, kept name, its indexes

    def run(self, conn: Connection) -> None:
        for view in self.views:
            conn.exec_driver_sql(f"DROP VIEW IF EXISTS {self._q(view)}")
        for table in self.drops:
            table.drop(conn)
        for table, kept, indexes in self.renames:
            conn.exec_driver_sql(f"ALTER TABLE {self._q(table.name)} RENAME TO {kept}")
            self._rename_indexes(conn, table.name, kept, indexes)

    def _q(self, name: str) -> str:
        return f"{self.schema}.{name}" if self.schema else name

    def _rename_indexes(
        self, conn: Connection, table: str, kept: str, indexes: list[_Index]
    ) -> None:
        # A renamed table keeps its indexes' names, which PostgreSQL and SQLite
        # hold per schema: the new version's table of the same name would not
        # get its own. (MariaDB's are per table.)
        dialect = conn.dialect.name
        if dialect in ("mysql", "mariadb"):
            return
        for old, columns, unique in indexes:
            start = f"ix_{table}_"
            new = index_name(kept, old[len(start) :] if old.startswith(start) else old)
            if dialect == "postgresql":
                conn.exec_driver_sql(f"ALTER INDEX {self._q(old)} RENAME TO {new}")
            else:  # SQLite renames no index
                conn.exec_driver_sql(f"DROP INDEX {self._q(old)}")
                conn.exec_driver_sql(
                    f"CREATE {'UNIQUE ' if unique else ''}INDEX {self._q(new)} "
                    f"ON {kept} ({', '.join(columns)})"
                )


def _indexes(insp: sa.Inspector, table: str, schema: str | None) -> list[_Index]:
    """The named indexes of ``table`` on its columns (those sentinel made; not
    the ones behind a primary key or unique constraint)."""
    out: list[_Index] = []
    for ix in insp.get_indexes(table, schema=schema):
        name, columns = ix["name"], ix["column_names"]
        if ix.get("duplicates_constraint") or name is None or None in columns:
            continue
        out.append((name, [c for c in columns if c is not None], bool(ix.get("unique"))))
    return out


def _plan_retirement(
    conn: Connection,
    current: Installed,
    name: str,
    schema: str | None,
    prefix: str,
    *,
    keep: bool,
    taken: dict[str, str],
) -> _Retirement:
    """How to retire the installed version ``current``; updates ``taken`` to the
    names in use after it. Raises :class:`~sentinel.errors.BicepProgramError`
    when a table would be kept under a name that is in use."""
    old = compile_program(
        current.source, name=name, dialect=_dialect(conn), prefix=prefix, storage=False
    )
    old_tables = ProgramTables(
        old, schema=schema, prefix=prefix, archive=bool(current.options.get("archive"))
    )
    views = list(old_tables.views())
    for view in views:
        taken.pop(view.lower(), None)
    present = [t for t in reversed(old_tables.tables) if t.name.lower() in taken]
    retirement = _Retirement(schema, views, [], [])
    if not keep:
        retirement.drops = present
        for t in present:
            taken.pop(t.name.lower())
        return retirement
    insp = sa.inspect(conn)
    clashes: list[str] = []
    # Longest first: version 1's c_v1 is kept (as ..._c_v1_v1) before its c
    # takes the name ..._c_v1.
    for table in sorted(present, key=lambda t: -len(t.name)):
        kept = kept_name(table.name, current.version)
        if kept.lower() in taken:
            clashes.append(f"{table.name} as {kept}")
            continue
        del taken[table.name.lower()]
        taken[kept.lower()] = f"version {current.version}'s table {table.name}"
        retirement.renames.append((table, kept, _indexes(insp, table.name, schema)))
    if clashes:
        raise BicepProgramError(
            f"upgrading program {name!r} would keep version {current.version}'s tables "
            f"under names in use: {', '.join(clashes)} (kept by an earlier install of the "
            "program, another program's, or your own); drop or rename those, or upgrade "
            "without keeping"
        )
    return retirement


def _retire(
    conn: Connection, current: Installed, name: str, schema: str | None, prefix: str
) -> None:
    taken = _names_in_use(conn, schema)
    _plan_retirement(conn, current, name, schema, prefix, keep=False, taken=taken).run(conn)


def uninstall(
    conn: Connection, name: str, *, schema: str | None = None, prefix: str = "sentinel_"
) -> bool:
    """Drop program ``name``'s tables and forget it (``False``: not installed)."""
    st = _system(conn, schema, prefix)
    current = installed(conn, name, schema=schema, prefix=prefix, lock=True)
    if current is None:
        return False
    conn.execute(st.programs.delete().where(st.programs.c.name == name))
    for t in (st.classes, st.potential_ticks, st.purge, st.ticks):
        conn.execute(t.delete().where(t.c.program == name))
    _retire(conn, current, name, schema, prefix)
    return True
