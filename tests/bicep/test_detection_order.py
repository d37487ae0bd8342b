"""What a stream's end and the order of detection times mean (issue 29, item 5):
``sentinel bicep run`` without ``--until`` acts on everything the stream
announces; an announcement detected before the version of its event already
read is refused, never applied as a change that turns the event back; a
POSTPONE is not FUTURE. On SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sentinel.bicep import Processor
from sentinel.bicep.times import as_datetime
from sentinel.cli import main
from sentinel.errors import BicepAnnouncementError

from .conftest import at

SHOP = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS Delivery (resource VARCHAR(30), amount INTEGER)
  ID (resource) LIFESPAN(14d)
  ON ONTIME DO arrived(new.resource)
  ON CHANGE DO changed(new.resource, new.amount);
CREATE MUTABLE SUBSCRIBED EVENT CLASS Low (resource VARCHAR(30)) ID (resource) LIFESPAN(5d)
  ON ANNOUNCEMENT DO seen(new.resource);
"""


def _write(path: Path, records: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _run(program: Path, events: str, db_url: str, *extra: str) -> Any:
    return CliRunner(env={"COLUMNS": "240"}).invoke(
        main,
        ["bicep", "run", str(program), "--events", events, "--url", db_url, "--name", "shop",
         *extra],
    )  # fmt: skip


def test_run_without_until_reads_and_acts_on_the_streams_last_chronon(
    db_url: str, tmp_path: Path
) -> None:
    # The stream's latest times are 09:04 (a detection) and 09:05 (a delivery's
    # occurrence): both fall in the chronon that the 09:15 tick ends. Stopping at
    # the 09:00 tick would read neither and say nothing of it.
    program = tmp_path / "shop.bicepl"
    program.write_text(SHOP)
    events = _write(
        tmp_path / "events.jsonl",
        [
            {"class": "Delivery", "occ": "2014-04-07T09:05", "det": "2014-04-07T08:00",
             "resource": "Milk", "amount": 2},
            {"class": "Low", "occ": "2014-04-07T09:04", "det": "2014-04-07T09:04",
             "resource": "Jam"},
        ],
    )  # fmt: skip
    result = _run(program, events, db_url)
    assert result.exit_code == 0, result.output
    assert "2 announcement(s), ticks up to 2014-04-07 09:15:00 UTC" in result.output
    assert "2 action(s)" in result.output  # arrived('Milk') and seen('Jam'), at 09:15
    assert "arrived('Milk')" in result.output and "seen('Jam')" in result.output
    assert "not read yet" not in result.output


def test_run_with_until_says_what_it_left_unread(db_url: str, tmp_path: Path) -> None:
    program = tmp_path / "shop.bicepl"
    program.write_text(SHOP)
    events = _write(
        tmp_path / "events.jsonl",
        [{"class": "Low", "occ": "2014-04-07T09:04", "det": "2014-04-07T09:04", "resource": "Jam"}],
    )
    result = _run(program, events, db_url, "--until", "2014-04-07T09:10")
    assert result.exit_code == 0, result.output
    assert (
        "1 announcement(s), ticks up to 2014-04-07 09:00:00 UTC, 0 tick(s) with work, "
        "0 action(s), 1 announcement(s) detected after the last tick not read yet"
    ) in result.output


def test_an_announcement_detected_before_the_version_read_is_rejected_at_the_tick(
    make: Callable[..., Processor],
) -> None:
    proc = make(SHOP, name="shop")
    proc.announce("Delivery", resource="Milk", amount=2, occ=at("8.4.14 09:00"),
                  det=at("7.4.14 09:10"))  # fmt: skip
    assert [r.tick for r in proc.run_until(at("7.4.14 09:15"))] == [as_datetime(at("7.4.14 09:15"))]
    # reaches the database after the 09:15 tick, detected at 09:02: older than
    # the 09:10 version read at 09:15 (announce_many leaves the check to the tick)
    proc.announce_many(
        "Delivery",
        [{"resource": "Milk", "amount": 5, "occ": at("8.4.14 10:00"), "det": at("7.4.14 09:02")}],
    )
    results = proc.run_until(at("7.4.14 09:30"))
    rejected = [x for r in results for x in r.rejected]
    assert [(x.event_class, x.key) for x in rejected] == [("Delivery", {"resource": "Milk"})]
    assert rejected[0].reason == (
        "detected at 2014-04-07 09:02:00 UTC, before the version already read (detected at "
        "2014-04-07 09:10:00 UTC): an older version cannot replace a newer one"
    )
    assert [c for r in results for c in r.actions] == []  # no CHANGE
    (live,) = proc.live("Delivery")  # the event keeps the version read
    assert (live["amount"], live["occTime"], live["detTime"]) == (
        2,
        as_datetime(at("8.4.14 09:00")),
        as_datetime(at("7.4.14 09:10")),
    )
    # a later detection still revises it
    proc.announce_many(
        "Delivery",
        [{"resource": "Milk", "amount": 5, "occ": at("8.4.14 10:00"), "det": at("7.4.14 09:40")}],
    )
    fired = [c for r in proc.run_until(at("7.4.14 09:45")) for c in r.actions]
    assert [(c.action, c.args) for c in fired] == [("changed", ("Milk", 5))]


def test_announce_refuses_a_revision_or_revocation_detected_before_the_version_read(
    make: Callable[..., Processor],
) -> None:
    proc = make(SHOP, name="shop")
    proc.announce("Delivery", resource="Milk", amount=2, occ=at("8.4.14 09:00"),
                  det=at("7.4.14 09:10"))  # fmt: skip
    proc.run_until(at("7.4.14 09:15"))
    with pytest.raises(BicepAnnouncementError) as err:
        proc.announce("Delivery", resource="Milk", amount=5, occ=at("8.4.14 10:00"),
                      det=at("7.4.14 09:02"))  # fmt: skip
    assert str(err.value) == (
        "announcement of Delivery resource='Milk': detected at 2014-04-07 09:02:00 UTC, before "
        "the version already read (detected at 2014-04-07 09:10:00 UTC): an older version "
        "cannot replace a newer one"
    )
    with pytest.raises(BicepAnnouncementError, match=r"^revocation of Delivery resource='Milk': "):
        proc.announce("Delivery", resource="Milk", revoke=True, det=at("7.4.14 09:05"))
    # the same detection time, or a later one, is a revision
    proc.announce("Delivery", resource="Milk", amount=3, occ=at("8.4.14 10:00"),
                  det=at("7.4.14 09:10"))  # fmt: skip
    fired = [c for r in proc.run_until(at("7.4.14 09:30")) for c in r.actions]
    assert [(c.action, c.args) for c in fired] == [("changed", ("Milk", 3))]


def test_run_refuses_a_stream_line_detected_before_the_version_read(
    db_url: str, tmp_path: Path
) -> None:
    program = tmp_path / "shop.bicepl"
    program.write_text(SHOP)
    first = _write(
        tmp_path / "monday.jsonl",
        [{"class": "Delivery", "occ": "2014-04-08T09:00", "det": "2014-04-07T09:10",
          "resource": "Milk", "amount": 2}],
    )  # fmt: skip
    assert _run(program, first, db_url).exit_code == 0
    second = _write(
        tmp_path / "late.jsonl",
        [
            {"class": "Low", "occ": "2014-04-07T10:00", "det": "2014-04-07T10:00",
             "resource": "Jam"},
            {"class": "Delivery", "occ": "2014-04-08T10:00", "det": "2014-04-07T09:02",
             "resource": "Milk", "amount": 5},
        ],
    )  # fmt: skip
    result = _run(program, second, db_url)
    assert result.exit_code == 1, result.output
    assert result.output.startswith(
        f"Error: {second}:2: announcement of Delivery resource='Milk': detected at "
        "2014-04-07 09:02:00 UTC, before the version already read (detected at "
        "2014-04-07 09:10:00 UTC)"
    ), result.output


POSTPONED = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS Delivery (resource VARCHAR(30)) ID (resource) LIFESPAN(14d)
  ON FUTURE DO future(new.resource)
  ON POSTPONE DO postponed(new.resource);
"""


def test_a_postpone_is_not_future_example_2_2(make: Callable[..., Processor]) -> None:
    # Example 2.2: a delivery announced for the future (ANNOUNCEMENT, FUTURE),
    # delayed (CHANGE and FUTURE), then changed once more after it should have
    # occurred (POSTPONE): a change of an event that had occurred, to a time in
    # the future, is POSTPONE and not FUTURE, as a RETROACTIVECHANGE is not LATE.
    proc = make(POSTPONED, name="shop")
    steps = [
        ("3.4.14 17:30", "7.4.14 09:00", [("future", "3.4.14 17:30")]),
        ("4.4.14 10:00", "7.4.14 17:00", [("future", "4.4.14 10:00")]),
        ("7.4.14 18:00", "8.4.14 12:00", [("postponed", "7.4.14 18:00")]),
    ]  # fmt: skip
    for det, occ, expected in steps:
        proc.announce("Delivery", resource="Milk", occ=at(occ), det=at(det))
        fired = [c for r in proc.run_until(at(det)) for c in r.actions]
        assert sorted((c.action, int(c.tick.timestamp())) for c in fired) == sorted(
            (a, at(t)) for a, t in expected
        ), det
