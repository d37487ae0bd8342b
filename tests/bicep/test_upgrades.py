"""Installations that outlive a change: a program installed by an older
sentinel keeps running after sentinel's own upgrade, and a program's old
versions kept with ``install(upgrade=True, keep=True)`` stay apart from each
other, from the new version and from other programs' tables."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from sentinel.bicep import Processor, compile_program
from sentinel.bicep import limits as bicep_limits
from sentinel.bicep.compiler import name_limit
from sentinel.errors import BicepProgramError
from sentinel.log import migrate
from sentinel.rules import LocalEventDetector

T = 1_400_000_400  # a tick of 15-minute chronons


def _wide(n: int, action: str = "f") -> str:
    """A class of ``n`` INTEGER attributes (more than the 100 MariaDB's limit
    allows a new program; MariaDB holds 150 integers a row easily)."""
    attrs = ", ".join(f"a{i} INTEGER" for i in range(n))
    return (
        f"CREATE MUTABLE SUBSCRIBED EVENT CLASS C (k INTEGER, {attrs}) ID (k) LIFESPAN(1d)\n"
        f"  ON ANNOUNCEMENT DO {action}(new.k, new.a{n - 1});"
    )


def _long(size: int) -> str:
    """A program of ``size`` bytes: more than MariaDB's TEXT column holds."""
    head = "CREATE MUTABLE SUBSCRIBED EVENT CLASS C (k INTEGER, s TEXT) ID (k) LIFESPAN(1d)\n"
    head += "  ON ANNOUNCEMENT AND new.s <> '"
    tail = "' DO f(new.k, 0);"
    text = head + "x" * (size - len(head) - len(tail)) + tail
    assert len(text.encode()) == size
    return text


@pytest.fixture
def old_sentinel(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], None]]:
    """Within the block, sentinel as it was before it limited attributes and a
    program's size on every backend (the same code without those limits); the
    callable given ends the block (sentinel is upgraded)."""
    monkeypatch.setattr(bicep_limits, "MAX_ATTRIBUTES", 10**6)
    monkeypatch.setattr(bicep_limits, "MAX_TEXT_BYTES", 10**9)
    yield monkeypatch.undo
    monkeypatch.undo()


def _restart(engine: sa.Engine, text: str) -> Processor:
    """A processor started again on the installed program, as after a restart."""
    return Processor(text, engine, name="p", detector=LocalEventDetector(), require_actions=False)


def _fired(proc: Processor, until: int) -> list[str]:
    return [str(c) for r in proc.run_until(until) for c in r.actions]


def test_a_program_installed_before_the_limits_runs_after_a_restart_on_every_backend(
    migrated: sa.Engine, old_sentinel: Callable[[], None]
) -> None:
    """A class of 150 INTEGER attributes installed by an older sentinel (every
    backend holds it, MariaDB too) is the installed program of its database:
    a processor restarted on it after sentinel's upgrade installs nothing,
    runs its ticks, and may upgrade it to another version."""
    text = _wide(150)
    before = _restart(migrated, text)
    assert before.install() == 1
    before.announce("C", k=1, occ=T, det=T, **{f"a{i}": i for i in range(150)})
    assert _fired(before, T) == ["f(1, 149)"]
    before.close()
    old_sentinel()  # sentinel upgraded; the processor restarts

    after = _restart(migrated, text)
    assert after.install() == 1  # the same program, not a new version
    after.announce("C", k=2, occ=T + 900, det=T + 900, **{f"a{i}": 2 * i for i in range(150)})
    assert _fired(after, T + 900) == ["f(2, 298)"]
    assert [r["k"] for r in after.live("C")] == [1, 2]
    after.close()

    # its next version, within the limits, replaces it (reading the old one)
    narrower = _restart(migrated, _wide(3))
    assert narrower.install(upgrade=True) == 2
    narrower.announce("C", k=3, occ=T + 1800, det=T + 1800, a0=0, a1=1, a2=2)
    assert _fired(narrower, T + 1800) == ["f(3, 2)"]
    narrower.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_long_program_installed_before_the_limit_runs_after_a_restart(
    migrated: sa.Engine, old_sentinel: Callable[[], None]
) -> None:
    """PostgreSQL and SQLite hold a program's text of any length: one of
    70,000 bytes, installed by an older sentinel, runs after the upgrade."""
    text = _long(70_000)
    before = _restart(migrated, text)
    assert before.install() == 1
    before.close()
    old_sentinel()
    after = _restart(migrated, text)
    assert after.install() == 1
    after.announce("C", k=1, s="y", occ=T, det=T)
    assert _fired(after, T) == ["f(1, 0)"]
    after.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_what_only_mariadb_cannot_hold_installs_on_postgresql_and_sqlite(
    make: Callable[..., Processor],
) -> None:
    proc = make(_wide(150), name="p")
    proc.announce("C", k=1, occ=T, det=T, **{f"a{i}": i for i in range(150)})
    assert _fired(proc, T) == ["f(1, 149)"]
    longer = make(_long(70_000), name="q")
    longer.announce("C", k=1, s="y", occ=T, det=T)
    assert _fired(longer, T) == ["f(1, 0)"]


@pytest.mark.parametrize("backend", ["mysql"])
def test_mariadb_refuses_a_new_program_it_could_not_hold_at_install(migrated: sa.Engine) -> None:
    """On MariaDB the limits stand for a new program (or a new version), at
    its place, and nothing is installed."""
    proc = _restart(migrated, _wide(101))
    with pytest.raises(BicepProgramError, match="102 attributes, more than the 100") as e:
        proc.install()
    assert e.value.line == 1
    proc.close()
    proc = _restart(migrated, _long(70_000))
    with pytest.raises(BicepProgramError, match="has 70000 bytes"):
        proc.install()
    proc.close()
    assert not any("_p_" in n for n in sa.inspect(migrated).get_table_names())


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_compiler_applies_mariadbs_limits_only_for_mariadb(dialect: str) -> None:
    compile_program(_wide(150), dialect=dialect)
    compile_program(_long(70_000), dialect=dialect)
    with pytest.raises(BicepProgramError, match="more than the 100"):
        compile_program(_wide(150), dialect="mysql")
    with pytest.raises(BicepProgramError, match="has 70000 bytes"):
        compile_program(_long(70_000), dialect="mysql")


# -- keeping a program's old versions --------------------------------------------------
def _program(cls: str, attrs: str = "k INTEGER") -> str:
    return (
        f"CREATE MUTABLE SUBSCRIBED EVENT CLASS {cls} ({attrs}) ID (k) LIFESPAN(1d)\n"
        "  ON ANNOUNCEMENT DO f(new.k);"
    )


def _tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def _keys(engine: sa.Engine, table: str) -> list[int]:
    with engine.connect() as conn:
        return sorted(r[0] for r in conn.execute(sa.text(f"SELECT k FROM {table}")))


def _processor(engine: sa.Engine, text: str, name: str = "p", **kwargs: object) -> Processor:
    kwargs.setdefault("detector", LocalEventDetector())
    kwargs.setdefault("require_actions", False)
    return Processor(text, engine, name=name, **kwargs)  # type: ignore[arg-type]


def test_an_upgrade_keeps_the_old_versions_tables_and_runs_the_new_one(
    migrated: sa.Engine,
) -> None:
    """The new version has the same class: its tables (and their indexes) are
    created next to the old ones, kept as ``<table>_v<version>``, twice."""
    before = _tables(migrated)
    for version, attrs in enumerate(["k INTEGER", "k INTEGER, j INTEGER", "k INTEGER"], 1):
        proc = _processor(migrated, _program("C", attrs))
        assert proc.install(upgrade=True, keep=True) == version
        proc.announce("C", k=version, occ=T + version * 900, det=T + version * 900)
        assert _fired(proc, T + version * 900) == [f"f({version})"]
        proc.close()
    kept = _tables(migrated) - before
    assert {t for t in kept if t.endswith(("_v1", "_v2"))} == {
        f"sentinel_p_{kind}_{name}_v{v}"
        for kind, name in [("i", "c"), ("n", "c"), ("h", "c"), ("c", "c"), ("x", "f")]
        for v in (1, 2)
    }
    assert _keys(migrated, "sentinel_p_h_c_v1") == [1]
    assert _keys(migrated, "sentinel_p_h_c_v2") == [2]
    assert _keys(migrated, "sentinel_p_h_c") == [3]
    # each kept table has the indexes its version had
    insp = sa.inspect(migrated)
    for kind in "inhc":
        live = _indexed(insp, f"sentinel_p_{kind}_c")
        assert _indexed(insp, f"sentinel_p_{kind}_c_v1") == live
        assert _indexed(insp, f"sentinel_p_{kind}_c_v2") == live


def _indexed(insp: sa.Inspector, table: str) -> set[tuple[str, ...]]:
    return {tuple(str(c) for c in ix["column_names"]) for ix in insp.get_indexes(table)}


def test_old_versions_of_long_names_kept_by_two_installations_stay_apart(
    engine: sa.Engine,
) -> None:
    """A kept name longer than a table name may be is shortened. Cutting its
    start made program p's table ``app_p_h_<class>`` (prefix ``app_``) and
    ``pp_p_h_<class>`` (prefix ``pp_``, one character shorter) both
    ``_p_h_<class>_v1``: the second upgrade failed on the first one's table.
    Each keeps its own rows."""
    cls = "C" * name_limit("p", "app_")
    for key, prefix in enumerate(["app_", "pp_"], 1):
        migrate.upgrade(engine, prefix=prefix)
        proc = _processor(engine, _program(cls), prefix=prefix)
        proc.install()
        proc.announce(cls, k=key, occ=T, det=T)
        assert _fired(proc, T) == [f"f({key})"]
        proc.close()
    before = _tables(engine)
    for prefix in ["app_", "pp_"]:
        proc = _processor(engine, _program("D"), prefix=prefix)  # the class renamed
        assert proc.install(upgrade=True, keep=True) == 2
        proc.close()
    kept = sorted(
        _tables(engine) - before - {f"{p}p_{k}_d" for p in ("app_", "pp_") for k in "inhc"}
    )
    assert len(kept) == 2 * 5, kept  # inbox, now, history, changes, action f of each
    assert all(len(t) <= 63 and t.endswith("_v1") for t in kept), kept
    histories = {t for t in kept if f"_h_{cls.lower()[:20]}" in t}
    assert {_keys(engine, t)[0]: t.split("_")[0] for t in histories} == {1: "app", 2: "pp"}
    # version 3 has the long class again: its tables and indexes are its own
    for key, prefix in enumerate(["app_", "pp_"], 1):
        proc = _processor(engine, _program(cls), prefix=prefix)
        assert proc.install(upgrade=True, keep=True) == 3
        proc.announce(cls, k=10 + key, occ=T + 900, det=T + 900)
        assert _fired(proc, T + 900) == [f"f({10 + key})"]
        assert [r["k"] for r in proc.history(cls)] == [10 + key]
        proc.close()
    assert {_keys(engine, t)[0] for t in histories} == {1, 2}


def test_an_upgrade_whose_kept_name_is_taken_is_refused_and_changes_nothing(
    migrated: sa.Engine,
) -> None:
    """Installed again after an uninstall, a program is version 1 again: its
    tables' kept names are the first life's, which are still there. The
    upgrade is refused, naming the table, before anything changes."""
    first = _processor(migrated, _program("C"))
    first.install()
    second = _processor(migrated, _program("C", "k INTEGER, j INTEGER"))
    assert second.install(upgrade=True, keep=True) == 2
    from sentinel.bicep.install import uninstall

    with migrated.begin() as conn:
        assert uninstall(conn, "p")
    again = _processor(migrated, _program("C"))
    assert again.install() == 1
    again.announce("C", k=7, occ=T, det=T)
    tables = _tables(migrated)
    third = _processor(migrated, _program("C", "k INTEGER, j INTEGER"))
    with pytest.raises(
        BicepProgramError,
        match=r"keep version 1's tables under names in use: .*sentinel_p_i_c as sentinel_p_i_c_v1",
    ):
        third.install(upgrade=True, keep=True)
    assert _tables(migrated) == tables
    assert _fired(again, T) == ["f(7)"]
    assert _keys(migrated, "sentinel_p_h_c") == [7]


def test_an_old_version_kept_under_a_new_class_name_is_refused_before_anything_changes(
    migrated: sa.Engine,
) -> None:
    """Version 2 adds class c_v1, whose table is the name version 1's class c
    would be kept under."""
    first = _processor(migrated, _program("C"))
    first.install()
    first.announce("C", k=1, occ=T, det=T)
    tables = _tables(migrated)
    second = _processor(
        migrated,
        _program("C") + "\n" + _program("C_v1").replace("f(new.k)", "g(new.k)"),
    )
    with pytest.raises(
        BicepProgramError,
        match=r"sentinel_p_\w_c_v1 of class C_v1 is the name version 1's table "
        r"sentinel_p_\w_c is kept under",
    ) as e:
        second.install(upgrade=True, keep=True)
    assert e.value.line is not None
    assert _tables(migrated) == tables
    assert _fired(first, T) == ["f(1)"]


# -- sentinel bicep check --prefix ------------------------------------------------------
def test_sentinel_bicep_check_checks_the_names_for_the_prefix_given(tmp_path: Path) -> None:
    """A class name fits the tables of a short prefix and not those of a long
    one (the limit follows the prefix), as the processor would find at install."""
    from click.testing import CliRunner

    from sentinel.cli import main

    cls = "C" * name_limit("p", "s_")
    (tmp_path / "p.bicepl").write_text(_program(cls))
    program = str(tmp_path / "p.bicepl")
    short = CliRunner().invoke(main, ["bicep", "check", program, "--prefix", "s_"])
    assert short.exit_code == 0, short.output
    assert short.output.startswith("program p: 1 class(es)")
    assert f"s_p_n_{cls.lower()}" not in short.output  # (a subscribed class shows no SQL)
    default = CliRunner().invoke(main, ["bicep", "check", program])
    assert default.exit_code == 1
    assert f"class name {cls[:20]}... has 57 characters, more than the 50" in default.output
    longer = CliRunner(env={"SENTINEL_PREFIX": "a_longer_prefix_"}).invoke(
        main, ["bicep", "check", program]
    )
    assert longer.exit_code == 1
    assert "has 57 characters, more than the 43 its tables' names leave it" in longer.output


def test_sentinel_bicep_check_shows_the_query_on_the_prefixs_tables(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sentinel.cli import main

    text = (
        _program("A")
        + "\n"
        + (
            "CREATE COMPLEX EVENT CLASS B (k INTEGER) ID (k) LIFESPAN(1d)\n"
            "  AS SELECT k FROM A OCCURRING AT A.occTime;"
        )
    )
    (tmp_path / "p.bicepl").write_text(text)
    result = CliRunner().invoke(
        main, ["bicep", "check", str(tmp_path / "p.bicepl"), "--prefix", "ops_"]
    )
    assert result.exit_code == 0, result.output
    assert "FROM ops_p_n_a" in result.output and "sentinel_p_n_a" not in result.output
