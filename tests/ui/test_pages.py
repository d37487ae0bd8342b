"""Every page and endpoint of ``sentinel ui`` on a real log: what each shows,
its filters, its pages (keyset, bounded), and the JSON the pages poll."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

pytest.importorskip("starlette", reason="sentinel ui needs the ui extra")
from starlette.testclient import TestClient

from .conftest import N_FIRINGS

ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def ids(html: str, pattern: str = r'class="firing-link" href="/firings/(\d+)"') -> list[int]:
    return [int(i) for i in re.findall(pattern, html)]


def link(html: str, name: str) -> str | None:
    found = re.search(rf'id="{name}" href="([^"]+)"', html)
    return None if found is None else found.group(1).replace("&amp;", "&")


@contextmanager
def statements(client: TestClient) -> Iterator[list[str]]:
    """The SQL the view runs meanwhile; an ``OFFSET`` SQLite's compiler always
    writes (``LIMIT ? OFFSET ?``) is dropped when it is 0, and kept otherwise."""
    engine = client.app.state.view.engine  # type: ignore[attr-defined]
    seen: list[str] = []

    def record(conn, cursor, statement, params, context, many):  # type: ignore[no-untyped-def]
        if statement.endswith("OFFSET ?") and params[-1] == 0:
            statement = statement.removesuffix(" OFFSET ?")
        seen.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


# -- rules ---------------------------------------------------------------------------
def test_rules_page_lists_each_rule_and_draws_the_graph(client: TestClient) -> None:
    r = client.get("/rules")
    assert r.status_code == 200
    html = r.text
    for name in ("paid", "shipped", "idle"):
        assert f">{name}</a>" in html
    assert "<code>order ; pay ; ship</code>" in html
    row = re.search(r"shipped</a></td>(.*?)</tr>", html, re.S)
    assert row is not None
    assert [c.strip() for c in re.findall(r"<td>([^<]*)</td>", row.group(1))] == [
        "chronicle",
        "immediate",
        "2",
        "yes",
    ]
    assert '<tr class="disabled">' in html  # idle
    # the graph: an SVG with the events, the shared SEQ node, the rules
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert svg.count('class="node event"') == 4
    assert svg.count('class="node rule"') + svg.count('class="node rule disabled"') == 4
    assert 'data-text="order ; pay"' in svg and "SEQ (chronicle)" in svg
    assert client.get("/").text == html


def test_a_graph_node_names_the_language_of_its_text() -> None:
    """An Ode event's node holds its Ode text; the nodes using it, Snoop text
    with the Ode event as its ``ode{...}`` block."""
    from sentinel import LocalEventDetector
    from sentinel.ui.graph import graph_of, svg

    det = LocalEventDetector()
    for name in ("deposit", "withdraw", "interest"):
        det.explicit(name)
    det.rule("r", "ode{relative(deposit, !before(interest)) ^ withdraw} ; interest", action=print)
    picture = str(svg(graph_of(det)))
    assert 'data-text="relative(deposit, !before(interest)) ^ withdraw" data-lang="Ode"' in picture
    assert (
        'data-text="ode{relative(deposit, !before(interest)) ^ withdraw} ; interest" '
        'data-lang="Snoop"'
    ) in picture


def deep_rules() -> Any:
    """A rule whose expression uses a sub-expression twice at each of 18 levels
    (its text names 2**19 events), and the same, disabled."""
    from sentinel import LocalEventDetector

    det = LocalEventDetector()
    e = det.explicit("a") >> det.explicit("b")
    for _ in range(18):
        e = e >> e
    det.rule("deep", e, action=print)
    det.rule("off", e | det.event("a"), action=print, enabled=False)
    return det


def test_rules_page_abridges_expressions_and_names_partitions(log_url: str) -> None:
    """The rules page printed each rule's expression whole (15 MB for these
    rules, doubling with each level); ``sentinel graph`` abridges. A node
    inside a partition says which."""
    from sentinel import LocalEventDetector
    from sentinel.ui import create_app
    from sentinel.ui.graph import graph_of, svg

    with TestClient(create_app(log_url, detector=deep_rules())) as c:
        page = c.get("/rules")
    assert page.status_code == 200
    assert len(page.content) < 200_000
    assert "abridged: 524,289 events in all" in page.text
    det = LocalEventDetector()
    det.explicit("order")
    det.explicit("payment")
    det.rule("per_order", "(order ; payment) by order_id", action=print)
    assert 'data-text="order ; payment in (order ; payment) by order_id"' in str(svg(graph_of(det)))


def test_rules_page_without_rules_says_how_to_load_them(log_url: str) -> None:
    from sentinel.ui import create_app

    with TestClient(create_app(log_url)) as plain:
        html = plain.get("/rules").text
    assert "No rules loaded" in html and "<svg" not in html


# -- firings -------------------------------------------------------------------------
def test_firings_newest_first_and_filtered(client: TestClient) -> None:
    html = client.get("/firings").text
    shown = ids(html)
    assert shown == list(range(N_FIRINGS + 1, N_FIRINGS + 1 - 50, -1))  # 50 a page
    assert ids(client.get("/firings", params={"rule": "paid", "limit": 200}).text) == list(
        range(N_FIRINGS, 0, -1)
    )
    failed = ids(client.get("/firings", params={"status": "failed"}).text)
    # the hostile firing, and firing i + 1 of transaction i for i % 7 == 0
    assert failed == [N_FIRINGS + 1, *range(57, 0, -7)]
    timed = client.get(
        "/firings", params={"since": "2026-01-05T09:10", "until": "2026-01-05T09:13"}
    ).text
    assert ids(timed) == [13, 12, 11]  # firing i+1 at 09:00 + i minutes (+1 s)


def test_firing_pages_walk_the_whole_log_once_by_keyset(client: TestClient) -> None:
    seen: list[int] = []
    url: str | None = "/firings?limit=25"
    pages = 0
    with statements(client) as sql:
        while url is not None:
            html = client.get(url).text
            seen += ids(html)
            url = link(html, "older")
            pages += 1
    assert seen == list(range(N_FIRINGS + 1, 0, -1)) and pages == 3
    listing = [s for s in sql if "rule_firings" in s and "max(" not in s and "count(" not in s]
    assert listing and all("LIMIT" in s and "OFFSET" not in s for s in listing)
    # and back towards the newest
    html = client.get("/firings", params={"limit": 25, "before": 20}).text
    assert ids(html) == list(range(19, 0, -1))
    newer = link(html, "newer")
    assert newer is not None and "after=19" in newer
    assert ids(client.get(newer).text) == list(range(44, 19, -1))


def test_firings_filtered_by_scope_and_outcome(client: TestClient) -> None:
    """The scope is the detection's (the firings' ``(scope, t_occ)`` index);
    the outcome is the firing's status."""
    assert ids(client.get("/firings", params={"scope": "tx-10"}).text) == [11]
    failed = {"scope": "tx-7", "status": "failed"}
    assert ids(client.get("/firings", params=failed).text) == [8]  # i % 7 == 0 failed
    assert ids(client.get("/firings", params={"scope": "tx-8", "status": "failed"}).text) == []
    with statements(client) as sql:
        client.get("/firings", params={"scope": "tx-10"})
    listing = [s for s in sql if "rule_firings" in s and "max(" not in s and "count(" not in s]
    assert listing and all("scope = ?" in s for s in listing)
    html = client.get("/firings", params={"scope": "tx-10"}).text
    assert 'name="scope" value="tx-10"' in html and ">outcome <select" in html


def test_firings_filtered_by_partition_key(client: TestClient) -> None:
    """The key is a partitioned rule's key value, as a person types it: ``3``
    finds the integer and the string (two index ranges, merged by id), ``"3"``
    the string only; with a rule, the ``(rule, partition_key, id)`` index."""
    threes = list(range(59, 0, -5))  # firing i + 1 for i % 5 == 3
    assert ids(client.get("/firings", params={"key": "3", "limit": 200}).text) == threes
    assert ids(client.get("/firings", params={"key": '"3"'}).text) == [59, 54]  # i >= 50
    assert ids(client.get("/firings", params={"key": "[3]", "limit": 200}).text) == threes[2:]
    assert ids(client.get("/firings", params={"key": "3", "rule": "paid"}).text)[:3] == [59, 54, 49]
    assert ids(client.get("/firings", params={"key": "3", "rule": "shipped"}).text) == []
    assert ids(client.get("/firings", params={"key": "3", "status": "failed"}).text) == [29]
    assert ids(client.get("/firings", params={"key": "tx-10"}).text) == []  # not the scope
    with statements(client) as sql:
        html = client.get("/firings", params={"key": "3", "limit": 5}).text
    assert ids(html) == threes[:5]
    listing = [s for s in sql if "rule_firings" in s and "max(" not in s and "count(" not in s]
    assert len(listing) == 2 and all("partition_key = ?" in s and "LIMIT" in s for s in listing)
    assert 'name="key" value="3"' in html and '<td class="key">' in html
    # the pages go on by id, both ways, through the merged ranges
    older = link(html, "older")
    assert older is not None and "before=39" in older
    html = client.get(older).text
    assert ids(html) == threes[5:10]
    newer = link(html, "newer")
    assert newer is not None
    assert ids(client.get(newer).text) == threes[:5]


def test_a_firing_shows_its_key(client: TestClient) -> None:
    html = client.get("/firings/4").text  # tx-3: shop 3
    assert '<dd id="partition-key"><code>[3]</code>' in html
    assert "/firings?rule=paid&amp;key=%5B3%5D" in html
    hostile = client.get(f"/firings/{N_FIRINGS + 1}").text
    assert "none: the rule is not partitioned" in hostile


@pytest.mark.parametrize("scan", [20_000, 2])
def test_a_time_range_reads_its_index_or_walks_a_bounded_window(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, scan: int
) -> None:
    """A time range holding at most FIRING_SCAN firings (counted through the
    ``fired_at`` index, reading at most FIRING_SCAN + 1 entries) is read
    through that index: one page, whatever its age. A wider one is checked on
    a walk by id, FIRING_SCAN ids a page, in a form that keeps the planner off
    the index (which would sort the whole range)."""
    monkeypatch.setattr("sentinel.ui.queries.FIRING_SCAN", scan)
    url: str | None = "/firings?since=2026-01-05T09:10&until=2026-01-05T09:13"
    seen: list[int] = []
    pages = 0
    with statements(client) as sql:
        while url is not None:
            html = client.get(url).text
            seen += ids(html)
            url = link(html, "older")
            pages += 1
    assert seen == [13, 12, 11]  # firing i+1 at 09:00 + i minutes (+1 s)
    timed = [s for s in sql if "rule_firings" in s and "fired_at" in s]
    if scan == 2:  # 3 firings in the range: a walk of 2 ids a page, 31 pages
        assert pages == 31
        assert any("coalesce(" in s and "id >= ?" in s for s in timed)
    else:
        assert pages == 1
        assert all("coalesce(" not in s and "id >= ?" not in s for s in timed)


@pytest.mark.parametrize("direction", ["older", "newer"])
def test_a_status_filter_walks_a_bounded_window_per_page(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, direction: str
) -> None:
    """No index serves a status: a page walks at most FIRING_SCAN ids, says
    so, and the next page goes on from there; walking every page finds each
    failed firing once, both ways."""
    monkeypatch.setattr("sentinel.ui.queries.FIRING_SCAN", 10)
    failed = [N_FIRINGS + 1, *range(57, 0, -7)]
    seen: list[int] = []
    url: str | None = "/firings?status=failed" + ("&after=0" if direction == "newer" else "")
    pages = 0
    with statements(client) as sql:
        while url is not None:
            html = client.get(url).text
            seen += ids(html)
            url = link(html, direction)
            pages += 1
    assert sorted(seen, reverse=True) == failed and len(seen) == len(failed)
    assert pages == 7  # 61 firings, 10 ids a page
    walks = [s for s in sql if "rule_firings" in s and "status IN" in s]
    assert walks and all("id >= ?" in s or "id <= ?" in s for s in walks)
    first = client.get("/firings", params={"status": "failed"}).text
    assert 'id="scan-note"' in first and "looked at firings #52 to #61" in first


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"limit": "0"}, 200),
        ({"limit": "100000"}, 200),
        ({"limit": "many"}, 400),
        ({"before": "x"}, 400),
        ({"since": "yesterday"}, 400),
        ({"status": "exploded"}, 400),
    ],
)
def test_firing_page_bounds(client: TestClient, params: dict[str, str], status: int) -> None:
    r = client.get("/firings", params=params)
    assert r.status_code == status
    if params.get("limit") == "0":
        assert len(ids(r.text)) == 1
    if params.get("limit") == "100000":
        assert len(ids(r.text)) == N_FIRINGS + 1  # capped at 200: all 61
    if status == 400:
        assert 'id="error"' in r.text


def test_a_firing_shows_why_it_fired(client: TestClient) -> None:
    html = client.get("/firings/11").text  # rule paid, tx-10
    why = html[html.index('id="why"') :]
    assert why.count('class="occurrence"') == 2
    assert '<span class="event">order</span> @21' in why
    assert '<span class="event">pay</span> @22' in why
    assert "at 2026-01-05 09:10:01.000" in why
    assert 'href="/log?scope=tx-10">tx-10</a>, committed' in why
    assert "&#34;amount&#34;:20" in why and "book 10" in why
    # the log's redaction marker, as stored: never the value
    assert "4111" not in html and "&#34;card&#34;:" in why
    assert "on <code>order ; pay</code>, chronicle context" in html


def test_a_constituent_missing_from_the_log_is_named(client: TestClient) -> None:
    html = client.get(f"/firings/{N_FIRINGS + 1}").text
    assert "tx-gone@5 (not in the event log)" in html
    assert client.get("/firings/999").status_code == 404
    assert client.get("/firings/abc").status_code == 400


# -- outbox and cursors ----------------------------------------------------------------
def test_outbox_lists_entries_by_status_with_attempts_and_errors(client: TestClient) -> None:
    html = client.get("/outbox").text
    for status, rule in (("pending", "paid"), ("running", "shipped"), ("failed", ESCAPED)):
        table = re.search(rf'id="outbox-{status}">(.*?)</table>', html, re.S)
        assert table is not None and f'class="name">{rule}<' in table.group(1)
    failed = re.search(r'id="outbox-failed">(.*?)</table>', html, re.S)
    assert failed is not None
    assert "<td>5</td>" in failed.group(1) and f"KeyError: {ESCAPED}" in failed.group(1)
    assert "worker-7" in html
    counts = re.findall(r'data-live="outbox\.(\w+)">(\d+)<', html)
    assert counts == [("pending", "1"), ("running", "1"), ("failed", "1")]


def test_cursors_show_position_lease_and_lag(client: TestClient) -> None:
    html = client.get("/outbox").text
    row = re.search(r'<td class="name">main</td>(.*?)</tr>', html, re.S)
    assert row is not None
    cells = [c.strip() for c in re.findall(r"<td>([^<]*)</td>", row.group(1))]
    position, head, lag, lease, holder = cells[:5]
    assert (position, lease, holder) == ("0", "held", "host:1")
    assert head == "" and lag == "0"  # the log was written without commit numbers


# -- the log -------------------------------------------------------------------------
def rows_of(html: str) -> list[int]:
    return [int(i) for i in re.findall(r"<h3>row (\d+) ", html)]


def test_log_lists_transactions_newest_first_with_their_occurrences(client: TestClient) -> None:
    html = client.get("/log").text
    assert rows_of(html) == list(range(N_FIRINGS + 1, N_FIRINGS + 1 - 20, -1))
    assert "tx-hostile" in html and '<td class="event">cancel</td>' in html
    scoped = client.get("/log", params={"scope": "tx-3"}).text
    assert rows_of(scoped) == [4]
    assert "book 3" in scoped and "2026-01-05 09:03:01.000" in scoped


def test_log_filters_by_event_and_time(client: TestClient) -> None:
    cancels = client.get("/log", params={"event": "cancel"}).text
    assert rows_of(cancels) == [N_FIRINGS + 1] and '<td class="event">order</td>' not in cancels
    timed = client.get(
        "/log", params={"since": "2026-01-05T09:20:00", "until": "2026-01-05T09:22:30"}
    ).text
    assert rows_of(timed) == [23, 22, 21]
    # an occurrence outside the range is left out of its transaction
    edge = client.get(
        "/log", params={"since": "2026-01-05T09:20:00.500", "until": "2026-01-05T09:20:02"}
    ).text
    assert rows_of(edge) == [21] and "book 20" not in edge and "&#34;amount&#34;:30" in edge


@pytest.mark.parametrize(
    "params",
    [{}, {"event": "pay"}, {"since": "2026-01-05T09:00", "until": "2026-01-06T00:00"}],
    ids=["by-id", "by-event", "by-time"],
)
def test_log_pages_walk_every_transaction_once(client: TestClient, params: dict[str, str]) -> None:
    seen: list[int] = []
    url: str | None = "/log?" + "&".join(f"{k}={v}" for k, v in {**params, "limit": 7}.items())
    with statements(client) as sql:
        while url is not None:
            html = client.get(url).text
            seen += rows_of(html)
            url = link(html, "older")
    expected = list(range(N_FIRINGS, 0, -1)) if params.get("event") else None
    assert seen == (expected or list(range(N_FIRINGS + 1, 0, -1)))
    assert all("OFFSET" not in s for s in sql)
    assert all("LIMIT" in s for s in sql if "FROM sentinel_event_batches" in s)


def test_log_page_keys_are_checked(client: TestClient) -> None:
    assert client.get("/log", params={"before": "x"}).status_code == 400
    timed = {"since": "2026-01-05T09:00", "before": "nope"}
    assert client.get("/log", params=timed).status_code == 400


# -- live updates --------------------------------------------------------------------
def test_live_endpoint_reports_what_the_pages_poll(client: TestClient) -> None:
    r = client.get("/api/live")
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    live = r.json()
    assert live["latest_firing"] == N_FIRINGS + 1
    assert live["outbox"] == {"pending": 1, "running": 1, "failed": 1}
    assert [c["name"] for c in live["cursors"]] == ["main"]
    firings = client.get("/firings").text
    assert f'data-latest="{N_FIRINGS + 1}"' in firings and 'id="new-firings" hidden' in firings
    assert f'data-count="{N_FIRINGS + 1}"' in firings and live["firings"]["count"] == N_FIRINGS + 1


def test_live_figures_are_read_once_for_every_poller(client: TestClient) -> None:
    """However many pages poll, the log is read at most once per
    :data:`~sentinel.ui.live.FRESH_S` seconds."""
    from sentinel.ui.live import FRESH_S

    live = client.app.state.live  # type: ignore[attr-defined]
    now = [1000.0]
    old_clock, live.clock, live._at = live.clock, (lambda: now[0]), None
    try:
        with statements(client) as sql:
            answers = [client.get("/api/live").json() for _ in range(5)]
        assert len({str(a) for a in answers}) == 1
        reads = len(sql)
        # one reading: the newest firing and the count of the newest, the
        # outbox's counts, the last commit number and the cursors (and, per
        # cursor behind it, its lag)
        assert 1 <= reads <= 6
        now[0] += FRESH_S
        with statements(client) as again:
            client.get("/api/live")
        assert len(again) == reads
    finally:
        live.clock = old_clock


def test_static_files_are_served(client: TestClient) -> None:
    js = client.get("/static/ui.js").text
    assert 'fetch("/api/live"' in js and "document.hidden" in js
    assert client.get("/static/ui.css").status_code == 200


# -- one scope's pages ---------------------------------------------------------------
def _one_scope_log(url: str) -> None:
    """Scope process:p: 30 rows (t 10, 20, ...) and, for each, two firings on
    it (t_occ 10, 20, ... of rules a and b); tx-other between them."""
    from datetime import UTC, datetime

    from sentinel.log import Firing, LogWriter, migrate

    from .conftest import occ

    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    writer = LogWriter()
    with engine.begin() as conn:
        for i in range(1, 31):
            o = occ("order", 10 * i, "process:p")
            fired = [
                Firing(
                    rule=rule,
                    scope="process:p",
                    t_occ=10 * i,
                    constituents=(("process:p", 10 * i),),
                    coupling="immediate",
                    status="fired" if i % 3 else "failed",
                    fired_at=datetime.now(UTC),
                )
                for rule in ("a", "b")
            ]
            writer.write(conn, [o], outcome=None, firings=fired)
            writer.write(conn, [occ("order", 1, f"tx-other-{i}")])
    engine.dispose()


def _walk(c: TestClient, url: str, pattern: str) -> tuple[list[int], list[int]]:
    """The ids the ``older`` links walk through from ``url``, then those the
    ``newer`` links walk back (the last page's own not counted twice)."""
    html = c.get(url).text
    down = ids(html, pattern)
    while (nxt := link(html, "older")) is not None:
        html = c.get(nxt).text
        down += ids(html, pattern)
    up: list[int] = []
    while (nxt := link(html, "newer")) is not None:
        html = c.get(nxt).text
        up = ids(html, pattern) + up
    return down, up


@contextmanager
def plans(client: TestClient) -> Iterator[list[tuple[str, str]]]:
    """SQLite's plan of each query the view runs meanwhile: ``(SQL, plan)``."""
    engine = client.app.state.view.engine  # type: ignore[attr-defined]
    seen: list[tuple[str, str]] = []

    def record(conn, cursor, statement, params, context, many):  # type: ignore[no-untyped-def]
        if statement.lstrip().startswith("SELECT"):
            rows = cursor.connection.execute("EXPLAIN QUERY PLAN " + statement, params)
            seen.append((statement, " / ".join(str(r[-1]) for r in rows)))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


FIRING_IDS = r'class="firing-link" href="/firings/(\d+)"'


@pytest.mark.parametrize(
    "params", [{}, {"status": "failed"}, {"rule": "a"}], ids=["all", "failed", "rule"]
)
def test_a_scopes_firings_are_paged_by_its_index(tmp_path: Any, params: dict[str, str]) -> None:
    """A scope's firings were ordered by id: SQLite sorted all of the scope's
    (a process scope's grow without end). They go by the (scope, t_occ)
    index, newest first; the pages walk each once, both ways."""
    from urllib.parse import urlencode

    from sentinel.ui import create_app

    url = f"sqlite:///{tmp_path / 'scope.db'}"
    _one_scope_log(url)
    start = "/firings?" + urlencode({"scope": "process:p", "limit": 7, **params})
    with TestClient(create_app(url)) as c, plans(c) as seen:
        down, up = _walk(c, start, FIRING_IDS)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        f = c.app.state.view.tables.firings  # type: ignore[attr-defined]
        q = sa.select(f.c.id).where(f.c.scope == "process:p")
        for k in ("status", "rule"):
            if k in params:
                q = q.where(f.c[k] == params[k])
        expected = [r.id for r in conn.execute(q.order_by(f.c.t_occ.desc(), f.c.id.desc()))]
    engine.dispose()
    assert len(expected) > 7 and down == expected
    last = [i for i in down if i not in up]
    assert up + last == down  # back to the newest: every one once, in order
    listing = [plan for sql, plan in seen if "rule_firings" in sql and "scope = ?" in sql]
    assert listing and all("scope_t_occ" in p and "TEMP B-TREE" not in p for p in listing)


@pytest.mark.parametrize("params", [{}, {"event": "order"}], ids=["all", "event"])
def test_a_scopes_log_rows_are_paged_by_its_index(tmp_path: Any, params: dict[str, str]) -> None:
    """``/log?scope=S`` was ordered by id: SQLite sorted all of the scope's
    rows. They go by the unique (scope, t_first) index, newest first."""
    from urllib.parse import urlencode

    from sentinel.ui import create_app

    url = f"sqlite:///{tmp_path / 'scope.db'}"
    _one_scope_log(url)
    start = "/log?" + urlencode({"scope": "process:p", "limit": 4, **params})
    with TestClient(create_app(url)) as c, plans(c) as seen:
        html = c.get(start).text
        down = rows_of(html)
        while (nxt := link(html, "older")) is not None:
            html = c.get(nxt).text
            down += rows_of(html)
    assert down == list(range(59, 0, -2))  # the scope's 30 rows, newest first
    listing = [
        plan for sql, plan in seen if "FROM sentinel_event_batches" in sql and "scope = ?" in sql
    ]
    assert listing and all("TEMP B-TREE" not in p for p in listing)


def test_constituents_far_apart_in_a_scope_are_each_found(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A firing's constituents are looked for in walks of at most SCOPE_WALK
    rows of their scope: those further apart than one walk are each found,
    a walk going on from the next one below."""
    from datetime import UTC, datetime

    from sentinel.log import Firing, LogWriter
    from sentinel.ui import create_app

    url = f"sqlite:///{tmp_path / 'scope.db'}"
    _one_scope_log(url)
    engine = sa.create_engine(url)
    spread = Firing(
        rule="far",
        scope="process:p",
        t_occ=300,
        constituents=(("process:p", 10), ("process:p", 150), ("process:p", 300)),
        coupling="immediate",
        status="fired",
        fired_at=datetime.now(UTC),
    )
    with engine.begin() as conn:
        LogWriter().write(conn, [], firings=[spread])
        fid = conn.execute(sa.text("SELECT max(id) FROM sentinel_rule_firings")).scalar()
    engine.dispose()
    monkeypatch.setattr("sentinel.ui.queries.SCOPE_WALK", 3)
    with TestClient(create_app(url)) as c:
        html = c.get(f"/firings/{fid}").text
    assert "not in the event log" not in html
    assert re.findall(r'<span class="event">order</span> @(\d+)', html) == ["10", "150", "300"]
