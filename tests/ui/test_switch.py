"""``sentinel ui --allow-actions``: a request to disable or enable a rule of a
running global detector (issue 34, item 2), behind the same token, CSRF token
and origin check as the retry (the same control-and-one-change design as
``test_actions.py``); none of it read-only; a rule the view's rule set does
not define is refused with nothing written."""

from __future__ import annotations

import re
from typing import Any

import pytest
import sqlalchemy as sa

pytest.importorskip("starlette", reason="sentinel ui needs the ui extra")
from starlette.testclient import TestClient

from sentinel.log.switches import latest_switches
from sentinel.log.tables import log_tables

from .conftest import HOSTILE
from .test_actions import BASE, REFUSED, TOKEN, app, csrf_of, db, good, without

__all__ = ["app", "db"]  # fixtures


def switches(url: str) -> list[tuple[str, str, bool, str]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        got = latest_switches(conn, log_tables())
    engine.dispose()
    return [(s.detector, s.rule, s.enabled, s.state) for s in reversed(got)]


def post_switch(app: Any, request: dict[str, Any], **fields: str) -> Any:
    data = {"rule": "paid", "enabled": "0", "detector": "global", **request["data"], **fields}
    with TestClient(app, base_url=BASE, cookies=request["cookies"]) as c:
        return c.post(
            "/rules/switch", data=data, headers=request["headers"], follow_redirects=False
        )


def test_read_only_rules_page_has_no_switch(client: TestClient) -> None:
    page = client.get("/rules").text
    assert "/rules/switch" not in page and "<form" not in page
    r = client.post(
        "/rules/switch",
        data={"rule": "paid", "enabled": "0", "token": TOKEN},
        headers={"origin": "http://testserver"},
    )
    assert r.status_code in (404, 405)


def test_an_unlocked_browser_disables_then_enables_a_rule(app: Any, db: str) -> None:
    with TestClient(app, base_url=BASE) as browser:
        page = browser.get("/rules").text
        csrf = csrf_of(page)
        # a switch on the one detached rule, locked until unlocked; the
        # others are not run by a global detector
        assert page.count('class="switch"') == 1
        assert page.count(">Disable</button>") == 1 and page.count(">Enable</button>") == 0
        assert page.count(">not detached</span>") == 3
        assert "unlock actions first" in page
        browser.post("/unlock", data={"csrf": csrf, "token": TOKEN}, headers={"origin": BASE})
        r = browser.post(
            "/rules/switch",
            data={"csrf": csrf, "rule": "paid", "enabled": "0", "detector": "global"},
            headers={"origin": BASE},
            follow_redirects=False,
        )
        assert r.status_code == 303 and r.headers["location"].startswith(
            "/rules?detector=global&switched="
        )
        page = browser.get(r.headers["location"]).text
        assert 'id="switched"' in page and "(disable pending)" in page
        assert ">Enable</button>" in page  # what a second request would ask
        r = browser.post(
            "/rules/switch",
            data={"csrf": csrf, "rule": HOSTILE, "enabled": "0"},
            headers={"origin": BASE},
            follow_redirects=False,
        )
        assert r.status_code == 303
        page = browser.get("/rules").text
        assert HOSTILE not in page  # the rule's name stays text in the switches
    assert switches(db) == [
        ("global", "paid", False, "pending"),
        ("global", HOSTILE, False, "pending"),
    ]


def test_the_control_switch_passes(app: Any, db: str) -> None:
    assert post_switch(app, good()).status_code == 303
    assert switches(db) == [("global", "paid", False, "pending")]


@pytest.mark.parametrize("change", list(REFUSED))
def test_a_switch_is_refused_with(app: Any, db: str, change: str) -> None:
    r = post_switch(app, without(change))
    assert r.status_code == 403 and "refused" in r.text
    assert switches(db) == []


@pytest.mark.parametrize("change", ["no token", "no CSRF field", "another origin"])
def test_without_its_check_the_refused_switch_would_pass(app: Any, db: str, change: str) -> None:
    setattr(app.state.guard, REFUSED[change], False)
    assert post_switch(app, without(change)).status_code == 303
    assert switches(db) == [("global", "paid", False, "pending")]


def test_a_rule_the_rule_set_does_not_define_is_refused(app: Any, db: str) -> None:
    r = post_switch(app, good(), rule="no-such-rule")
    assert r.status_code == 404 and "no rule named &#39;no-such-rule&#39;" in r.text
    r = post_switch(app, good(), enabled="maybe")
    assert r.status_code == 400
    # the service would refuse to run a rule that is not detached
    r = post_switch(app, good(), rule="shipped", enabled="1")
    assert r.status_code == 400 and "not detached" in r.text
    assert switches(db) == []


def test_the_running_service_applies_the_switch_and_the_page_says_where(db: str) -> None:
    """End to end: the view writes the request, ``sentinel global``'s service
    applies it at its next step, and the Rules page shows the rule disabled in
    that detector and the commit after which it was."""
    from sentinel.global_detector import GlobalDetector
    from sentinel.ui import create_app
    from tests.global_detector import rules

    app = create_app(db, detector=rules.detector, actions_token=TOKEN)
    assert post_switch(app, good()).status_code == 303
    service = GlobalDetector(rules.detector, db, run_actions=False)
    try:
        service.step()
        assert [s.state for s in service.switches.handled] == ["applied"]
        feeder = service._feeder
        assert feeder is not None and feeder.switched == {"paid": False}
    finally:
        service.close()
    with TestClient(app, base_url=BASE) as c:
        page = c.get("/rules").text
    assert "applied after commit 0" in page
    row = page[page.index('<td class="running">') :]
    assert row.startswith('<td class="running">no')
    assert switches(db) == [("global", "paid", False, "applied")]


@pytest.mark.parametrize(("position", "running"), [(3, "yes"), (5, "no")])
def test_a_switch_beyond_the_cursors_position_is_not_shown_in_effect(
    tmp_path: Any, position: int, running: str
) -> None:
    """The Rules page showed every applied switch as in effect: one applied
    after commit 5, with the cursor set back to 3, is applied again only
    when the detector's reads pass 5 (as it rebuilds, switches at positions
    up to its own are applied)."""
    from datetime import UTC, datetime

    from sentinel.log.switches import mark_handled, request_switch
    from sentinel.ui import create_app

    from .conftest import build_log, shop_rules

    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = sa.create_engine(url)
    build_log(engine)
    t = log_tables()
    with engine.begin() as conn:
        asked = request_switch(conn, t, "paid", False, detector="global")
        mark_handled(conn, t, [(asked.id, None)], 5, "host:1")
        conn.execute(
            sa.insert(t.global_cursors).values(
                name="global", position=position, updated_at=datetime.now(UTC)
            )
        )
    engine.dispose()
    with TestClient(create_app(url, detector=shop_rules())) as c:
        page = c.get("/rules").text
    row = re.search(r'>paid</a></td>.*?<td class="running">(\w+)', page, re.S)
    assert row is not None and row.group(1) == running
