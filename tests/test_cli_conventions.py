"""The ``sentinel`` command as a newcomer meets it: one way to name rules for
every command, advice that names the tables asked about, output that survives a
pipe, ``sentinel log firings`` saying why each rule fired, ``sentinel graph
--svg``."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from examples.stock import program
from sentinel import LocalEventDetector, VirtualClock
from sentinel.cli import main
from sentinel.log import LogReader, LogWriter, migrate
from sentinel.occurrence import Occurrence

BANK = """
from sentinel import LocalEventDetector

detector = LocalEventDetector()
detector.explicit("deposit")
detector.explicit("withdraw")
detector.rule("quick", "deposit ; withdraw", action=print)


def audit(occ):
    pass


detector.rule("audit", "withdraw", action=audit, coupling="detached")
"""


@pytest.fixture
def in_app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory holding the application's module bank.py, as the current
    directory (and not importable otherwise)."""
    (tmp_path / "bank.py").write_text(BANK)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    sys.modules.pop("bank", None)
    yield tmp_path
    sys.modules.pop("bank", None)  # the commands imported it


# -- one rule-loading convention -------------------------------------------------------
@pytest.mark.parametrize("command", ["graph", "replay", "log firings", "worker"])
def test_every_command_imports_rules_from_the_current_directory(
    in_app_dir: Path, command: str
) -> None:
    url = f"sqlite:///{in_app_dir / 'app.db'}"
    migrate.upgrade(url)
    args = {
        "graph": ["graph", "--rules", "bank:detector"],
        "replay": ["replay", "--rules", "bank:detector", "--source", url],
        "log firings": ["log", "firings", "--url", url, "--rules", "bank:detector"],
        "worker": ["worker", "--url", url, "--rules", "bank:detector", "--once"],
    }[command]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "cannot import" not in result.output


@pytest.mark.parametrize("command", ["graph", "replay", "log firings", "worker", "global"])
def test_every_command_takes_the_database_and_rules_from_the_environment(
    in_app_dir: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SENTINEL_URL`` and ``SENTINEL_RULES`` stand for ``--url`` and ``--rules``
    in every command (replay's ``--url`` was ``--source`` only)."""
    url = f"sqlite:///{in_app_dir / 'app.db'}"
    migrate.upgrade(url)
    monkeypatch.setenv("SENTINEL_URL", url)
    monkeypatch.setenv("SENTINEL_RULES", "bank:detector")
    args = {
        "graph": ["graph"],
        "replay": ["replay"],
        "log firings": ["log", "firings"],
        "worker": ["worker", "--once"],
        "global": ["global", "--help"],
    }[command]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    if command == "global":
        assert "SENTINEL_RULES" in result.output


@pytest.mark.parametrize(
    ("args", "option", "variable"),
    [
        (["log", "show"], "'--url'", "SENTINEL_URL"),
        (["replay", "--rules", "bank:detector"], "'--url' / '--source'", "SENTINEL_URL"),
        (["graph"], "'--rules'", "SENTINEL_RULES"),
    ],
)
def test_a_missing_option_names_its_environment_variable(
    args: list[str], option: str, variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SENTINEL_URL", raising=False)
    monkeypatch.delenv("SENTINEL_RULES", raising=False)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert f"Missing option {option}. Give it, or set {variable}." in result.output


# -- advice that names the tables asked about ------------------------------------------
def test_missing_tables_advice_keeps_the_prefix(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    migrate.upgrade(url)  # sentinel_ tables exist; ops_ ones do not
    run = CliRunner()
    upgrade = f"sentinel db upgrade --url {url} --prefix ops_"
    for args in (
        ["log", "show", "--url", url, "--prefix", "ops_"],
        ["log", "firings", "--url", url, "--prefix", "ops_"],
        ["replay", "--rules", "tests.test_cli_conventions:no_rules", "--source", url,
         "--prefix", "ops_"],
    ):  # fmt: skip
        result = run.invoke(main, args)
        assert result.exit_code == 1, (args, result.output)
        assert f"run `{upgrade}`" in result.output, (args, result.output)
    result = run.invoke(main, ["db", "current", "--url", url, "--prefix", "ops_"])
    assert result.output.strip() == (
        f"none: sentinel's tables were never created here; run `{upgrade}`"
    )
    # Following the advice creates the tables asked about, not a second sentinel_ set.
    result = run.invoke(main, upgrade.split()[1:])
    assert result.exit_code == 0, result.output
    assert run.invoke(main, ["log", "show", "--url", url, "--prefix", "ops_"]).exit_code == 0


def no_rules() -> LocalEventDetector:
    return LocalEventDetector()


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_missing_tables_advice_keeps_the_schema(
    db_url: str, engine: sa.Engine, extra_schema: str
) -> None:
    migrate.upgrade(engine)  # in the default schema, not in extra_schema
    run = CliRunner()
    for args in (
        ["log", "show", "--url", db_url, "--schema", extra_schema],
        ["db", "current", "--url", db_url, "--schema", extra_schema],
    ):
        result = run.invoke(main, args)
        assert f"--schema {extra_schema}`" in result.output, result.output


# -- output that survives a pipe -------------------------------------------------------
def test_log_show_piped_keeps_every_value_whole(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    migrate.upgrade(url)
    long = {"note": "x" * 150, "qty": 3}
    scope = "a-transaction-with-a-long-id-0123456789"
    occurrences = [
        Occurrence("txn:begin", 1, 1.7e9, scope=scope),
        Occurrence("Stock.set_price:begin", 2, 1.7e9, params=long, scope=scope),
    ]
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        LogWriter().write(conn, occurrences)
    engine.dispose()
    result = CliRunner().invoke(main, ["log", "show", "--url", url], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "# sentinel event log: last 2 row(s)"
    assert lines[1].split() == ["id", "scope", "t_occ", "event", "at", "(UTC)", "source",
                                "params", "outcome"]  # fmt: skip
    begin, price = lines[2:]
    assert begin.split()[1:4] == [scope, "1", "txn:begin"]
    assert '{"note":"' + "x" * 150 + '","qty":3}' in price
    assert len(lines) == 4  # one line per row, nothing folded


# -- why each rule fired ---------------------------------------------------------------
@pytest.fixture(scope="module")
def stock_log(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The STOCK program's log (Appendix B): R2 fired during the transaction, R1
    at its commit."""
    db = tmp_path_factory.mktemp("stock") / "stock.db"
    program.run(database=db)
    return f"sqlite:///{db}"


def test_firings_list_each_firings_constituents_from_the_log(stock_log: str) -> None:
    result = CliRunner().invoke(main, ["log", "firings", "--url", stock_log])
    assert result.exit_code == 0, result.output
    with LogReader(stock_log) as log:
        firings = list(log.firings())
        events = {(o.scope, o.t_occ): o for o, _, _ in log.occurrences()}
    blocks = result.output.split("\n#")
    assert len(blocks) == len(firings) == 2
    for firing, block in zip(firings, blocks, strict=True):
        head, _detection, said, *items = block.lstrip("#").splitlines()
        assert head.startswith(f"{firing.id} {firing.rule} fired ({firing.coupling}) at ")
        assert said.strip() == "constituents (--rules shows how they combined):"
        assert [line.split()[1:3] for line in items] == [
            [events[c].event, f"@{c[1]}"] for c in firing.constituents
        ]


def test_firings_with_the_rules_show_how_operators_combined(stock_log: str) -> None:
    result = CliRunner().invoke(
        main,
        ["log", "firings", "--url", stock_log, "--rules", "examples.stock.program:replay_rules",
         "--rule", "R2"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[2] == (
        "  rule: on Stock.e1 ^ Stock.e2 ; set_IBM_price, recent context, immediate coupling, "
        "condition _cond, priority 20, trigger mode previous"
    )
    tree = [line[4:] for line in lines[4:]]
    # seq_event = e4 ; set_IBM_price, e4 = e1 ^ e2: {DEC 100, MS 200} then IBM 75.95
    assert [t.split(" {")[0].split(" at ")[0] for t in tree] == [
        "Stock.e1 ^ Stock.e2 ; set_IBM_price @7",
        "├─ Stock.e1 ^ Stock.e2 @6",
        "│  ├─ Stock.set_price:begin @4 <Stock 2>",
        "│  └─ Stock.sell_stock:end @6 <Stock 3>",
        "└─ Stock.set_price:begin @7 <Stock 1>",
    ]
    assert '{"price": 75.95}' in tree[-1]


def test_fired_at_is_on_the_detectors_clock(tmp_path: Path) -> None:
    from sqlalchemy.orm import sessionmaker

    import sentinel

    clock = VirtualClock(1_000_000.0)
    det = LocalEventDetector(clock=clock)
    det.explicit("e")
    det.rule("now", "e", action=lambda o: None)
    det.rule("later", "e", action=lambda o: None, coupling="deferred")
    url = f"sqlite:///{tmp_path / 'app.db'}"
    migrate.upgrade(url)
    engine = sa.create_engine(url)
    Session = sessionmaker(engine)
    attachment = sentinel.attach(Session, detector=det, workers=0)
    with Session.begin() as session, det.use_scope(sentinel.scope_of(session)):
        det.signal("e")
        clock.advance(5)
    attachment.detach()
    with LogReader(engine) as log:
        at = {o.t_occ: o.at for o, _, _ in log.occurrences()}
        fired = {f.rule: f for f in log.firings()}
    engine.dispose()
    assert fired["now"].fired_at == at[fired["now"].t_occ]  # the instant of its detection
    assert fired["later"].fired_at == at[fired["later"].t_occ]  # pre-commit, 5 s later
    assert (fired["later"].fired_at - fired["now"].fired_at).total_seconds() == 5


# -- sentinel graph --svg --------------------------------------------------------------
def test_graph_svg_runs_graphviz_on_the_dot_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "bin" / "dot"
    fake.parent.mkdir()
    fake.write_text(
        textwrap.dedent("""\
        #!/bin/sh
        # a stand-in for Graphviz: keep the DOT it is given, answer with an SVG
        cat > "$(dirname "$0")/given.dot"
        echo "$@" > "$(dirname "$0")/args"
        printf '<svg/>' > "$3"
        """)
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "graph.svg"
    rules = "tests.test_cli_graph:shared_rules"
    result = CliRunner().invoke(main, ["graph", "--rules", rules, "--svg", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == "<svg/>"
    assert (fake.parent / "args").read_text().split() == ["-Tsvg", "-o", str(out)]
    dot = CliRunner().invoke(main, ["graph", "--rules", rules, "--dot"]).output
    assert (fake.parent / "given.dot").read_text().strip() == dot.strip()


def test_graph_svg_without_graphviz_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    result = CliRunner().invoke(
        main, ["graph", "--rules", "tests.test_cli_graph:shared_rules", "--svg", "x.svg"]
    )
    assert result.exit_code == 1
    assert "Graphviz's dot program, which is not installed" in result.output


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_graph_svg_with_graphviz(tmp_path: Path) -> None:
    out = tmp_path / "graph.svg"
    result = CliRunner().invoke(
        main, ["graph", "--rules", "tests.test_cli_graph:shared_rules", "--svg", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "<svg" in out.read_text() and "rule a" in out.read_text()


# -- hostile inputs: a one-line error, never a traceback or a hang ----------------------
GROCERY = Path(__file__).resolve().parent.parent / "examples" / "grocery"


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--chronon", "0", "Invalid value for '--chronon': a duration must be positive"),
        ("--chronon", "-5", "Invalid value for '--chronon': a duration is seconds"),
        ("--chronon", "9" * 30, "Invalid value for '--chronon': a duration must be positive"),
        ("--until", "yesterday", "Invalid value for '--until': --until must be a time"),
    ],
)
def test_bicep_run_refuses_a_bad_chronon_or_end_before_any_work(
    tmp_path: Path, option: str, value: str, says: str
) -> None:
    db = tmp_path / "app.db"
    result = CliRunner().invoke(
        main,
        ["bicep", "run", str(GROCERY / "program.bicepl"), "--events",
         str(GROCERY / "events.jsonl"), "--url", f"sqlite:///{db}", option, value],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not db.exists()  # refused before the database was touched


@pytest.mark.parametrize("what", ["binary", "endless"])
def test_bicep_reads_neither_a_binary_nor_an_endless_file(tmp_path: Path, what: str) -> None:
    bad = tmp_path / "bad.bin"
    if what == "binary":
        bad.write_bytes(bytes(range(256)) * 4)
    else:  # /dev/zero's like: no line break, more than any program or line
        bad.write_bytes(b"\0" * (3 << 20))
    url = f"sqlite:///{tmp_path / 'app.db'}"
    runner = CliRunner()
    program = str(GROCERY / "program.bicepl")
    events = str(GROCERY / "events.jsonl")
    checked = runner.invoke(main, ["bicep", "check", str(bad)])
    as_program = runner.invoke(main, ["bicep", "run", str(bad), "--events", events, "--url", url])
    as_events = runner.invoke(main, ["bicep", "run", program, "--events", str(bad), "--url", url])
    for result in (checked, as_program, as_events):
        assert result.exit_code == 1, result.output
        assert result.output.startswith("Error: ") and "Traceback" not in result.output
        assert isinstance(result.exception, SystemExit)
    expected = "not UTF-8 text" if what == "binary" else "longer than 1,048,576"
    assert expected in checked.output and expected in as_events.output


def test_a_database_path_too_long_for_the_system_is_a_one_line_error() -> None:
    result = CliRunner().invoke(main, ["log", "show", "--url", "sqlite:///" + "a" * 100_000])
    assert result.exit_code == 1
    assert result.output.startswith("Error: cannot use aaaa")
    assert "(100,000 characters): File name too long" in result.output
    assert len(result.output) < 200


@pytest.mark.parametrize("reference", ["../../etc:passwd", "a-b:c", "os:path/x", ".rel:x"])
def test_a_rules_reference_that_is_no_module_name_is_refused_as_such(reference: str) -> None:
    result = CliRunner().invoke(main, ["graph", "--rules", reference])
    assert result.exit_code == 1, result.output
    assert "a rules reference looks like 'package.module:attribute'" in result.output
    assert isinstance(result.exception, SystemExit)


@pytest.mark.parametrize(
    "args",
    [
        ["worker", "--once", "--lease", "nan"],
        ["worker", "--once", "--poll", "inf"],
        ["worker", "--once", "--poll", "nan"],
        ["global", "--until-idle", "--lease", "inf"],
        ["global", "--until-idle", "--action-lease", "nan"],
        ["global", "--until-idle", "--retry-delay", "inf"],
    ],
)
def test_a_duration_that_is_not_a_finite_number_is_refused_before_any_work(
    tmp_path: Path, args: list[str]
) -> None:
    """``nan`` and ``inf`` for a number of seconds are usage errors (exit 2)
    naming the option, before the database is touched (they failed deep inside
    with a traceback, or made the poll loop spin)."""
    db = tmp_path / "app.db"
    result = CliRunner().invoke(
        main, [*args, "--url", f"sqlite:///{db}", "--rules", "examples.stock.program:replay_rules"]
    )
    assert result.exit_code == 2, result.output
    assert "is not a finite number of seconds" in result.output
    assert args[-2] in result.output
    assert not db.exists()


@pytest.mark.parametrize(
    "args", [["global", "--until-idle", "--lease", "1e300"], ["worker", "--once", "--poll", "1e12"]]
)
def test_a_duration_past_a_century_is_refused_before_any_work(
    tmp_path: Path, args: list[str]
) -> None:
    """``--lease 1e300`` failed deep inside with an OverflowError and a traceback."""
    db = tmp_path / "app.db"
    result = CliRunner().invoke(
        main, [*args, "--url", f"sqlite:///{db}", "--rules", "examples.stock.program:replay_rules"]
    )
    assert result.exit_code == 2, result.output
    assert "seconds is more than a century" in result.output and args[-2] in result.output
    assert not db.exists()


def test_a_global_detectors_name_longer_than_its_clock_rows_scope_allows_is_refused(
    tmp_path: Path,
) -> None:
    """A name over 88 characters was accepted, and every clock row then
    failed (its scope, global:<name>:<32 hex>, over 128 characters): temporal
    rules never fired while the log was idle, and the service retried for ever."""
    from sentinel.errors import GlobalDetectorError
    from sentinel.global_detector import GlobalDetector

    db = tmp_path / "app.db"
    args = ["global", "--until-idle", "--url", f"sqlite:///{db}", "--name", "n" * 89]
    args += ["--rules", "examples.stock.program:replay_rules"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "is at most 88 characters, not 89" in result.output
    with pytest.raises(GlobalDetectorError, match="1 to 88 characters"):
        GlobalDetector("examples.stock.program:replay_rules", f"sqlite:///{db}", name="n" * 89)


def test_a_database_driver_that_is_not_installed_is_a_one_line_error() -> None:
    """``mysql://`` (SQLAlchemy's default MySQL driver, MySQLdb) and other
    drivers no extra brings: one line naming the module, not a traceback."""
    result = CliRunner().invoke(main, ["db", "current", "--url", "mysql://root@127.0.0.1/x"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: a module this command needs is not installed")
    assert "MySQLdb" in result.output and "mysql+pymysql://" in result.output
    assert isinstance(result.exception, SystemExit)


def test_a_rules_module_whose_code_fails_is_a_one_line_error(in_app_dir: Path) -> None:
    """The module's or the factory's own exception, with its file and line."""
    (in_app_dir / "broken.py").write_text("def rules():\n    raise RuntimeError('boom')\n")
    result = CliRunner().invoke(main, ["graph", "--rules", "broken:rules"])
    assert result.exit_code == 1, result.output
    assert "calling it raised RuntimeError: boom (" in result.output
    assert "broken.py:2)" in result.output
    assert "Traceback" not in result.output


def test_a_rule_sentinel_refuses_in_a_rules_module_names_the_modules_line(
    in_app_dir: Path,
) -> None:
    """A rule on an unknown event fails inside sentinel: the error named the
    library's file and line, not the line of the rules module to change."""
    (in_app_dir / "unknown.py").write_text(
        "from sentinel import LocalEventDetector\n"
        "detector = LocalEventDetector()\n"
        "detector.explicit('a')\n"
        "detector.rule('r', 'a ; nosuch', action=print)\n"
    )
    result = CliRunner().invoke(main, ["graph", "--rules", "unknown:detector"])
    assert result.exit_code == 1, result.output
    assert "raised UnknownEventError: unknown event 'nosuch'" in result.output
    assert "unknown.py:4)" in result.output
    assert "sentinel/" not in result.output.split("(")[-1]


@pytest.mark.parametrize("command", [["worker", "--once"], ["global", "--until-idle"]])
def test_a_mistyped_sqlite_path_is_refused_and_nothing_created(
    tmp_path: Path, command: list[str]
) -> None:
    """As ``log show`` and ``replay`` do: no empty database made by connecting."""
    db = tmp_path / "typo.db"
    result = CliRunner().invoke(
        main,
        [*command, "--url", f"sqlite:///{db}", "--rules", "examples.stock.program:replay_rules"],
    )
    assert result.exit_code == 1, result.output
    assert result.output == f"Error: no SQLite database at {db}\n"
    assert not db.exists()


ATTACHED = """
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sentinel import LocalEventDetector, attach
from sentinel.log import migrate

engine = sa.create_engine("sqlite:///app.db")
migrate.upgrade(engine)
detector = LocalEventDetector()
attachment = attach(sessionmaker(engine), detector=detector, workers=0)
"""


def test_worker_on_an_attachment_refuses_another_database_and_ignored_options(
    in_app_dir: Path,
) -> None:
    """``--rules`` naming an attachment drains the attachment's own outbox: a
    ``--url`` of another database, or options it would ignore, are usage errors
    (the worker drained the attachment's database whatever --url said)."""
    (in_app_dir / "attached.py").write_text(ATTACHED)
    base = ["worker", "--once", "--rules", "attached:attachment"]
    other = in_app_dir / "other.db"
    other.touch()
    wrong = CliRunner().invoke(main, [*base, "--url", f"sqlite:///{other}"])
    assert wrong.exit_code == 2, wrong.output
    assert "names an attachment on sqlite:///app.db, not on --url" in wrong.output
    ignored = CliRunner().invoke(main, [*base, "--url", "sqlite:///app.db", "--lease", "5"])
    assert ignored.exit_code == 2, ignored.output
    assert "--lease would be ignored" in ignored.output
    same = CliRunner().invoke(main, [*base, "--url", f"sqlite:///{in_app_dir / 'app.db'}"])
    assert same.exit_code == 0, same.output
    assert "0 done" in same.output
    sys.modules.pop("attached", None)


def test_worker_refuses_rules_without_a_detached_rule(in_app_dir: Path) -> None:
    """Every outbox entry is a detached rule's: a rule set without one (a
    mistyped ``--rules``) would mark each entry failed."""
    (in_app_dir / "immediate.py").write_text(
        "from sentinel import LocalEventDetector\n"
        "detector = LocalEventDetector()\n"
        "detector.explicit('e')\n"
        "detector.rule('now', 'e', action=print)\n"
    )
    url = f"sqlite:///{in_app_dir / 'app.db'}"
    migrate.upgrade(url)
    result = CliRunner().invoke(
        main, ["worker", "--once", "--url", url, "--rules", "immediate:detector"]
    )
    assert result.exit_code == 2, result.output
    assert "has no detached rule" in result.output
    sys.modules.pop("immediate", None)


FAILING = """
from sentinel import LocalEventDetector

detector = LocalEventDetector()
detector.explicit("e")


def boom(occ):
    raise RuntimeError("the rule's own failure")


detector.rule("fails", "e", action=boom, coupling="detached")
"""


def test_worker_once_exits_1_when_entries_failed(
    in_app_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For cron and deploy hooks: ``--once`` that leaves entries failed for good
    exits with status 1 (it said "1 failed" and exited 0)."""
    import importlib

    from sqlalchemy.orm import sessionmaker

    import sentinel

    (in_app_dir / "failing.py").write_text(FAILING)
    monkeypatch.syspath_prepend(str(in_app_dir))
    failing = importlib.import_module("failing")
    url = f"sqlite:///{in_app_dir / 'app.db'}"
    migrate.upgrade(url)
    engine = sa.create_engine(url)
    with (
        sentinel.attach(sessionmaker(engine), detector=failing.detector, workers=0),
        failing.detector.transaction(),
    ):
        failing.detector.signal("e")
    engine.dispose()
    args = ["worker", "--once", "--url", url, "--rules", "failing:detector"]
    result = CliRunner().invoke(main, [*args, "--max-attempts", "1"])
    assert result.exit_code == 1, result.output
    assert "0 done, 0 to retry, 1 failed" in result.output
    again = CliRunner().invoke(main, args)  # nothing left to run: a clean exit
    assert again.exit_code == 0, again.output
    sys.modules.pop("failing", None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["bicep", "install", "examples/grocery/program.bicepl", "--url", "sqlite://", "--keep"],
            "--keep goes with --upgrade",
        ),
        (["global", "--until-idle", "--url", "sqlite://", "--name", " "], "a cursor needs a name"),
    ],
)
def test_options_that_would_be_ignored_or_empty_are_usage_errors(
    args: list[str], message: str
) -> None:
    result = CliRunner().invoke(main, [*args, *(["--rules", "x:y"] if args[0] == "global" else [])])
    assert result.exit_code == 2, result.output
    assert message in result.output


# -- integer options are bounded ---------------------------------------------------------
HUGE = str(2**63)


@pytest.mark.parametrize(
    "args",
    [
        ["log", "show", "-n", HUGE],
        ["log", "firings", "-n", HUGE],
        ["rules", "switches", "--limit", HUGE],
        ["log", "export", "--chunk-size", HUGE],
        ["worker", "--rules", "bank:detector", "--once", "--max-attempts", HUGE],
        ["global", "--rules", "bank:detector", "--workers", HUGE],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_huge_count_is_refused_as_out_of_range_not_overflowing(
    tmp_path: Path, args: list[str]
) -> None:
    """``-n 9223372036854775808`` made ``log firings`` fail with an
    ``OverflowError`` traceback (a deque's length), ``rules switches`` too (a
    SQL LIMIT); every integer option has a maximum, checked before any work."""
    url = f"sqlite:///{tmp_path / 'log.db'}"
    migrate.upgrade(sa.create_engine(url))
    out = ["--out", str(tmp_path / "export")] if args[1] == "export" else []
    result = CliRunner().invoke(main, [*args, *out, "--url", url])
    assert result.exit_code == 2, result.output
    assert "is not in the range" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_every_integer_option_has_a_maximum() -> None:
    import click

    def commands(group: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
        yield path, group
        if isinstance(group, click.Group):
            for name, sub in group.commands.items():
                yield from commands(sub, f"{path} {name}")

    unbounded = [
        f"{path} {param.opts[0]}"
        for path, command in commands(main, "sentinel")
        for param in command.params
        if isinstance(param.type, click.IntRange | click.types.IntParamType)
        and getattr(param.type, "max", None) is None
    ]
    assert unbounded == []


# -- output cut short by its reader ------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["log", "show"],
        ["log", "firings"],
        ["graph", "--rules", "tests.global_detector.rules:detector"],
        ["db", "upgrade", "--sql"],
        ["bicep", "check", "examples/grocery/program.bicepl"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_output_piped_into_a_reader_that_stops_early_ends_quietly(
    tmp_path: Path, args: list[str]
) -> None:
    """``sentinel log show | head -1``: the reader went away; the command said
    "Error: BrokenPipeError ..." and exited 1. Now: nothing on stderr, status 0."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    url = f"sqlite:///{tmp_path / 'log.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as conn:
        LogWriter().write(conn, [Occurrence("e", i, float(i), scope="s") for i in range(30)])
    engine.dispose()
    needs_url = args[0] in ("log", "db")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from sentinel.cli import main; main()", *args]
        + (["--url", url] if needs_url else []),
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert err == ""


# -- advice that works -------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["log", "show"],
        ["log", "firings"],
        ["log", "export", "--out", "never-made"],
        ["replay", "--rules", "tests.global_detector.rules:detector"],
        ["ui"],
        ["rules", "switches"],
        ["bicep", "install", "examples/grocery/program.bicepl"],
        [
            "bicep",
            "run",
            "examples/grocery/program.bicepl",
            "--events",
            "examples/grocery/events.jsonl",
        ],
        ["worker", "--rules", "tests.global_detector.rules:detector", "--once"],
        ["global", "--rules", "tests.global_detector.rules:detector", "--until-idle"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_an_in_memory_sqlite_database_is_refused_not_advised_an_upgrade_that_fails(
    args: list[str],
) -> None:
    """``log show --url sqlite://`` advised ``sentinel db upgrade --url
    sqlite://``, which refuses an in-memory database (``bicep install`` advised
    it too): every command refuses one up front, as ``db upgrade`` does."""
    result = CliRunner().invoke(main, [*args, "--url", "sqlite://"])
    assert result.exit_code == 2, result.output
    assert "sqlite:// is an in-memory SQLite database" in result.output
    assert "db upgrade" not in result.output


@pytest.mark.parametrize(
    "args", [["log", "show"], ["db", "upgrade"], ["db", "current"], ["rules", "switches"]]
)
def test_a_schema_sqlite_does_not_have_is_refused_not_advised_an_upgrade_that_fails(
    tmp_path: Path, args: list[str]
) -> None:
    """``log show --schema nosuch`` on SQLite advised ``sentinel db upgrade
    --schema nosuch``, which failed with "no such table: nosuch.sqlite_master"."""
    url = f"sqlite:///{tmp_path / 'log.db'}"
    migrate.upgrade(sa.create_engine(url))
    result = CliRunner().invoke(main, [*args, "--url", url, "--schema", "nosuch"])
    assert result.exit_code == 2, result.output
    assert "--schema nosuch: a SQLite database has no such schema" in result.output
    ok = CliRunner().invoke(main, [*args, "--url", url, "--schema", "main"])
    assert ok.exit_code == 0, ok.output
