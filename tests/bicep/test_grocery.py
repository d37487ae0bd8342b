"""The grocery example runs as documented, fires what the reference evaluator
fires, and the CLI runs it too."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from examples.grocery import HERE, UNTIL, run
from sentinel.bicep import compile_program
from sentinel.bicep.sources import read_stream
from sentinel.bicep.times import seconds
from sentinel.cli import main

from .reference import Reference

EXPECTED = [
    ("Mon 08:15", "orderResource('Milk')"),
    ("Mon 09:15", "order1Day('Butter')"),
    ("Mon 13:15", "informOwner('empty', 'Eggs', 2014-04-07 13:00)"),
    ("Mon 14:45", "orderResource('Jam')"),
    ("Mon 16:30", "informOwner('delayed', 'Milk', 2014-04-08 17:00)"),
    ("Mon 20:00", "twitterEarlyDelivery('Delivery company delivers %s amazingly fast!', 'Butter')"),
    ("Tue 07:30", "informOwner('cancelled', 'Cheese', 2014-04-08 07:30)"),
    ("Wed 18:00", "orderResource('Cheese')"),
]


def _replenishing(snap: dict[str, list[dict[str, Any]]], now: int) -> Any:
    rows = [(r["resource"], r["occtime"], "resourcelow") for r in snap["resourcelow"]]
    rows += [
        (r["resource"], r["occtime"], "resourceexpiring")
        for r in snap["resourceexpiring"]
        if r["occtime"] - now < 5 * 86_400
    ]
    return [({"resource": res, "occtime": occ}, [(cls, (res,))]) for res, occ, cls in rows]


def _instant(snap: dict[str, list[dict[str, Any]]], now: int) -> Any:
    return [
        (
            {"resource": r["resource"], "occtime": r["occtime"]},
            [("resourceempty", (r["resource"],))],
        )
        for r in snap["resourceempty"]
    ]


def test_the_grocery_example_fires_what_the_thesis_scenario_should() -> None:
    out = io.StringIO()
    fired = run(out)
    assert [(f"{c.tick:%a %H:%M}", str(c)) for c in fired] == EXPECTED
    text = out.getvalue()
    assert "rejected ResourceLow Milk: a second announcement of an IMMUTABLE" in text
    assert "because ON CHANGE AND new.occTime > old.occTime DO informOwner" in text

    program = compile_program((HERE / "program.bicepl").read_text(), name="grocery")
    ref = Reference(
        program,
        900,
        {"ReplenishingNeeded": _replenishing, "InstantReplenishingNeeded": _instant},
    )
    for r in read_stream(HERE / "events.jsonl"):
        attrs = {k: v for k, v in r.items() if k not in ("class", "occ", "det", "revoke", "_where")}
        ref.announce(
            r["class"],
            occ=None if r.get("occ") is None else seconds(r["occ"]),
            det=seconds(r["det"]),
            revoke=r["revoke"],
            **attrs,
        )
    ref.run_until(seconds(UNTIL))
    assert [(f.tick, f.action, f.key) for f in ref.fired_all] == [
        (int(c.tick.timestamp()), c.action, tuple(c.key.values())) for c in fired
    ]


def test_sentinel_bicep_check_shows_the_rewritten_sql() -> None:
    result = CliRunner().invoke(main, ["bicep", "check", str(HERE / "program.bicepl")])
    assert result.exit_code == 0, result.output
    assert "program program: 6 class(es), 4 action(s)" in result.output
    assert (
        "SELECT tab.occTime AS occTime, NOW AS detTime, tab.resource FROM (SELECT resource, "
        "occTime FROM ResourceLow UNION SELECT resource, occTime FROM ResourceExpiring "
        "WHERE occTime - NOW < 432000) AS tab"
    ) in result.output
    assert "statement 2: ON LATE(5h, 1d) DO order1Day(new.resource)" in result.output


def test_sentinel_bicep_check_reports_errors_with_a_caret(tmp_path: Path) -> None:
    bad = tmp_path / "bad.bicepl"
    bad.write_text("CREATE MUTABLE SUBSCRIBED EVENT CLASS X (a INT) ID (b) LIFESPAN(1d);\n")
    result = CliRunner().invoke(main, ["bicep", "check", str(bad)])
    assert result.exit_code == 1
    assert "key b of X is not one of its attributes (a) at line 1, column 53" in result.output
    assert "^" in result.output


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sentinel_bicep_run_prints_the_actions(db_url: str, tmp_path: Path) -> None:
    # CSV, with the announcements of the JSON lines file
    records = list(read_stream(HERE / "events.jsonl"))
    columns = ["class", "occ", "det", "revoke", "resource", "amountLeft", "amount"]
    lines = [",".join(columns)]
    for r in records:
        lines.append(",".join("" if r.get(c) in (None, False) else str(r.get(c)) for c in columns))
    stream = tmp_path / "events.csv"
    stream.write_text("\n".join(lines) + "\n")
    result = CliRunner(env={"COLUMNS": "240"}).invoke(
        main,
        [
            "bicep",
            "run",
            str(HERE / "program.bicepl"),
            "--events",
            str(stream),
            "--url",
            db_url,
            "--name",
            "grocery",
            "--until",
            "2014-04-07T21:00",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (
        "13 announcement(s), ticks up to 2014-04-07 21:00:00 UTC, 52 tick(s) with work, "
        "6 action(s), 1 announcement(s) rejected" in result.output
    )
    for _, action in EXPECTED[:6]:
        assert action in result.output
    # running it again: the program is installed, the announcements are new ones
    again = CliRunner().invoke(
        main,
        [
            "bicep",
            "run",
            str(HERE / "program.bicepl"),
            "--events",
            str(stream),
            "--url",
            db_url,
            "--name",
            "grocery",
            "--chronon",
            "30m",
        ],
    )
    assert again.exit_code == 1 and "sentinel bicep install --upgrade" in again.output


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sentinel_bicep_run_without_until_acts_on_what_the_stream_announces_for_later(
    db_url: str,
) -> None:
    # The last announcement is detected on Monday; the Cheese order it implies
    # goes out at Wednesday's 18:00 tick. Stopping at the last detection time
    # would silently drop it.
    result = CliRunner(env={"COLUMNS": "240"}).invoke(
        main,
        [
            "bicep",
            "run",
            str(HERE / "program.bicepl"),
            "--events",
            str(HERE / "events.jsonl"),
            "--url",
            db_url,
            "--name",
            "grocery",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "8 action(s), 1 announcement(s) rejected" in result.output
    for _, action in EXPECTED:
        assert action in result.output
    assert "2014-04-09 18:00" in result.output


def test_bicep_install_creates_the_log_tables_but_never_migrates_an_older_log(
    tmp_path: Path,
) -> None:
    """Where sentinel's tables do not exist, ``bicep install`` creates them; a log
    at an older schema revision is refused with the command that upgrades it
    (migrating a log is ``sentinel db upgrade``'s decision), and left as it is."""
    from sentinel.log import migrate
    from sentinel.log.tables import SCHEMA_VERSION

    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    args = ["bicep", "install", str(HERE / "program.bicepl"), "--name", "grocery"]
    result = CliRunner().invoke(main, [*args, "--url", fresh])
    assert result.exit_code == 0, result.output
    assert migrate.current(fresh) == SCHEMA_VERSION

    old = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(old, "0002")
    result = CliRunner().invoke(main, [*args, "--url", old])
    assert result.exit_code == 1, result.output
    assert "at schema revision 0002, older than" in result.output
    assert "sentinel db upgrade --url" in result.output
    assert migrate.current(old) == "0002"


def test_bicep_run_says_when_announcements_without_det_were_not_read(tmp_path: Path) -> None:
    """``det`` defaults to now: such an announcement is detected after the
    stream's last tick and waits in the inbox; the summary said nothing."""
    events = tmp_path / "nodet.jsonl"
    events.write_text(
        '{"class": "ResourceLow", "resource": "Milk", "amountLeft": 1, "occ": "2014-04-07T08:02"}\n'
    )
    result = CliRunner().invoke(
        main,
        [
            "bicep", "run", str(HERE / "program.bicepl"), "--name", "grocery",
            "--events", str(events), "--url", f"sqlite:///{tmp_path / 'r.db'}",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "1 announcement(s) detected after the last tick not read yet" in result.output
    assert "(1 without a detection time ('det')" in result.output


def test_bicep_run_refuses_more_ticks_than_max_ticks_when_each_has_work(tmp_path: Path) -> None:
    """A class reading NOW gives the program work at every tick: ``--until
    9999-12-31`` would have processed 280 million ticks (it ran for days).
    Refused before the stream is loaded; a nearer end runs."""
    events = tmp_path / "one.jsonl"
    events.write_text(
        '{"class": "ResourceLow", "resource": "Milk", "amountLeft": 1, '
        '"occ": "2014-04-07T08:02", "det": "2014-04-07T08:02"}\n'
    )
    url = f"sqlite:///{tmp_path / 'r.db'}"
    args = [
        "bicep", "run", str(HERE / "program.bicepl"), "--name", "grocery",
        "--events", str(events), "--url", url,
    ]  # fmt: skip
    result = CliRunner().invoke(main, [*args, "--until", "9999-12-31T00:00"])
    assert result.exit_code == 2, result.output
    assert "280,005,952 ticks to process up to 9999-12-31 00:00:00 UTC" in result.output
    assert "class ReplenishingNeeded reads the tick's time" in result.output
    result = CliRunner().invoke(main, [*args, "--until", "2014-04-09T00:00", "--max-ticks", "100"])
    assert result.exit_code == 2 and "more than --max-ticks 100" in result.output
    result = CliRunner().invoke(main, [*args, "--until", "2014-04-09T00:00"])
    assert result.exit_code == 0, result.output
    # loaded once: the refusals left nothing in the inboxes
    assert "1 announcement(s), ticks up to 2014-04-09 00:00:00 UTC" in result.output
    assert "1 action(s)" in result.output


def test_bicep_run_names_the_line_of_a_time_that_is_none(tmp_path: Path) -> None:
    """The stream's times were read (for the ticks to run) before the records
    were checked: a bad one was a traceback without its line."""
    events = tmp_path / "bad.jsonl"
    events.write_text(
        '{"class": "ResourceLow", "resource": "Milk", "amountLeft": 1, "occ": "2014-04-07T08:02"}\n'
        '{"class": "ResourceLow", "resource": "Eggs", "amountLeft": 1, "occ": "2014-02-30T00:01"}\n'
    )
    result = CliRunner().invoke(
        main,
        [
            "bicep", "run", str(HERE / "program.bicepl"), "--name", "grocery",
            "--events", str(events), "--url", f"sqlite:///{tmp_path / 'r.db'}",
        ],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert f"{events}:2: time must be a time" in result.output
    assert "Traceback" not in result.output


def test_bicep_run_reads_a_stream_the_programs_clock_has_passed(tmp_path: Path) -> None:
    """After a run (or an --upgrade) the program's clock is at the stream's
    last tick: running a stream again announced what it held before that tick,
    and stopped at the same tick, so nothing was read and nothing said so."""
    program = tmp_path / "p.bicepl"
    program.write_text(
        "CREATE MUTABLE SUBSCRIBED EVENT CLASS D (r VARCHAR(5)) ID (r) LIFESPAN(1d)\n"
        "  ON ANNOUNCEMENT DO act(new.r);\n"
    )
    events = tmp_path / "s.jsonl"
    events.write_text(
        '{"class": "D", "r": "a", "occ": "2024-03-31T00:50", "det": "2024-03-31T00:55"}\n'
    )
    args = [
        "bicep", "run", str(program), "--events", str(events),
        "--url", f"sqlite:///{tmp_path / 'r.db'}",
    ]  # fmt: skip
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0 and "1 action(s)" in first.output, first.output
    program.write_text(program.read_text().replace("VARCHAR(5)", "VARCHAR(6)"))
    events.write_text(
        '{"class": "D", "r": "b", "occ": "2024-03-31T00:50", "det": "2024-03-31T00:56"}\n'
    )
    again = CliRunner().invoke(main, [*args, "--upgrade"])
    assert again.exit_code == 0, again.output
    assert "ticks up to 2024-03-31 01:15:00 UTC" in again.output
    assert "1 action(s)" in again.output


def test_bicep_run_counts_max_ticks_from_the_programs_next_tick(tmp_path: Path) -> None:
    """A program that ran before does not process its past ticks again: the
    count started at the stream's first time, and refused a second run that
    had a few ticks to do."""
    events = tmp_path / "one.jsonl"
    events.write_text(
        '{"class": "ResourceLow", "resource": "Milk", "amountLeft": 1, '
        '"occ": "2014-04-07T08:02", "det": "2014-04-07T08:02"}\n'
    )
    args = [
        "bicep", "run", str(HERE / "program.bicepl"), "--name", "grocery",
        "--events", str(events), "--url", f"sqlite:///{tmp_path / 'r.db'}",
    ]  # fmt: skip
    first = CliRunner().invoke(main, [*args, "--until", "2014-04-09T00:00"])
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(main, [*args, "--until", "2014-04-09T02:00", "--max-ticks", "20"])
    assert again.exit_code == 0, again.output
    assert "ticks up to 2014-04-09 02:00:00 UTC" in again.output


def test_bicep_run_prints_announced_values_as_text_not_rich_markup(tmp_path: Path) -> None:
    """A resource named ``[/x] Milk`` made rich fail with a MarkupError traceback
    (after the ticks were committed); ``[bold red]Eggs`` showed as ``Eggs``."""
    events = tmp_path / "markup.jsonl"
    events.write_text(
        '{"class": "ResourceEmpty", "resource": "[/x] Milk", "occ": "2014-04-07T08:02", '
        '"det": "2014-04-07T08:05"}\n'
        '{"class": "ResourceEmpty", "resource": "[bold red]Eggs", "occ": "2014-04-07T08:03", '
        '"det": "2014-04-07T08:06"}\n'
    )
    result = CliRunner(env={"COLUMNS": "400"}).invoke(
        main,
        [
            "bicep", "run", str(HERE / "program.bicepl"), "--name", "grocery",
            "--events", str(events), "--url", f"sqlite:///{tmp_path / 'r.db'}",
            "--until", "2014-04-07T21:00",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "'[/x] Milk'" in result.output
    assert "'[bold red]Eggs'" in result.output


@pytest.mark.parametrize("command", ["install", "run"])
def test_a_program_that_does_not_compile_creates_nothing(tmp_path: Path, command: str) -> None:
    """The program is compiled before sentinel's tables are created (as
    docs/bicepl.md says): ``install`` and ``run`` of a bad program made the log
    tables all the same."""
    bad = tmp_path / "bad.bicepl"
    bad.write_text("CREATE GARBAGE\n")
    events = tmp_path / "e.jsonl"
    events.write_text("")
    db = tmp_path / "app.db"
    extra = ["--events", str(events)] if command == "run" else []
    result = CliRunner().invoke(
        main, ["bicep", command, str(bad), *extra, "--url", f"sqlite:///{db}"]
    )
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    if db.exists():
        import sqlalchemy as sa

        engine = sa.create_engine(f"sqlite:///{db}")
        assert sa.inspect(engine).get_table_names() == []
        engine.dispose()


@pytest.mark.parametrize("until", ["1396904400", "1396904400.5"])
def test_bicep_run_takes_until_in_seconds_since_the_epoch(tmp_path: Path, until: str) -> None:
    """The message refusing a bad --until lists "seconds since the epoch" as
    a time; such a time was refused all the same."""
    result = CliRunner().invoke(
        main,
        [
            "bicep", "run", str(HERE / "program.bicepl"), "--name", "grocery",
            "--events", str(HERE / "events.jsonl"), "--url", f"sqlite:///{tmp_path / 'r.db'}",
            "--until", until,
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "ticks up to 2014-04-07 21:00:00 UTC" in result.output  # 1396904400
