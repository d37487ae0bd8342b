"""The web view's queries on every database the log supports (the per-occurrence
view differs per dialect; JSON comes back as text or decoded)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import sqlalchemy as sa

pytest.importorskip("starlette", reason="sentinel ui needs the ui extra")
from starlette.testclient import TestClient

from sentinel.ui import create_app

from .conftest import HOSTILE, N_FIRINGS, build_log, shop_rules


def test_pages_read_the_log_on_each_backend(engine: sa.Engine) -> None:
    build_log(engine)
    with TestClient(create_app(engine, detector=shop_rules())) as c:
        why = c.get("/firings/11").text
        assert '<span class="event">pay</span> @22' in why
        assert "&#34;amount&#34;:20" in why and "4111" not in why
        hostile = c.get(f"/firings/{N_FIRINGS + 1}").text
        assert HOSTILE not in hostile and "&#34;note&#34;:&#34;&lt;script&gt;" in hostile
        log = c.get("/log", params={"event": "cancel"}).text
        assert "tx-hostile" in log and "row " in log
        timed = c.get("/log", params={"since": "2026-01-05T09:20", "until": "2026-01-05T09:22:30"})
        assert timed.text.count("<h3>row ") == 3
        assert c.get("/outbox").status_code == 200
        assert c.get("/api/live").json()["latest_firing"] == N_FIRINGS + 1


def test_a_failed_entry_is_retried_and_firings_filtered_on_each_backend(
    engine: sa.Engine,
) -> None:
    from sentinel.log.tables import log_tables
    from sentinel.ui.actions import CSRF_COOKIE

    build_log(engine)
    token, csrf, base = "backend-token-0123456789", "c" * 32, "http://127.0.0.1:8000"
    app = create_app(engine, detector=shop_rules(), actions_token=token)
    o = log_tables().outbox
    with engine.connect() as conn:
        oid = conn.execute(sa.select(o.c.id).where(o.c.idempotency_key == "k-failed")).scalar()
    with TestClient(app, base_url=base, cookies={CSRF_COOKIE: csrf}) as c:
        assert "#11<" in c.get("/firings", params={"scope": "tx-10"}).text
        failed = c.get("/firings", params={"scope": "tx-7", "status": "failed"}).text
        assert "#8<" in failed
        keyed = c.get("/firings", params={"key": "3", "rule": "paid", "limit": 200}).text
        assert re.findall(r"#(\d+)</a>", keyed) == [str(i) for i in range(59, 0, -5)]
        assert re.findall(r"#(\d+)</a>", c.get("/firings", params={"key": '"3"'}).text) == [
            "59",
            "54",
        ]
        timed = c.get("/firings", params={"since": "2026-01-05T09:10", "until": "2026-01-05T09:13"})
        assert re.findall(r"#(\d+)</a>", timed.text) == ["13", "12", "11"]
        r = c.post(
            f"/outbox/{oid}/retry",
            data={"csrf": csrf, "token": token},
            headers={"origin": base},
            follow_redirects=False,
        )
        assert r.status_code == 303
    with engine.connect() as conn:
        row = conn.execute(sa.select(o.c.status, o.c.attempts).where(o.c.id == oid)).one()
    assert tuple(row) == ("pending", 0)


def _savepoint_log(engine: sa.Engine, rolled_back: int) -> None:
    """Transaction tx-1: its committed row holds t 1 and 20, and
    ``rolled_back`` savepoints rolled back in between each left a row of one
    occurrence (t 2, 3, ...); a firing's constituent is t 20."""
    from datetime import UTC, datetime

    from sentinel.log import Firing, LogWriter, migrate

    from .conftest import occ

    migrate.upgrade(engine)
    groups: list[Any] = [([occ("order", 1, "tx-1"), occ("pay", 20, "tx-1")], "committed")]
    groups += [([occ("order", 2 + k, "tx-1")], "aborted", f"sp{k + 1}") for k in range(rolled_back)]
    placed = Firing(
        rule="paid",
        scope="tx-1",
        t_occ=20,
        constituents=(("tx-1", 20),),
        coupling="immediate",
        status="fired",
        fired_at=datetime.now(UTC),
    )
    with engine.begin() as conn:
        LogWriter().write_groups(conn, groups, firings=[placed])


def test_a_constituent_behind_many_rolled_back_savepoints_is_found(engine: sa.Engine) -> None:
    """A constituent was looked for among the 8 rows of its scope starting
    nearest before it: behind 9 rolled-back savepoints its committed row was
    cut off and the page said "not in the event log"."""
    _savepoint_log(engine, rolled_back=9)
    with TestClient(create_app(engine)) as c:
        html = c.get("/firings/1").text
    assert "not in the event log" not in html
    assert '<span class="event">pay</span> @20' in html


def test_a_firing_page_reads_each_scope_of_its_constituents_once(engine: sa.Engine) -> None:
    """One query per constituent (a firing of 300 made 202 queries): now one
    per scope, through the (scope, t_first) index, and one of the view."""
    from datetime import UTC, datetime

    from sentinel.log import Firing, LogWriter, migrate

    from .conftest import occ

    migrate.upgrade(engine)
    ticks = [occ("order", t, "tx-1") for t in range(1, 301)]
    many = Firing(
        rule="paid",
        scope="tx-1",
        t_occ=300,
        constituents=tuple(("tx-1", t) for t in range(1, 301)),
        coupling="immediate",
        status="fired",
        fired_at=datetime.now(UTC),
    )
    with engine.begin() as conn:
        LogWriter().write(conn, ticks, firings=[many])
    seen: list[str] = []

    def record(conn, cursor, statement, params, context, many):  # type: ignore[no-untyped-def]
        seen.append(statement)

    with TestClient(create_app(engine)) as c:
        sa.event.listen(engine, "before_cursor_execute", record)
        try:
            html = c.get("/firings/1").text
        finally:
            sa.event.remove(engine, "before_cursor_execute", record)
    assert html.count('class="occurrence"') == 200  # MAX_CONSTITUENTS shown
    batches = [s for s in seen if "event_batches" in s and "t_first" in s]
    assert len(batches) == 1 and len(seen) <= 4


def _commit_numbers(engine: sa.Engine, numbers: list[int], position: int) -> None:
    """Rows holding commit numbers ``numbers`` (holes between them), and the
    cursor ``main`` at ``position``."""
    from datetime import UTC, datetime

    from sentinel.log import migrate
    from sentinel.log.tables import log_tables

    migrate.upgrade(engine)
    t = log_tables()
    at = datetime.now(UTC)
    rows = [
        dict(
            scope=f"tx-{n}",
            t_first=1,
            t_last=1,
            n=1,
            at_min=at,
            at_max=at,
            outcome="committed",
            savepoint=None,
            commit_seq=n,
            written_at=at,
            process="h:1",
            occurrences=[[1, "order", at.timestamp(), None, None, None, {}]],
        )
        for n in numbers
    ]
    with engine.begin() as conn:
        conn.execute(sa.insert(t.batches), rows)
        conn.execute(
            sa.insert(t.global_cursors).values(name="main", position=position, updated_at=at)
        )


def test_a_cursors_lag_counts_commits_not_holes_in_their_numbers(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lag was the last commit number less the position: numbers taken by
    transactions that rolled back (holes, on PostgreSQL and MariaDB) counted
    as commits. It counts the numbers the log holds above the position, up
    to LAG_COUNT ("N+" beyond)."""
    _commit_numbers(engine, [1, 2, 8, 9, 15], position=2)
    with TestClient(create_app(engine)) as c:
        (cursor,) = c.get("/api/live").json()["cursors"]
        assert (cursor["head"], cursor["lag"], cursor["lag_more"]) == (15, 3, False)
        monkeypatch.setattr("sentinel.ui.operations.LAG_COUNT", 2)
        c.app.state.live._at = None  # type: ignore[attr-defined]
        html = c.get("/outbox").text
    row = re.search(r'<td class="name">main</td>(.*?)</tr>', html, re.S)
    assert row is not None
    assert re.findall(r"<td>([^<]*)</td>", row.group(1))[:3] == ["2", "15", "2+"]


def test_a_lease_is_judged_by_the_database_servers_clock(
    engine: sa.Engine, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leases are written by the database server's clock; the view judged
    them by its own: with the view's host an hour ahead, a held lease read as
    expired (and behind, an expired one as held)."""
    from datetime import UTC, datetime, timedelta

    from sentinel.log import migrate
    from sentinel.log.outbox import server_later
    from sentinel.log.tables import log_tables

    if backend == "sqlite":
        pytest.skip("SQLite has no server: the leases are timed by this machine's clock")
    migrate.upgrade(engine)
    t = log_tables()
    with engine.begin() as conn:
        conn.execute(
            sa.insert(t.global_cursors).values(
                name="main",
                position=0,
                holder="host:1",
                lease_until=server_later(engine.dialect.name, 600),
                updated_at=datetime.now(UTC),
            )
        )

    class Ahead(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + timedelta(hours=1)

    monkeypatch.setattr("sentinel.ui.queries.datetime", Ahead)
    with TestClient(create_app(engine)) as c:
        (cursor,) = c.get("/api/live").json()["cursors"]
    assert cursor["lease"] == "held"
