"""``sentinel ui`` is safe to point at a production log: every value is
escaped (a value holding markup reads as text; the tests show the check fails
with escaping off), nothing writes (no route takes a method that could), a
Content-Security-Policy refuses inline script, and on the loopback interface
only requests addressed to it are answered."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import sqlalchemy as sa

pytest.importorskip("starlette", reason="sentinel ui needs the ui extra")
from starlette.testclient import TestClient

from sentinel.ui import create_app

from .conftest import HOSTILE, N_FIRINGS, shop_rules

ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
#: Each page, and where the hostile value reaches it: a rule's name (rules,
#: firings, the firing, the outbox), a parameter and a source key (the firing,
#: the log), an error (the firing, the outbox).
PAGES = ["/rules", "/firings", f"/firings/{N_FIRINGS + 1}", "/outbox", "/log"]


@pytest.mark.parametrize("path", PAGES)
def test_a_hostile_value_is_text_on_every_page(client: TestClient, path: str) -> None:
    html = client.get(path).text
    assert HOSTILE not in html
    assert ESCAPED in html


def test_the_escaping_check_fails_without_autoescape(log_url: str) -> None:
    """The check above can fail: with Jinja2's autoescape off, the hostile
    value reaches the page as markup."""
    app = create_app(log_url, detector=shop_rules())
    app.state.templates.autoescape = False
    with TestClient(app) as raw:
        for path in PAGES[1:]:
            assert HOSTILE in raw.get(path).text, path
        # the graph is escaped where it is drawn, not by the templates
        rules = raw.get("/rules").text
        assert HOSTILE not in rules[rules.index("<svg") :]


def test_the_graph_shows_a_hostile_name_as_text(client: TestClient) -> None:
    html = client.get("/rules").text
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert f"rule {ESCAPED}</text>" in svg and HOSTILE not in svg


def test_no_route_changes_anything(client: TestClient, log_url: str) -> None:
    """Only GET and HEAD are answered, on every route; reading every page
    leaves the database file as it was."""
    path = Path(sa.make_url(log_url).database or "")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    routes = [*PAGES, "/", "/firings/1", "/api/live"]
    for route in routes:
        assert client.get(route).status_code == 200, route
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            r = client.request(method, route, data={"status": "pending"})
            assert r.status_code == 405, (method, route)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_templates_mark_nothing_safe() -> None:
    """The one value inserted as markup is the graph's SVG, escaped where it is
    built (``sentinel/ui/graph.py``); templates never switch escaping off."""
    folder = Path(__file__).parents[2] / "sentinel" / "ui" / "templates"
    for template in folder.glob("*.html"):
        text = template.read_text("utf-8")
        assert "|safe" not in text.replace(" ", ""), template.name
        assert "autoescape" not in text, template.name


def test_pages_refuse_inline_script_and_framing(client: TestClient) -> None:
    r = client.get("/firings")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    # the full address goes to no other site; same-origin (not no-referrer) so
    # that a form's POST carries its Origin for the actions' check
    assert r.headers["referrer-policy"] == "same-origin"
    assert "<script>" not in r.text  # the page's one script is a file: /static/ui.js


def test_only_requests_addressed_to_the_loopback_are_answered(log_url: str) -> None:
    app = create_app(log_url, allowed_hosts=["127.0.0.1", "localhost", "::1"])
    with TestClient(app, base_url="http://127.0.0.1") as local:
        assert local.get("/firings").status_code == 200
        assert local.get("/firings", headers={"host": "evil.example"}).status_code == 400
