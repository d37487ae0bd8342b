"""The ``sentinel db`` and ``sentinel log`` commands."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from sentinel.cli import main
from sentinel.log import LogWriter, migrate
from sentinel.log.tables import SCHEMA_VERSION, log_tables
from sentinel.occurrence import ObjectRef

from .conftest import occ


@pytest.fixture
def run() -> CliRunner:
    return CliRunner()


def test_help_lists_the_command_groups(run: CliRunner) -> None:
    result = run.invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "db" in result.output and "log" in result.output
    result = run.invoke(main, ["db", "--help"])
    assert all(c in result.output for c in ("upgrade", "downgrade", "current"))


def test_db_upgrade_current_downgrade(run: CliRunner, db_url: str, engine: sa.Engine) -> None:
    result = run.invoke(main, ["db", "current", "--url", db_url, "--check"])
    assert result.exit_code == 1 and result.output.startswith("none")

    result = run.invoke(main, ["db", "upgrade", "--url", db_url])
    assert result.exit_code == 0, result.output
    assert f"base -> {SCHEMA_VERSION}" in result.output
    assert migrate.current(engine) == SCHEMA_VERSION

    result = run.invoke(main, ["db", "upgrade", "--url", db_url])
    assert result.exit_code == 0 and "already at" in result.output

    result = run.invoke(main, ["db", "current", "--url", db_url, "--check"])
    assert result.exit_code == 0 and result.output.strip() == f"{SCHEMA_VERSION} (head)"

    result = run.invoke(main, ["db", "downgrade", "base", "--url", db_url], input="n\n")
    assert result.exit_code == 1 and "Aborted" in result.output
    assert migrate.current(engine) == SCHEMA_VERSION

    result = run.invoke(main, ["db", "downgrade", "base", "--url", db_url, "--yes"])
    assert result.exit_code == 0, result.output
    assert f"{SCHEMA_VERSION} -> base" in result.output
    assert migrate.current(engine) is None


def test_log_show(run: CliRunner, db_url: str, engine: sa.Engine) -> None:
    migrate.upgrade(engine)
    with engine.begin() as conn:
        LogWriter().write(
            conn,
            [
                occ("Buy", 1, "tx-a", source=ObjectRef("Stock", ("IBM",)), qty=5),
                occ("Sell", 2, "tx-a", qty=7),
                occ("Sell", 3, "tx-b", qty=9),
            ],
        )
    result = run.invoke(main, ["log", "show", "--url", db_url, "-n", "2"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "last 2 row(s)" in result.output
    assert "Sell" in result.output and "Buy" not in result.output
    assert '{"qty":9}' in result.output and "committed" in result.output

    result = run.invoke(
        main, ["log", "show", "--event", "Buy"], env={"SENTINEL_URL": db_url, "COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "<Stock IBM>" in result.output and "Sell" not in result.output


def test_log_show_on_a_database_without_the_log(
    run: CliRunner, db_url: str, engine: sa.Engine
) -> None:
    with engine.begin() as conn:  # make SQLite create its file
        conn.exec_driver_sql("CREATE TABLE unrelated (id INTEGER PRIMARY KEY)")
    result = run.invoke(main, ["log", "show", "--url", db_url])
    assert result.exit_code == 1
    assert "Error:" in result.output and "sentinel db upgrade --url" in result.output
    assert "Traceback" not in result.output


def test_current_reports_an_unknown_revision(run: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    migrate.upgrade(url)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE sentinel_alembic_version SET version_num = '0042'")
    engine.dispose()
    result = run.invoke(main, ["db", "current", "--url", url, "--check"])
    assert result.exit_code == 1 and "unknown to this sentinel" in result.output
    result = run.invoke(main, ["log", "show", "--url", url])
    assert result.exit_code == 1 and "does not know" in result.output


def test_current_check_fails_for_a_log_with_a_table_or_its_revision_missing(
    run: CliRunner, tmp_path: Path
) -> None:
    """A deploy check that passes only when every command can use the log: a
    dropped table fails it; a lost revision row is named as such, without
    advice ``sentinel db upgrade`` would then refuse."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    migrate.upgrade(url)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE sentinel_outbox")
    result = run.invoke(main, ["db", "current", "--url", url, "--check"])
    assert result.exit_code == 1, result.output
    assert f"{SCHEMA_VERSION} (head), but table(s) sentinel_outbox are missing" in result.output
    with engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM sentinel_alembic_version")
    engine.dispose()
    result = run.invoke(main, ["db", "current", "--url", url, "--check"])
    assert result.exit_code == 1, result.output
    assert "sentinel's tables are here, but not their revision" in result.output
    assert "run `sentinel db upgrade" not in result.output


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])  # SQLite has no schemas
def test_schema_and_prefix_options(
    run: CliRunner, db_url: str, engine: sa.Engine, extra_schema: str
) -> None:
    args = ["--url", db_url, "--schema", extra_schema, "--prefix", "audit_"]
    assert run.invoke(main, ["db", "upgrade", *args]).exit_code == 0
    assert migrate.current(engine, schema=extra_schema, prefix="audit_") == SCHEMA_VERSION
    assert migrate.current(engine) is None
    result = run.invoke(main, ["log", "show", *args])
    assert result.exit_code == 0 and "last 0 row(s)" in result.output


def test_upgrade_sql_prints_ddl(run: CliRunner) -> None:
    result = run.invoke(main, ["db", "upgrade", "--sql", "--url", "postgresql+psycopg://u@h/db"])
    assert result.exit_code == 0, result.output
    assert "CREATE TABLE sentinel_event_batches" in result.output and "JSONB" in result.output
    assert 'CREATE VIEW "sentinel_occurrences"' in result.output


def test_bad_url_and_unreachable_server(run: CliRunner) -> None:
    result = run.invoke(main, ["db", "current", "--url", "nonsense://"])
    assert result.exit_code == 1 and "Error:" in result.output
    assert "Traceback" not in result.output
    result = run.invoke(
        main, ["db", "upgrade", "--url", "postgresql+psycopg://x@127.0.0.1:1/db?connect_timeout=2"]
    )
    assert result.exit_code == 1 and "cannot use the database" in result.output


def test_missing_url(run: CliRunner) -> None:
    result = run.invoke(main, ["db", "current"], env={"SENTINEL_URL": None})
    assert result.exit_code == 2 and "--url" in result.output


def test_tables_module_names() -> None:
    assert log_tables().names == (
        "sentinel_event_batches",
        "sentinel_expired",
        "sentinel_rule_firings",
        "sentinel_outbox",
        "sentinel_commit_counter",
        "sentinel_global_cursors",
        "sentinel_rule_switches",
    )


def test_db_commands_name_unknown_revisions(run: CliRunner, tmp_path: Path) -> None:
    """A revision sentinel does not know, asked for or found in the database, is
    a one-line error saying which revisions there are, not alembic's traceback;
    nothing changes."""
    url = f"sqlite:///{tmp_path / 'log.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine, "0003")
    for args in (["upgrade", "9999"], ["downgrade", "xyz", "--yes"]):
        result = run.invoke(main, ["db", *args, "--url", url])
        assert result.exit_code == 1 and type(result.exception) is SystemExit, result.output
        assert f"unknown revision {args[1]!r}" in result.output
        assert "0001, 0002, 0003, 0004, 0005, 0006, 0007" in result.output
        assert migrate.current(engine) == "0003"
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE sentinel_alembic_version SET version_num = '0042'"))
    for args in (["upgrade"], ["downgrade", "0001", "--yes"]):
        result = run.invoke(main, ["db", *args, "--url", url])
        assert result.exit_code == 1 and type(result.exception) is SystemExit, result.output
        assert "schema revision '0042'" in result.output and "upgrade sentinel" in result.output
        assert migrate.current(engine) == "0042"
    engine.dispose()


def test_downgrade_takes_a_relative_step(run: CliRunner, tmp_path: Path) -> None:
    """``sentinel db downgrade -1`` steps one revision down (click read ``-1``
    as an unknown option); an unknown option is still refused as one."""
    url = f"sqlite:///{tmp_path / 'log.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine, "0003")
    result = run.invoke(main, ["db", "downgrade", "-1", "--url", url, "--yes"])
    assert result.exit_code == 0, result.output
    assert "0003 -> 0002" in result.output and migrate.current(engine) == "0002"
    result = run.invoke(main, ["db", "downgrade", "--bogus", "--url", url, "--yes"])
    assert result.exit_code == 2 and "No such option: --bogus" in result.output
    assert migrate.current(engine) == "0002"
    engine.dispose()


def test_downgrade_leaves_a_database_without_sentinels_tables_untouched(
    run: CliRunner, tmp_path: Path
) -> None:
    """Another application's database: nothing to drop, no prompt, and no
    version table created in it (alembic made one before finding nothing)."""
    url = f"sqlite:///{tmp_path / 'other.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    result = run.invoke(main, ["db", "downgrade", "base", "--url", url])
    assert result.exit_code == 0, result.output
    assert "nothing to downgrade" in result.output
    assert sa.inspect(engine).get_table_names() == ["users"]
    engine.dispose()


def test_log_export_piped_leaves_nothing_of_its_progress_bar(
    run: CliRunner, tmp_path: Path
) -> None:
    """Not a terminal: nothing on stderr (the transient bar left an empty line,
    which also showed before an error)."""
    url = f"sqlite:///{tmp_path / 'log.db'}"
    migrate.upgrade(url)
    result = run.invoke(main, ["log", "export", "--url", url, "--out", str(tmp_path / "x")])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert result.stdout.startswith("exported 0 occurrences")


# -- a stored value is text on a terminal, not rich markup ----------------------------
MARKUP = ["[/x]", "[bold red]hidden[/bold red]", "[link=http://evil.example]here[/link]"]


def on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Make ``print_table`` take its terminal branch (a rich table) under the
    test runner, and rich write colours; the env to pass to the command."""
    from sentinel.cli import common

    monkeypatch.setattr(common, "_on_terminal", lambda: True)
    return {"COLUMNS": "250", "FORCE_COLOR": "1", "TERM": "xterm-256color"}


def test_log_show_on_a_terminal_prints_a_value_holding_markup_as_it_is(
    run: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as conn:
        LogWriter().write(
            conn, [occ("Note", i + 1, f"tx-{i}", s=value) for i, value in enumerate(MARKUP)]
        )
    engine.dispose()
    result = run.invoke(main, ["log", "show", "--url", url], env=on_a_terminal(monkeypatch))
    assert result.exit_code == 0, result.output
    assert "┃" in result.output  # the rich table, not the plain lines
    for value in MARKUP:
        assert f'{{"s":"{value}"}}' in result.output
    assert "\x1b[1;31m" not in result.output  # nothing turned bold red


def test_rules_switches_on_a_terminal_prints_a_name_holding_markup_as_it_is(
    run: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sentinel.log.switches import request_switch

    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    for value in MARKUP:
        request_switch(engine, log_tables(), value, False, detector=value, by=value)
    engine.dispose()
    result = run.invoke(main, ["rules", "switches", "--url", url], env=on_a_terminal(monkeypatch))
    assert result.exit_code == 0, result.output
    assert "┃" in result.output
    for value in MARKUP:
        assert result.output.count(value) == 3  # detector, rule, requested by
    assert "\x1b[1;31m" not in result.output


@pytest.mark.parametrize("command", [["current"], ["upgrade"], ["downgrade", "base", "--yes"]])
def test_db_commands_refuse_a_sqlite_database_that_would_not_outlast_them(
    run: CliRunner, tmp_path: Path, command: list[str]
) -> None:
    """An in-memory database: `upgrade` reported "already at base" after making
    the tables in a database gone at its end. A file in a missing directory:
    `current` advised the upgrade, which then failed with the driver's "unable
    to open database file"."""
    for url in ("sqlite://", "sqlite:///:memory:"):
        result = run.invoke(main, ["db", *command, "--url", url])
        assert result.exit_code == 2, result.output
        assert "is an in-memory SQLite database, gone when this command ends" in result.output
    missing = tmp_path / "nowhere" / "app.db"
    result = run.invoke(main, ["db", *command, "--url", f"sqlite:///{missing}"])
    assert result.exit_code == 1, result.output
    assert f"no directory {missing.parent} for the SQLite database app.db" in result.output
    assert not missing.parent.exists()
    # offline SQL connects to nothing: any SQLite URL names the dialect
    if command[0] != "current":
        result = run.invoke(main, ["db", *command[:2], "--sql", "--url", "sqlite://"])
        assert result.exit_code == 0, result.output


def test_db_upgrade_to_an_older_revision_says_it_is_newer_and_names_downgrade(
    run: CliRunner, tmp_path: Path
) -> None:
    """``db upgrade 0005`` on a log at 0008 said "already at 0008" and exited 0:
    it is refused (status 1), naming ``db downgrade``; the log is left as it is."""
    url = f"sqlite:///{tmp_path / 'app.db'}"
    migrate.upgrade(url, "0008")
    result = run.invoke(main, ["db", "upgrade", "0005", "--url", url])
    assert result.exit_code == 1, result.output
    assert "at schema revision 0008, newer than 0005" in result.output
    assert "`sentinel db downgrade 0005` goes back" in result.output
    assert migrate.current(url) == "0008"
    again = run.invoke(main, ["db", "upgrade", "0008", "--url", url])
    assert again.exit_code == 0 and "already at 0008" in again.output
