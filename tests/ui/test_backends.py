"""The web view's queries on every database the log supports (the per-occurrence
view differs per dialect; JSON comes back as text or decoded)."""

from __future__ import annotations

import re

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
