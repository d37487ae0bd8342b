"""sentinel's migrations: upgrade and downgrade on every backend, the tables they
create equal the tables the code declares, and they live alongside an
application's own alembic history."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext

import sentinel
from sentinel.log import LogReader, LogWriter, migrate
from sentinel.log.tables import SCHEMA_REVISIONS, SCHEMA_VERSION, log_tables

from .conftest import occ

LOG_TABLES = set(log_tables().names)


def _tables(engine: sa.Engine, schema: str | None = None) -> set[str]:
    return set(sa.inspect(engine).get_table_names(schema=schema))


def _views(engine: sa.Engine, schema: str | None = None) -> set[str]:
    return set(sa.inspect(engine).get_view_names(schema=schema))


def test_shipped_history_matches_the_code() -> None:
    assert migrate.head() == SCHEMA_VERSION
    assert tuple(migrate.history()) == SCHEMA_REVISIONS


def test_upgrade_and_downgrade(engine: sa.Engine) -> None:
    assert migrate.current(engine) is None
    migrate.upgrade(engine)
    assert migrate.current(engine) == SCHEMA_VERSION
    assert LOG_TABLES | {"sentinel_alembic_version"} <= _tables(engine)
    assert _views(engine) == {"sentinel_occurrences"}
    migrate.upgrade(engine)  # idempotent at head
    assert migrate.current(engine) == SCHEMA_VERSION

    migrate.downgrade(engine, "base")
    assert migrate.current(engine) is None
    assert not LOG_TABLES & _tables(engine) and not _views(engine)

    migrate.upgrade(engine, SCHEMA_VERSION)
    with engine.begin() as conn:
        LogWriter().write(conn, [occ("E", 1)])
    assert LogReader(engine).count() == 1


def test_upgrade_from_a_url(db_url: str) -> None:
    migrate.upgrade(db_url)
    assert migrate.current(db_url) == SCHEMA_VERSION
    migrate.downgrade(db_url, "base")
    assert migrate.current(db_url) is None


def test_upgrade_on_a_connection_commits_unless_the_caller_began(engine: sa.Engine) -> None:
    """A Connection not in a transaction is upgraded and committed, as alembic
    itself would (the lock that serialises upgrades must not turn it into the
    caller's transaction, rolled back unseen at close); one in a transaction is
    the caller's to commit or roll back."""
    with engine.connect() as conn:
        migrate.upgrade(conn)
    assert migrate.current(engine) == SCHEMA_VERSION
    migrate.downgrade(engine, "base")
    with engine.connect() as conn:
        conn.begin()
        migrate.upgrade(conn)
        conn.rollback()
    if engine.dialect.name in ("mysql", "mariadb"):
        return  # their DDL commits as it goes
    assert migrate.current(engine) is None


def test_current_does_not_create_a_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    assert migrate.current(f"sqlite:///{path}") is None
    assert not path.exists()


# -- migrations == tables.py -----------------------------------------------------------
def _describe(engine: sa.Engine, schema: str | None = None) -> dict[str, Any]:
    """Everything about the log tables a database reports: columns (type as the
    database compiles it, nullability), primary keys, indexes, unique constraints."""
    insp = sa.inspect(engine)
    return {table: _table(insp, engine.dialect, table, schema) for table in sorted(LOG_TABLES)}


def _table(insp: Any, dialect: sa.Dialect, table: str, schema: str | None) -> dict[str, Any]:
    """A table's columns (type as the database compiles it, nullability),
    primary key, indexes and unique constraints, as the database reports them."""
    return {
        "columns": [
            (c["name"], c["type"].compile(dialect=dialect), c["nullable"])
            for c in insp.get_columns(table, schema=schema)
        ],
        "indexes": sorted(
            (i["name"], tuple(i["column_names"]), bool(i["unique"]))
            for i in insp.get_indexes(table, schema=schema)
        ),
        "uniques": sorted(
            (u["name"], tuple(u["column_names"]))
            for u in insp.get_unique_constraints(table, schema=schema)
        ),
        "pk": insp.get_pk_constraint(table, schema=schema)["constrained_columns"],
    }


def _declared() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for table in log_tables().metadata.sorted_tables:
        out[table.name] = {
            "columns": [(c.name, c.nullable) for c in table.columns],
            "indexes": sorted(
                (i.name, tuple(c.name for c in i.columns), bool(i.unique)) for i in table.indexes
            ),
            "uniques": sorted(
                (u.name, tuple(c.name for c in u.columns))
                for u in table.constraints
                if isinstance(u, sa.UniqueConstraint)
            ),
            "pk": [c.name for c in table.primary_key.columns],
        }
    return out


def test_migrations_create_exactly_the_declared_tables(
    backend: str, engine: sa.Engine, tmp_path: Path, namespaces: Any
) -> None:
    migrate.upgrade(engine)
    by_migration = _describe(engine)

    # the same tables made by create_all from tables.py, in a second empty namespace
    if namespaces is None:
        other = sa.create_engine(f"sqlite:///{tmp_path / 'declared.db'}")
    else:
        other = sa.create_engine(namespaces.url(namespaces.new()))
    try:
        log_tables().metadata.create_all(other)
        by_declaration = _describe(other)
        declared_views = _views(other)
    finally:
        other.dispose()
    assert by_migration == by_declaration
    # the per-occurrence view, and nothing else, besides the tables
    assert _views(engine) == declared_views == {log_tables().view_name}

    # and both say what tables.py says, name by name
    declared = _declared()
    for name, table in by_migration.items():
        assert [(c, n) for c, _, n in table["columns"]] == declared[name]["columns"], name
        assert table["pk"] == declared[name]["pk"], name
        declared_keys = {i[0]: i[1:] for i in declared[name]["indexes"]}
        declared_keys.update({u[0]: (u[1], True) for u in declared[name]["uniques"]})
        found = {i[0]: i[1:] for i in table["indexes"]}
        found.update({u[0]: (u[1], True) for u in table["uniques"]})
        # PostgreSQL and SQLite report unique constraints apart from indexes (and
        # SQLite also lists their backing index); MariaDB reports them as unique
        # indexes. Every declared index and constraint exists with its columns.
        for key, value in declared_keys.items():
            assert found.get(key) == value, (name, key, found)


def _everything(
    engine: sa.Engine, schema: str | None = None, prefix: str = "sentinel_"
) -> dict[str, Any]:
    """What a namespace holds of sentinel's: every table, view and sequence named
    with the log's prefix (columns, keys, indexes, constraints, rows) and the
    revision."""
    insp = sa.inspect(engine)
    tables = sorted(t for t in insp.get_table_names(schema=schema) if t.startswith(prefix))
    views = sorted(v for v in insp.get_view_names(schema=schema) if v.startswith(prefix))
    sequences = []
    if engine.dialect.name == "postgresql":
        sequences = sorted(
            s for s in insp.get_sequence_names(schema=schema) if s.startswith(prefix)
        )
    out: dict[str, Any] = {"tables": tables, "views": {}, "rows": {}, "sequences": sequences}
    for table in tables:
        out[table] = _table(insp, engine.dialect, table, schema)
    with engine.connect() as conn:
        for table in tables:
            t = sa.Table(table, sa.MetaData(), schema=schema, autoload_with=conn)
            out["rows"][table] = sorted(tuple(r) for r in conn.execute(sa.select(t)))
        for view in views:
            out["views"][view] = [
                (c["name"], repr(c["type"]))  # SQLite's view columns have no type
                for c in insp.get_columns(view, schema=schema)
            ]
    out["revision"] = migrate.current(engine, schema=schema, prefix=prefix)
    return out


def test_a_new_database_is_made_at_head_in_one_step_as_the_migrations_make_it(
    backend: str, engine: sa.Engine, tmp_path: Path, namespaces: Any
) -> None:
    """Upgrading a database that has none of the log creates the newest schema
    in one step (alembic's create-and-stamp recipe, from the declared tables):
    the same tables, columns, keys, indexes, view and rows (the commit counter's
    first row among them) and the same revision as the migrations make one by
    one, in fewer statements."""
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    sa.event.listen(engine, "before_cursor_execute", count)
    migrate.upgrade(engine)
    sa.event.remove(engine, "before_cursor_execute", count)
    one_step = _everything(engine)

    if namespaces is None:
        other = sa.create_engine(f"sqlite:///{tmp_path / 'stepwise.db'}")
    else:
        other = sa.create_engine(namespaces.url(namespaces.new()))
    stepwise: list[str] = []
    try:
        migrate.upgrade(other, SCHEMA_REVISIONS[0])  # the log exists: the rest migrate
        sa.event.listen(other, "before_cursor_execute", lambda *a: stepwise.append(a[2]))
        migrate.upgrade(other)
        assert _everything(other) == one_step
    finally:
        other.dispose()
    assert one_step["revision"] == SCHEMA_VERSION
    assert one_step["rows"]["sentinel_commit_counter"] == [(1, 0)]
    assert len(statements) < len(stepwise)


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])  # SQLite has no schemas
def test_in_a_schema_with_a_prefix_one_step_makes_what_the_migrations_make(
    engine: sa.Engine, namespaces: Any
) -> None:
    """The one-step creation honours ``schema=`` and ``prefix=`` as the
    migrations do: tables, indexes, view, sequence and version in the schema,
    named with the prefix."""
    one, stepwise = namespaces.new(), namespaces.new()
    migrate.upgrade(engine, schema=one, prefix="audit_")
    migrate.upgrade(engine, SCHEMA_REVISIONS[0], schema=stepwise, prefix="audit_")
    migrate.upgrade(engine, schema=stepwise, prefix="audit_")
    made = _everything(engine, one, "audit_")
    assert made == _everything(engine, stepwise, "audit_")
    assert made["revision"] == SCHEMA_VERSION and "audit_event_batches" in made["tables"]
    assert not _everything(engine, one)["tables"]  # nothing under the default prefix


def test_autogenerate_sees_no_difference_after_upgrade(engine: sa.Engine) -> None:
    migrate.upgrade(engine)
    tables = log_tables()
    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "include_name": lambda name, type_, parents: (
                    type_ != "table" or name in tables.names
                ),
            },
        )
        diff = compare_metadata(ctx, tables.metadata)
    assert diff == []


# -- schema and prefix ----------------------------------------------------------------
@pytest.mark.parametrize("backend", ["postgresql", "mysql"])  # SQLite has no schemas
def test_schema_and_prefix(engine: sa.Engine, extra_schema: str) -> None:
    migrate.upgrade(engine, schema=extra_schema, prefix="audit_")
    assert migrate.current(engine, schema=extra_schema, prefix="audit_") == SCHEMA_VERSION
    assert migrate.current(engine) is None  # nothing in the default schema
    assert {
        "audit_event_batches",
        "audit_expired",
        "audit_rule_firings",
        "audit_outbox",
        "audit_alembic_version",
    } <= _tables(engine, extra_schema)
    assert not _tables(engine)

    writer = LogWriter(schema=extra_schema, prefix="audit_")
    with engine.begin() as conn:
        writer.write(conn, [occ("E", 1, x=1)])
    with LogReader(engine, schema=extra_schema, prefix="audit_") as reader:
        assert [dict(r.occurrence.params) for r in reader.occurrences()] == [{"x": 1}]

    migrate.downgrade(engine, "base", schema=extra_schema, prefix="audit_")
    assert not {"audit_event_batches"} & _tables(engine, extra_schema)
    assert not _views(engine, extra_schema)


def test_prefix_on_sqlite(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'p.db'}")
    try:
        migrate.upgrade(engine, prefix="ops_")
        migrate.upgrade(engine)  # two independent logs side by side
        tables = _tables(engine)
        assert {"ops_event_batches", "ops_alembic_version", "sentinel_event_batches"} <= tables
        assert _views(engine) == {"ops_occurrences", "sentinel_occurrences"}
        migrate.downgrade(engine, "base", prefix="ops_")
        assert "ops_event_batches" not in _tables(engine)
        assert "sentinel_event_batches" in _tables(engine)
        assert _views(engine) == {"sentinel_occurrences"}
    finally:
        engine.dispose()


# -- offline SQL ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "postgresql+psycopg://u@h/db",
        "mysql+pymysql://u@h/db",
        "mariadb+pymysql://u@h/db",
    ],
)
def test_offline_sql(url: str) -> None:
    out = io.StringIO()
    migrate.upgrade(url, sql=True, stdout=out)
    ddl = out.getvalue()
    assert "CREATE TABLE sentinel_event_batches" in ddl and "CREATE TABLE sentinel_expired" in ddl
    assert (
        "VIEW sentinel_occurrences" in ddl
        or 'VIEW "sentinel_occurrences"' in ddl
        or ("VIEW `sentinel_occurrences`" in ddl)
    )
    assert "sentinel_alembic_version" in ddl and "alembic_version (" not in ddl.replace(
        "sentinel_alembic_version (", ""
    )
    if "postgresql" in url:
        assert "JSONB" in ddl and "TIMESTAMP WITH TIME ZONE" in ddl
    if "mysql" in url or "mariadb" in url:
        assert "DATETIME(6)" in ddl
    out = io.StringIO()
    migrate.downgrade(url, "base", sql=True, stdout=out)
    ddl = out.getvalue()
    assert "DROP TABLE sentinel_event_batches" in ddl and "DROP VIEW IF EXISTS" in ddl


# -- alongside an application's alembic history -----------------------------------------
APP_REVISION = '''
"""app tables"""
import sqlalchemy as sa
from alembic import op

revision = "a1"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table("app_items", sa.Column("id", sa.Integer, primary_key=True))


def downgrade():
    op.drop_table("app_items")
'''

APP_ENV = """
import sqlalchemy as sa
from alembic import context

from sentinel.log import migrate

config = context.config
target_metadata = sa.MetaData()
sa.Table("app_items", target_metadata, sa.Column("id", sa.Integer, primary_key=True))


def run_migrations_online():
    engine = sa.create_engine(config.get_main_option("sqlalchemy.url"),
                              poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata,
                          include_name=migrate.exclude_sentinel_tables)
        with context.begin_transaction():
            context.run_migrations()
            if context.get_x_argument(as_dictionary=True).get("with_sentinel"):
                migrate.upgrade(connection)
    engine.dispose()


run_migrations_online()
"""


def _app(tmp_path: Path, db_url: str) -> Path:
    """An application's alembic environment (own history, own alembic_version) and
    an alembic.ini with a [sentinel] section for sentinel's migrations."""
    root = tmp_path / "app"
    (root / "migrations" / "versions").mkdir(parents=True)
    (root / "migrations" / "env.py").write_text(APP_ENV)
    (root / "migrations" / "versions" / "a1_items.py").write_text(APP_REVISION)
    url = db_url.replace("%", "%%")  # configparser interpolation
    (root / "alembic.ini").write_text(
        textwrap.dedent(f"""\
        [alembic]
        script_location = {root / "migrations"}
        sqlalchemy.url = {url}

        [sentinel]
        script_location = {migrate.script_directory()}
        sqlalchemy.url = {url}
        """)
    )
    return root / "alembic.ini"


def _versions(engine: sa.Engine) -> dict[str, list[str]]:
    out = {}
    with engine.connect() as conn:
        for table in ("alembic_version", "sentinel_alembic_version"):
            if sa.inspect(conn).has_table(table):
                out[table] = list(
                    conn.exec_driver_sql(f"SELECT version_num FROM {table}").scalars()
                )
    return out


def test_alongside_app_history_from_its_env_py(
    tmp_path: Path, db_url: str, engine: sa.Engine
) -> None:
    ini = _app(tmp_path, db_url)
    cfg = Config(str(ini))
    cfg.cmd_opts = type("Opts", (), {"x": ["with_sentinel=1"]})()  # type: ignore[assignment]
    command.upgrade(cfg, "head")
    assert _versions(engine) == {
        "alembic_version": ["a1"],
        "sentinel_alembic_version": [SCHEMA_VERSION],
    }
    assert {"app_items"} | LOG_TABLES <= _tables(engine)

    # the app's autogenerate, with sentinel's hook, proposes nothing about sentinel
    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn, opts={"include_name": migrate.exclude_sentinel_tables}
        )
        target = sa.MetaData()
        sa.Table("app_items", target, sa.Column("id", sa.Integer, primary_key=True))
        assert compare_metadata(ctx, target) == []

    # the app's downgrade leaves sentinel's tables and history alone
    command.downgrade(Config(str(ini)), "base")
    assert _versions(engine) == {
        "alembic_version": [],
        "sentinel_alembic_version": [SCHEMA_VERSION],
    }
    assert _tables(engine) >= LOG_TABLES and "app_items" not in _tables(engine)


def test_alongside_app_history_as_an_ini_section(
    tmp_path: Path, db_url: str, engine: sa.Engine
) -> None:
    from alembic.config import main as alembic_main

    ini = _app(tmp_path, db_url)
    alembic_main(argv=["-c", str(ini), "upgrade", "head"])
    alembic_main(argv=["-c", str(ini), "-n", "sentinel", "upgrade", "head"])
    assert _versions(engine) == {
        "alembic_version": ["a1"],
        "sentinel_alembic_version": [SCHEMA_VERSION],
    }
    assert migrate.current(engine) == SCHEMA_VERSION
    alembic_main(argv=["-c", str(ini), "-n", "sentinel", "downgrade", "base"])
    assert _versions(engine) == {"alembic_version": ["a1"], "sentinel_alembic_version": []}
    assert "app_items" in _tables(engine)
    # options reach sentinel's env.py through -x as well
    alembic_main(argv=["-c", str(ini), "-n", "sentinel", "-x", "prefix=ops_", "upgrade", "head"])
    assert migrate.current(engine, prefix="ops_") == SCHEMA_VERSION
    assert "ops_event_batches" in _tables(engine)
    assert "sentinel_event_batches" not in _tables(engine)


@pytest.mark.slow
def test_the_wheel_ships_the_migrations(tmp_path: Path) -> None:
    """Build the wheel, install it somewhere else with the repository nowhere on the
    path, and migrate from there: through the API and through an alembic.ini
    section spelled as docs/eventlog.md spells it."""
    root = Path(sentinel.__file__).resolve().parent.parent
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(root)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("*.whl")
    site = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), wheel],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    assert (site / "sentinel" / "migrations" / "env.py").is_file()
    db = tmp_path / "installed.db"
    (tmp_path / "alembic.ini").write_text(
        f"[sentinel]\nscript_location = sentinel:migrations\nsqlalchemy.url = sqlite:///{db}\n"
    )
    code = textwrap.dedent(f"""
        import sentinel
        from alembic.config import main as alembic_main
        from sentinel.log import migrate
        assert sentinel.__file__.startswith({str(site)!r}), sentinel.__file__
        migrate.upgrade("sqlite:///{db}")
        assert migrate.current("sqlite:///{db}") == migrate.head()
        alembic_main(argv=["-c", {str(tmp_path / "alembic.ini")!r}, "-n", "sentinel",
                           "downgrade", "base"])
        assert migrate.current("sqlite:///{db}") is None
        alembic_main(argv=["-c", {str(tmp_path / "alembic.ini")!r}, "-n", "sentinel",
                           "upgrade", "head"])
        print(migrate.current("sqlite:///{db}"))
    """)
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == SCHEMA_VERSION


def test_concurrent_upgrades(backend: str, db_url: str) -> None:
    """Upgrades run at the same time, from threads of one process (alembic's
    context is global to the process) and from processes (two `sentinel db
    upgrade` at once), all succeed: one creates the tables, the others find them
    at head."""
    import threading
    import time

    if backend == "mysql":
        pytest.skip("MariaDB/MySQL DDL commits itself: concurrent upgrades are not serialized")
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def upgrade() -> None:
        start.wait()
        try:
            migrate.upgrade(db_url)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=upgrade) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert migrate.current(db_url) == SCHEMA_VERSION

    migrate.downgrade(db_url, "base")
    # every process imports first, then all start upgrading at one instant
    code = textwrap.dedent(
        f"""
        import time
        import sqlalchemy, alembic.command
        from sentinel.log import migrate
        time.sleep(max(0.0, {time.time() + 4.0!r} - time.time()))
        migrate.upgrade({db_url!r})
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = [p.communicate()[1] for p in procs]  # each pipe read and closed
    failures = [err for p, err in zip(procs, outputs, strict=True) if p.returncode != 0]
    assert failures == []
    assert migrate.current(db_url) == SCHEMA_VERSION


def test_a_failed_upgrade_leaves_nothing_behind(backend: str, engine: sa.Engine) -> None:
    """An upgrade that fails midway (here: a table in the way of its third
    CREATE TABLE) leaves none of the tables it had created, so that once the
    obstacle is gone the upgrade runs again from the start."""
    if backend == "mysql":
        pytest.skip("MariaDB/MySQL commit each DDL statement")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE sentinel_outbox (x INTEGER)")
    with pytest.raises(sa.exc.DatabaseError, match="sentinel_outbox"):
        migrate.upgrade(engine)
    assert _tables(engine) == {"sentinel_outbox"}
    assert migrate.current(engine) is None
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE sentinel_outbox")
    migrate.upgrade(engine)
    assert migrate.current(engine) == SCHEMA_VERSION
