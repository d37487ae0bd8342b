"""A rule firing's partition key in the log (issue 34): the writer stores the
canonical text of a partitioned rule's key (one part, several, an object
reference; the policy applied), NULL for other rules; the reader gives it
back and filters by it as a person types it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.log import Firing, LogPolicy, LogReader, LogWriter
from sentinel.log.partition import key_candidates, partition_key_text
from sentinel.log.tables import KEY_LENGTH, log_tables
from sentinel.occurrence import ObjectRef

AT = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def firing(rule: str, t: int, *parts: tuple[str, str | None, Any]) -> Firing:
    return Firing(
        rule=rule,
        scope=f"tx-{t}",
        t_occ=t,
        constituents=((f"tx-{t}", t),),
        coupling="immediate",
        status="fired",
        fired_at=AT,
        partition=tuple(parts),
    )


def stored(engine: sa.Engine) -> list[tuple[str, str | None]]:
    f = log_tables().firings
    with engine.connect() as conn:
        q = sa.select(f.c.rule, f.c.partition_key).order_by(f.c.id)
        return [(r.rule, r.partition_key) for r in conn.execute(q)]


def test_the_writer_stores_each_kind_of_key(migrated: sa.Engine) -> None:
    order = ObjectRef("Order", (7, "2026-01"))
    with migrated.begin() as conn:
        LogWriter().write_firings(
            conn,
            [
                firing("plain", 1),
                firing("one", 2, ("Paid", "order_id", 7)),
                firing("text", 3, ("Paid", "order_id", "7")),
                firing("two", 4, ("Paid", "region", "EU"), ("Paid", "order_id", 7)),
                firing("object", 5, ("Paid", None, order)),
                firing("unicode", 6, ("Paid", "who", "Zoë 🙂")),
                firing("tuple", 7, ("Paid", "pair", (1, 2))),
            ],
        )
    assert stored(migrated) == [
        ("plain", None),
        ("one", "[7]"),
        ("text", '["7"]'),
        ("two", '["EU",7]'),
        ("object", '[{"$ref":["Order",[7,"2026-01"]]}]'),
        ("unicode", '["Zoë 🙂"]'),
        ("tuple", "[[1,2]]"),
    ]


def test_the_policy_applies_to_the_key(migrated: sa.Engine) -> None:
    policy = LogPolicy().redact("Paid", "card").exclude("Refund", "order_id")
    with migrated.begin() as conn:
        LogWriter(policy=policy).write_firings(
            conn,
            [
                firing("redacted", 1, ("Paid", "card", "4111")),
                firing("excluded", 2, ("Refund", "region", "EU"), ("Refund", "order_id", 7)),
                firing("kept", 3, ("Paid", "order_id", 7)),
                firing("source", 4, ("Refund", None, ObjectRef("Order", (7,)))),
            ],
        )
    assert stored(migrated) == [
        ("redacted", '["<redacted>"]'),
        ("excluded", None),
        ("kept", "[7]"),
        ("source", '[{"$ref":["Order",[7]]}]'),
    ]


def test_a_long_key_is_stored_short_and_still_found(migrated: sa.Engine) -> None:
    long = "x" * 500
    with migrated.begin() as conn:
        LogWriter().write_firings(
            conn, [firing("long", 1, ("E", "k", long)), firing("other", 2, ("E", "k", long + "y"))]
        )
    (_, first), (_, second) = stored(migrated)
    assert first is not None and second is not None
    assert len(first) == len(second) == KEY_LENGTH and first != second
    assert first.startswith('["xxx') and first[KEY_LENGTH - 65] == "~"
    with LogReader(migrated) as reader:
        assert [f.rule for f in reader.firings(keys=[long])] == ["long"]
        assert [f.rule for f in reader.firings(keys=[first])] == ["long"]  # as shown


def test_the_reader_gives_the_key_back_and_filters_by_it(migrated: sa.Engine) -> None:
    with migrated.begin() as conn:
        LogWriter().write_firings(
            conn,
            [
                firing("a", 1, ("E", "order_id", 7)),
                firing("a", 2, ("E", "order_id", 8)),
                firing("b", 3, ("E", "order_id", "7")),
                firing("c", 4, ("E", "region", "EU"), ("E", "order_id", 7)),
                firing("d", 5, ("E", None, ObjectRef("Order", (7,)))),
                firing("e", 6),
            ],
        )
    with LogReader(migrated) as reader:
        assert [f.key for f in reader.firings()] == [
            "[7]",
            "[8]",
            '["7"]',
            '["EU",7]',
            '[{"$ref":["Order",[7]]}]',
            None,
        ]

        def found(*keys: str, **kw: Any) -> list[int]:
            return [f.t_occ for f in reader.firings(keys=list(keys), **kw)]

        assert found("7") == [1, 3]  # the integer and the string
        assert found('"7"') == [3]  # only the string
        assert found("7", rules=["a"]) == [1]
        assert found("[7]") == [1]
        assert found('["EU",7]') == [4]  # two parts, outermost first
        assert found("<Order 7>") == [5] and found("Order:7") == [5]
        assert found('[{"$ref":["Order",[7]]}]') == [5]  # as stored
        assert found("8", "EU") == [2]
        assert found("nothing") == []


@pytest.mark.parametrize(
    ("typed", "means"),
    [
        ("7", [7, "7"]),
        ("EU", ["EU"]),
        ("true", [True, "true"]),
        ("<Order 7,x>", [ObjectRef("Order", (7, "x")), ObjectRef("Order", ("7", "x"))]),
    ],
)
def test_key_candidates(typed: str, means: list[Any]) -> None:
    got = key_candidates(typed)
    for value in means:
        assert partition_key_text([("E", "k", value)]) in got


def test_the_cli_filters_by_key_and_prints_it(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from sentinel.cli import main
    from sentinel.log import migrate

    url = f"sqlite:///{tmp_path}/log.db"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as conn:
        LogWriter().write_firings(
            conn,
            [
                firing("a", 1, ("E", "order_id", 7)),
                firing("a", 2, ("E", "order_id", 8)),
                firing("b", 3, ("E", "order_id", "7")),
                firing("c", 4),
            ],
        )
    engine.dispose()

    def run(*args: str) -> str:
        result = CliRunner().invoke(main, ["log", "firings", "--url", url, *args])
        assert result.exit_code == 0, result.output
        return result.output

    shown = run("--key", "7")
    assert [line.split()[:2] for line in shown.splitlines() if line.startswith("#")] == [
        ["#1", "a"],
        ["#3", "b"],
    ]
    assert "detection: scope tx-1, t_occ 1, key [7]" in shown
    assert 'key ["7"]' in shown
    assert "#2 " not in run("--key", "7", "--key", '"7"')
    assert [
        line.split()[0]
        for line in run("--key", "8", "--key", "7", "--rule", "a").splitlines()
        if line.startswith("#")
    ] == ["#1", "#2"]
    assert run("--key", "9").strip() == "no rule firings match"
    assert "key" not in run("--rule", "c").split("detection:")[1].split("\n")[0]
