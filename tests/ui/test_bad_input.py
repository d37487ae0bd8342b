"""What ``sentinel ui`` answers to a request it cannot serve as asked, on every
backend: an error page saying why, never a 500. A number out of the 64-bit
range the database takes, a time whose UTC falls outside the years 1 to 9999,
a NUL in a text filter: 400 (an id no row can have: 404). A log row that does
not hold what the writer writes (changed by hand, a damaged database): 422,
naming the row and what is wrong, as ``sentinel log`` does."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

pytest.importorskip("starlette", reason="sentinel ui needs the ui extra")
from starlette.testclient import TestClient

from sentinel.log.tables import log_tables
from sentinel.ui import create_app
from sentinel.ui.actions import CSRF_COOKIE

from .conftest import build_log, shop_rules

BIG = "99999999999999999999"  # more than 2**64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
TOKEN = "t0ken-for-the-tests-0123456789"
BASE = "http://127.0.0.1:8000"
CSRF = "c" * 32


@pytest.fixture
def view(engine: sa.Engine) -> Iterator[TestClient]:
    """The view (actions allowed) of a log of its own on this test's backend;
    the app's errors come back as responses, a 500 included."""
    build_log(engine)
    app = create_app(engine, detector=shop_rules(), actions_token=TOKEN)
    with TestClient(
        app, base_url=BASE, cookies={CSRF_COOKIE: CSRF}, raise_server_exceptions=False
    ) as c:
        yield c


def error_of(r: Any) -> str:
    found = re.search(r'id="error">(.*?)</p>', r.text, re.S)
    assert found is not None, r.text[:300]
    return html.unescape(found.group(1))


# -- defect: numbers past 64 bits were a 500 (OverflowError, bigint out of range) -------
@pytest.mark.parametrize(
    "path",
    [
        f"/firings?before={BIG}",
        f"/firings?after={BIG}",
        f"/firings?before=-{BIG}",
        f"/firings?status=failed&before={BIG}",
        f"/log?before={BIG}",
        f"/log?before=-{BIG}",
        f"/outbox?retried={BIG}",
        f"/rules?switched={BIG}",
    ],
)
def test_an_id_or_page_key_past_64_bits_is_a_400_naming_the_range(
    view: TestClient, path: str
) -> None:
    r = view.get(path)
    assert r.status_code == 400
    assert f"from {INT64_MIN} to {INT64_MAX}" in error_of(r)


def test_a_timed_log_page_key_with_an_id_past_64_bits_is_a_400(view: TestClient) -> None:
    r = view.get(
        "/log", params={"since": "2026-01-05T09:00", "before": f"2026-01-05T09:10:00+00:00|{BIG}"}
    )
    assert r.status_code == 400 and "its id is not from" in error_of(r)


def test_a_firing_id_past_64_bits_is_not_found(view: TestClient) -> None:
    for fid in (BIG, f"-{BIG}"):
        r = view.get(f"/firings/{fid}")
        assert r.status_code == 404 and error_of(r) == f"no rule firing #{int(fid)}"


def test_retrying_an_outbox_entry_past_64_bits_is_not_found(view: TestClient) -> None:
    r = view.post(
        f"/outbox/{BIG}/retry",
        data={"csrf": CSRF, "token": TOKEN},
        headers={"origin": BASE},
        follow_redirects=False,
    )
    assert r.status_code == 404 and error_of(r) == f"no outbox entry #{BIG}"


@pytest.mark.parametrize(
    "params",
    [
        {"before": str(INT64_MIN)},
        {"before": str(INT64_MIN), "status": "failed"},
        {"after": str(INT64_MAX)},
        {"after": str(INT64_MAX), "status": "failed"},
    ],
)
def test_the_extreme_64_bit_page_keys_are_served(view: TestClient, params: dict[str, str]) -> None:
    """The bounds a page computes from its key (a window of firings below or
    above it, the next page's key) stay within 64 bits."""
    r = view.get("/firings", params=params)
    assert r.status_code == 200
    for key in re.findall(r"(?:before|after)=(-?\d+)", r.text):
        assert INT64_MIN <= int(key) <= INT64_MAX
    assert view.get("/log", params={"before": str(INT64_MIN)}).status_code == 200


# -- defect: a time outside the years 1 to 9999 in UTC was a 500 (OverflowError) --------
@pytest.mark.parametrize("page", ["/firings", "/log"])
@pytest.mark.parametrize(
    ("name", "value"), [("since", "0001-01-01T00:00+01:00"), ("until", "9999-12-31T23:59-01:00")]
)
def test_a_time_outside_years_1_to_9999_in_utc_is_a_400(
    view: TestClient, page: str, name: str, value: str
) -> None:
    r = view.get(page, params={name: value})
    assert r.status_code == 400
    assert error_of(r) == f"{name} {value!r} is outside the years 1 to 9999 once taken to UTC"


def test_a_log_page_key_whose_time_leaves_years_1_to_9999_in_utc_is_a_400(
    view: TestClient,
) -> None:
    r = view.get("/log", params={"since": "2026-01-05T09:00", "before": "0001-01-01T00:00+05:00|5"})
    assert r.status_code == 400 and "its time is outside the years 1 to 9999" in error_of(r)


# -- defect: a NUL in a text filter was a 500 on PostgreSQL -----------------------------
@pytest.mark.parametrize(
    ("page", "name"),
    [
        ("/firings", "rule"),
        ("/firings", "scope"),
        ("/firings", "key"),
        ("/log", "scope"),
        ("/log", "event"),
        ("/rules", "detector"),
    ],
)
def test_a_nul_in_a_text_filter_is_a_400_on_every_backend(
    view: TestClient, page: str, name: str
) -> None:
    r = view.get(page, params={name: "tx-1\x00"})
    assert r.status_code == 400
    assert error_of(r) == f"the {name} filter cannot contain a NUL character (\\x00)"


@pytest.mark.parametrize("field", ["rule", "detector"])
def test_a_nul_in_a_rule_switch_is_a_400_and_writes_nothing(engine: sa.Engine, field: str) -> None:
    build_log(engine)
    app = create_app(engine, actions_token=TOKEN)  # no rule set: any rule name is taken
    form = {"csrf": CSRF, "token": TOKEN, "rule": "paid", "enabled": "0", field: "paid\x00"}
    with TestClient(app, base_url=BASE, cookies={CSRF_COOKIE: CSRF}) as c:
        r = c.post("/rules/switch", data=form, headers={"origin": BASE}, follow_redirects=False)
    assert r.status_code == 400 and "cannot contain a NUL character" in error_of(r)
    with engine.connect() as conn:
        assert (
            conn.execute(
                sa.select(sa.func.count()).select_from(log_tables().rule_switches)
            ).scalar()
            == 0
        )


# -- defect: a damaged log row was a 500 --------------------------------------------------
def damage(engine: sa.Engine, table: str, column: str, row_id: int, value: str) -> None:
    """Write ``value`` (JSON text) into a row by hand, as a person or a damaged
    database might; the JSON column stores it as it is on every backend."""
    t = getattr(log_tables(), table)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(
                sa.text(f"UPDATE {t.name} SET {column} = CAST(:v AS jsonb) WHERE id = :i"),
                {"v": value, "i": row_id},
            )
        else:
            conn.execute(
                sa.text(f"UPDATE {t.name} SET {column} = :v WHERE id = :i"),
                {"v": value, "i": row_id},
            )


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ('[["a"]]', '["a"] is not a [scope, t_occ] pair'),
        ('{"x": 1}', "a JSON dict, not a list"),
        ('[["tx-1", "notint"]]', '["tx-1", "notint"] is not a [scope, t_occ] pair'),
    ],
    ids=["short-pair", "object", "text-t_occ"],
)
def test_a_firing_with_damaged_constituents_is_a_422_naming_the_row(
    view: TestClient, engine: sa.Engine, value: str, why: str
) -> None:
    damage(engine, "firings", "constituents", 3, value)
    r = view.get("/firings/3")
    assert r.status_code == 422
    text = error_of(r)
    assert text.startswith("a damaged log row: row 3 of sentinel_rule_firings: its constituents")
    assert why in text
    assert view.get("/firings").status_code == 200  # the list does not read them


def test_a_transaction_whose_occurrences_are_not_an_array_is_a_422_naming_the_row(
    view: TestClient, engine: sa.Engine
) -> None:
    damage(engine, "batches", "occurrences", 7, '{"x": 1}')  # tx-6's transaction
    expected = (
        "a damaged log row: row 7 of sentinel_event_batches (scope 'tx-6'): its occurrences "
        "are not the JSON array the log writes (TypeError: a JSON dict, not an array)"
    )
    for path in ("/log?before=8", "/log?scope=tx-6", "/firings/7"):  # firing 7: tx-6
        r = view.get(path)
        assert r.status_code == 422, path
        assert error_of(r) == expected
    assert view.get("/log", params={"before": "7"}).status_code == 200  # the rows below


@pytest.mark.parametrize("backend", ["sqlite"])
def test_occurrences_that_are_not_json_are_a_422_naming_the_row(
    view: TestClient, engine: sa.Engine
) -> None:
    """Only SQLite stores a text that is not JSON in a JSON column."""
    damage(engine, "batches", "occurrences", 7, "not json")
    r = view.get("/log?before=8")
    assert r.status_code == 422
    assert error_of(r).startswith(
        "a damaged log row: row 7 of sentinel_event_batches (scope 'tx-6'): its occurrences "
        "are not the JSON array the log writes (JSONDecodeError"
    )


def test_an_occurrence_time_out_of_range_is_a_422_naming_the_row(
    view: TestClient, engine: sa.Engine
) -> None:
    damage(engine, "batches", "occurrences", 7, '[[13, "order", 1e400, null, null, null, {}]]')
    for path in ("/log?before=8", "/firings/7"):
        r = view.get(path)
        assert r.status_code == 422, path
        assert error_of(r).startswith(
            "a damaged log row: row 7 of sentinel_event_batches (scope 'tx-6'): its occurrence"
        )


@pytest.mark.parametrize("backend", ["sqlite"])  # a time column holding a text that is not one
@pytest.mark.parametrize(
    ("table", "column", "row_id", "paths"),
    [
        ("firings", "fired_at", 3, ["/firings?before=5", "/firings?key=2", "/firings/3"]),
        ("batches", "at_max", 10, ["/log?before=12"]),
        ("outbox", "created_at", 1, ["/outbox"]),
    ],
)
def test_a_value_its_column_cannot_read_is_a_422_naming_the_row_and_column(
    view: TestClient, engine: sa.Engine, table: str, column: str, row_id: int, paths: list[str]
) -> None:
    t = getattr(log_tables(), table)
    with engine.begin() as conn:
        conn.execute(sa.update(t).where(t.c.id == row_id).values({column: sa.literal("garbage")}))
    for path in paths:
        r = view.get(path)
        assert r.status_code == 422, path
        assert error_of(r).startswith(
            f"a damaged log row: row {row_id} of {t.name}: its {column} 'garbage' cannot be read"
        )


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])  # MariaDB stores no infinity
def test_a_cursor_whose_log_time_is_no_time_is_a_422_naming_it(
    view: TestClient, engine: sa.Engine
) -> None:
    c = log_tables().global_cursors
    with engine.begin() as conn:
        conn.execute(sa.update(c).where(c.c.name == "main").values(log_time=float("inf")))
    for path in ("/outbox", "/api/live"):
        r = view.get(path)
        assert r.status_code == 422, path
        assert error_of(r).startswith(
            f"a damaged log row: row 'main' of {c.name}: its log_time inf is not a time"
        )
