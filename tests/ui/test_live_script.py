"""What ``static/ui.js`` does with the pages it polls for: run under Node with
the elements of a page the view rendered (a stand-in document: the script
reads attributes and sets ``hidden`` and text only) and the answers of
``/api/live``. Skipped where ``node`` is missing."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

pytest.importorskip("starlette", reason="sentinel ui needs the ui extra")
from starlette.testclient import TestClient

from sentinel.log import LogWriter, OutboxEntry
from sentinel.ui import create_app

from .conftest import N_FIRINGS, build_log, occ, shop_rules

NODE = shutil.which("node")
SCRIPT = Path(__file__).parents[2] / "sentinel" / "ui" / "static" / "ui.js"

HARNESS = r"""
const fs = require("fs");
const vm = require("vm");
const input = JSON.parse(fs.readFileSync(0, "utf8"));
const byId = {};
const all = input.elements.map((e) => {
  const el = {
    id: e.id, attrs: e.attrs, hidden: e.hidden, textContent: e.text,
    getAttribute(n) { return n in this.attrs ? this.attrs[n] : null; },
    addEventListener() {}, classList: { add() {}, remove() {} },
  };
  if (e.id) byId[e.id] = el;
  return el;
});
const answers = input.answers.slice();
const document = {
  hidden: false,
  body: { getAttribute: () => null },
  getElementById: (id) => byId[id] || null,
  querySelectorAll: (sel) =>
    sel === "[data-live]" ? all.filter((e) => "data-live" in e.attrs) : [],
  addEventListener() {},
};
const fetch = async () => ({ ok: true, json: async () => answers.shift() });
const ctx = vm.createContext({ document, fetch, setInterval() {}, console, JSON, Number, String });
vm.runInContext(fs.readFileSync(input.script, "utf8"), ctx);
(async () => {
  const states = [];
  for (let i = 0; i < input.answers.length; i++) {
    await vm.runInContext("poll()", ctx);
    states.push(all.map((e) => ({
      id: e.id, live: e.attrs["data-live"] || null, hidden: e.hidden, text: e.textContent,
    })));
  }
  process.stdout.write(JSON.stringify(states));
})();
"""


class _Elements(HTMLParser):
    """The elements with an id or a ``data-live`` attribute, and their text."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict[str, Any]] = []
        self._open: list[dict[str, Any] | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: (v if v is not None else "") for k, v in attrs}
        if "id" in a or "data-live" in a:
            el = {"id": a.get("id"), "attrs": a, "hidden": "hidden" in a, "text": ""}
            self.found.append(el)
            self._open.append(el)
        elif tag not in ("input", "br", "meta", "link", "option"):
            self._open.append(None)

    def handle_endtag(self, tag: str) -> None:
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for el in self._open:
            if el is not None:
                el["text"] += data


def run_script(html: str, answers: list[dict[str, Any]], tmp: Path) -> list[dict[str, Any]]:
    """The page's elements after each poll answered by ``answers`` in turn."""
    if NODE is None:
        pytest.skip("the script's tests need node")
    parser = _Elements()
    parser.feed(html)
    data = {"elements": parser.found, "answers": answers, "script": str(SCRIPT)}
    harness = tmp / "harness.js"
    harness.write_text(HARNESS)
    out = subprocess.run(
        [NODE, str(harness)], input=json.dumps(data), capture_output=True, text=True, check=True
    )
    states = json.loads(out.stdout)
    return [{(e["id"] or e["live"]): e for e in state} for state in states]


def test_the_new_firings_banner_stays_hidden_on_a_filtered_page(
    client: TestClient, tmp_path: Path
) -> None:
    """The banner compared the page's newest matching firing with the log's
    newest: on a filtered or older page it said new firings came when none
    did. Its link keeps the filter."""
    live = client.get("/api/live").json()
    for params in ({"rule": "paid"}, {"status": "failed", "rule": "paid"}, {"before": "30"}):
        html = client.get("/firings", params=params).text
        (state,) = run_script(html, [live], tmp_path)
        assert state["new-firings"]["hidden"], params
    filtered = client.get("/firings", params={"rule": "paid", "before": "30"}).text
    banner = re.search(r'id="new-firings".*?</p>', filtered, re.S)
    assert banner is not None and 'href="/firings?rule=paid"' in banner.group(0)


def test_the_new_firings_banner_shows_a_new_firing(client: TestClient, tmp_path: Path) -> None:
    html = client.get("/firings", params={"rule": "paid"}).text
    live = client.get("/api/live").json()
    newer = {**live, "latest_firing": N_FIRINGS + 2}
    newer["firings"] = {**live["firings"], "count": live["firings"]["count"] + 1}
    states = run_script(html, [live, newer], tmp_path)
    assert states[0]["new-firings"]["hidden"] and not states[1]["new-firings"]["hidden"]


def test_a_firing_committed_after_a_newer_one_is_signalled(
    engine: sa.Engine, tmp_path: Path, backend: str
) -> None:
    """On PostgreSQL and MariaDB an id is taken at the insert: a firing with
    a smaller id committed after the page was read left the newest id as it
    was, and the banner never showed."""
    if backend == "sqlite":
        pytest.skip("SQLite writes one transaction at a time: ids are taken in commit order")
    from sentinel.log import Firing

    def firing(scope: str) -> Firing:
        return Firing(
            rule="paid",
            scope=scope,
            t_occ=1,
            constituents=(),
            coupling="immediate",
            status="fired",
            fired_at=datetime.now(UTC),
        )

    build_log(engine)
    writer = LogWriter()
    with TestClient(create_app(engine, detector=shop_rules())) as c:
        slow = engine.connect()
        pending = slow.begin()
        writer.write(slow, [], firings=[firing("tx-slow")])  # takes the next id
        with engine.begin() as conn:
            writer.write(conn, [], firings=[firing("tx-fast")])
        html = c.get("/firings").text
        pending.commit()
        slow.close()
        time.sleep(1.05)  # the live figures are read at most once a second
        live = c.get("/api/live").json()
    (state,) = run_script(html, [live], tmp_path)
    assert not state["new-firings"]["hidden"]


def _add_pending(url: str, key: str) -> None:
    engine = sa.create_engine(url)
    o = occ("order", 5000 + len(key), f"tx-{key}")
    with engine.begin() as conn:
        LogWriter().write(conn, [o], outbox=[OutboxEntry.of("paid", o, key=key)])
    engine.dispose()


def test_the_outbox_page_compares_polls_with_what_it_rendered(
    tmp_path: Path,
) -> None:
    """ "Changed since loaded" took the first poll as the baseline: a change
    between the page's render and its first poll was missed, and a snapshot
    older than the page (cached for another tab) set a figure back and then
    raised a false "changed"."""
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    engine = sa.create_engine(url)
    build_log(engine)
    engine.dispose()
    with TestClient(create_app(url)) as c:
        # a change between the render and the first poll
        html = c.get("/outbox").text
        _add_pending(url, "new-a")
        time.sleep(1.05)
        fresh = c.get("/api/live").json()
        assert fresh["outbox"]["pending"] == 2
        (state,) = run_script(html, [fresh], tmp_path)
        assert not state["outbox-changed"]["hidden"]
        assert state["outbox.pending"]["text"] == "2"
        # a snapshot read before the page was: left aside
        time.sleep(1.05)
        cached = c.get("/api/live").json()
        _add_pending(url, "new-b")
        html = c.get("/outbox").text
        assert c.get("/api/live").json() == cached  # still the one read before the page
        time.sleep(1.05)
        same = c.get("/api/live").json()
    assert cached["outbox"]["pending"] == 2 and same["outbox"]["pending"] == 3
    first, second = run_script(html, [cached, same], tmp_path)
    assert first["outbox.pending"]["text"] == "3"  # not set back to 2
    assert first["outbox-changed"]["hidden"] and second["outbox-changed"]["hidden"]
