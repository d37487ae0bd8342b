"""The web view's queries on every database the log supports (the per-occurrence
view differs per dialect; JSON comes back as text or decoded)."""

from __future__ import annotations

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
