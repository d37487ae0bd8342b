"""``sentinel ui --allow-actions``: retrying a failed (exhausted) outbox entry,
behind a token, a CSRF token and an origin check; and none of it without the
flag.

How the refusals are shown to matter: one request that passes every check
retries the entry (the control); each refused request differs from it in one
thing only, and is refused with the database unchanged; and the same request is
accepted once the one check that should refuse it is switched off
(:class:`~sentinel.ui.actions.Guard`'s ``check_*`` flags). So each refusal
test would fail on a version without its protection."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

pytest.importorskip("starlette", reason="sentinel ui needs the ui extra")
from starlette.testclient import TestClient

from sentinel.errors import LogTablesMissingError
from sentinel.log.tables import log_tables
from sentinel.ui import create_app
from sentinel.ui.actions import AUTH_COOKIE, CSRF_COOKIE

from .conftest import build_log, shop_rules

TOKEN = "t0ken-for-the-tests-0123456789"
BASE = "http://127.0.0.1:8000"
CSRF = "c" * 32


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A log of its own (the tests change it)."""
    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = sa.create_engine(url)
    build_log(engine)
    engine.dispose()
    return url


@pytest.fixture
def app(db: str) -> Any:
    return create_app(db, detector=shop_rules(), actions_token=TOKEN)


def outbox_row(url: str, key: str) -> dict[str, Any]:
    o = log_tables().outbox
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(o.c.id, o.c.status, o.c.attempts).where(o.c.idempotency_key == key)
        ).one()
    engine.dispose()
    return dict(row._mapping)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, "no CSRF field on the page"
    return found.group(1)


# -- read-only by default -----------------------------------------------------------
def test_without_allow_actions_no_route_acts_and_no_page_has_a_button(
    client: TestClient,
) -> None:
    for page in ("/rules", "/firings", "/outbox", "/log", "/firings/1"):
        r = client.get(page)
        assert '<form method="post"' not in r.text and "Retry" not in r.text, page
        assert "set-cookie" not in r.headers, page
    for route in ("/unlock", "/outbox/1/retry", "/outbox/3/retry"):
        r = client.post(route, data={"token": TOKEN}, headers={"origin": "http://testserver"})
        assert r.status_code in (404, 405), route


# -- the control: every check passed -------------------------------------------------
def test_an_unlocked_browser_retries_a_failed_entry(app: Any, db: str) -> None:
    failed = outbox_row(db, "k-failed")
    assert (failed["status"], failed["attempts"]) == ("failed", 5)
    with TestClient(app, base_url=BASE) as browser:
        page = browser.get("/outbox").text
        csrf = csrf_of(page)
        assert browser.cookies.get(CSRF_COOKIE) == csrf
        # one Retry button, on the failed entry, disabled until unlocked
        assert page.count('class="retry"') == 1
        assert f'action="/outbox/{failed["id"]}/retry"' in page
        assert "unlock actions first" in page
        origin = {"origin": BASE}
        r = browser.post(
            "/unlock",
            data={"csrf": csrf, "token": TOKEN, "next": "/outbox"},
            headers=origin,
            follow_redirects=False,
        )
        assert r.status_code == 303 and r.headers["location"] == "/outbox"
        assert AUTH_COOKIE in browser.cookies and TOKEN not in browser.cookies[AUTH_COOKIE]
        page = browser.get("/outbox").text
        assert 'id="unlocked"' in page and "unlock actions first" not in page
        r = browser.post(
            f"/outbox/{failed['id']}/retry",
            data={"csrf": csrf},
            headers=origin,
            follow_redirects=False,
        )
        assert r.status_code == 303
        assert r.headers["location"] == f"/outbox?retried={failed['id']}"
        done = browser.get(r.headers["location"]).text
        assert f"Entry #{failed['id']} is pending again" in done
    after = outbox_row(db, "k-failed")
    assert (after["status"], after["attempts"]) == ("pending", 0)


# -- each protection, and that it is what refuses ------------------------------------
def good() -> dict[str, Any]:
    """A retry that passes every check: the token in the form, the CSRF
    field equal to its cookie, sent from the view's own origin."""
    return {
        "cookies": {CSRF_COOKIE: CSRF},
        "data": {"csrf": CSRF, "token": TOKEN},
        "headers": {"origin": BASE},
    }


def without(change: str) -> dict[str, Any]:
    r = good()
    if change == "no token":
        del r["data"]["token"]
    elif change == "a wrong token":
        r["data"]["token"] = TOKEN[:-1] + "X"
    elif change == "a forged unlock cookie":
        del r["data"]["token"]
        r["cookies"][AUTH_COOKIE] = "0" * 64
    elif change == "no CSRF field":
        del r["data"]["csrf"]
    elif change == "a wrong CSRF field":
        r["data"]["csrf"] = "d" * 32
    elif change == "no CSRF cookie":
        del r["cookies"][CSRF_COOKIE]
    elif change == "another origin":
        r["headers"] = {"origin": "http://evil.example"}
    elif change == "another origin's referer":
        r["headers"] = {"referer": "http://evil.example/page"}
    elif change == "no origin nor referer":
        r["headers"] = {}
    else:
        raise AssertionError(change)
    return r


#: Each request changed from :func:`good`, and the check that must refuse it.
REFUSED = {
    "no token": "check_token",
    "a wrong token": "check_token",
    "a forged unlock cookie": "check_token",
    "no CSRF field": "check_csrf",
    "a wrong CSRF field": "check_csrf",
    "no CSRF cookie": "check_csrf",
    "another origin": "check_origin",
    "another origin's referer": "check_origin",
    "no origin nor referer": "check_origin",
}


def post_retry(app: Any, request: dict[str, Any], oid: int) -> Any:
    with TestClient(app, base_url=BASE, cookies=request["cookies"]) as c:
        return c.post(
            f"/outbox/{oid}/retry",
            data=request["data"],
            headers=request["headers"],
            follow_redirects=False,
        )


def test_the_control_request_passes(app: Any, db: str) -> None:
    oid = outbox_row(db, "k-failed")["id"]
    assert post_retry(app, good(), oid).status_code == 303
    assert outbox_row(db, "k-failed")["status"] == "pending"


@pytest.mark.parametrize("change", list(REFUSED))
def test_a_retry_is_refused_with(app: Any, db: str, change: str) -> None:
    oid = outbox_row(db, "k-failed")["id"]
    r = post_retry(app, without(change), oid)
    assert r.status_code == 403 and "refused" in r.text
    assert outbox_row(db, "k-failed")["status"] == "failed"


@pytest.mark.parametrize("change", list(REFUSED))
def test_without_its_check_the_refused_retry_would_pass(app: Any, db: str, change: str) -> None:
    """The refusal above is the named check's doing: switched off, the same
    request retries the entry (so the test above fails on a version without
    that protection)."""
    setattr(app.state.guard, REFUSED[change], False)
    oid = outbox_row(db, "k-failed")["id"]
    assert post_retry(app, without(change), oid).status_code == 303
    assert outbox_row(db, "k-failed")["status"] == "pending"


def test_unlocking_needs_the_token(app: Any) -> None:
    with TestClient(app, base_url=BASE, cookies={CSRF_COOKIE: CSRF}) as c:
        r = c.post(
            "/unlock",
            data={"csrf": CSRF, "token": "not-the-token-at-all"},
            headers={"origin": BASE},
            follow_redirects=False,
        )
        assert r.status_code == 403 and AUTH_COOKIE not in c.cookies
        # and it sends the browser back only to a page of its own
        r = c.post(
            "/unlock",
            data={"csrf": CSRF, "token": TOKEN, "next": "//evil.example/"},
            headers={"origin": BASE},
            follow_redirects=False,
        )
        assert r.status_code == 303 and r.headers["location"] == "/"


def test_a_script_may_give_the_token_as_a_bearer(app: Any, db: str) -> None:
    request = good()
    del request["data"]["token"]
    request["headers"]["authorization"] = f"Bearer {TOKEN}"
    assert post_retry(app, request, outbox_row(db, "k-failed")["id"]).status_code == 303


@pytest.mark.parametrize(("key", "status"), [("k-pending", 409), ("k-running", 409), (None, 404)])
def test_only_a_failed_entry_is_retried(app: Any, db: str, key: str | None, status: int) -> None:
    oid = 999 if key is None else outbox_row(db, key)["id"]
    before = None if key is None else outbox_row(db, key)
    r = post_retry(app, good(), oid)
    assert r.status_code == status and 'id="error"' in r.text
    if key is not None:
        assert outbox_row(db, key) == before


def test_a_short_token_is_refused(db: str) -> None:
    with pytest.raises(ValueError, match="at least 16 characters"):
        create_app(db, actions_token="short")


def test_a_short_token_is_refused_before_the_log_is_opened(tmp_path: Path) -> None:
    """The arguments are checked before anything is opened: a database that
    does not exist is not even tried."""
    missing = f"sqlite:///{tmp_path / 'no' / 'such' / 'log.db'}"
    with pytest.raises(ValueError, match="at least 16 characters"):
        create_app(missing, actions_token="short")


def test_a_log_refused_by_its_check_leaves_no_engine_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log the reader's check refuses (here: a database without the log's
    tables) closes what the reader opened: its engine is disposed, not left to
    the garbage collector."""
    import sentinel.ui.app as app_module

    closed: list[object] = []
    real = app_module.LogReader

    class Recording(real):  # type: ignore[misc, valid-type]
        def close(self) -> None:
            closed.append(self)
            super().close()

    monkeypatch.setattr(app_module, "LogReader", Recording)
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()  # a database without the log's tables
    with pytest.raises(LogTablesMissingError):
        create_app(f"sqlite:///{path}")
    assert len(closed) == 1


@pytest.fixture
def unlocked(app: Any) -> Iterator[TestClient]:
    with TestClient(app, base_url=BASE) as c:
        csrf = csrf_of(c.get("/outbox").text)
        c.post("/unlock", data={"csrf": csrf, "token": TOKEN}, headers={"origin": BASE})
        yield c


def test_values_stay_escaped_with_actions(unlocked: TestClient) -> None:
    html = unlocked.get("/outbox").text
    assert "<script>alert(1)</script>" not in html
    assert "KeyError: &lt;script&gt;alert(1)&lt;/script&gt;" in html
