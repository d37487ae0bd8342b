"""Redaction reaches every place sentinel stores a parameter (issue 11 item
8): database columns (dotted names into a database event's ``new`` / ``old``),
the event log, the outbox's payloads; rules that run live still see every
value."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from sentinel.log import LogPolicy, log_tables

from . import actions
from .conftest import ORM

SECRET = "hunter2-secret"


def _stored_text(engine: sa.Engine) -> str:
    """Every row of every log table, as text."""
    out = []
    with engine.connect() as conn:
        for name in log_tables().names:
            for row in conn.execute(sa.text(f"SELECT * FROM {name}")):
                out.append(repr(tuple(row)))
    return "\n".join(out)


def test_columns_and_outbox_payloads_are_redacted(orm: ORM) -> None:
    (ibm,) = orm.add_stocks("IBM")
    policy = LogPolicy({"Stock:*": {"redact": ["new.name", "old.name"], "exclude": ["old.qty"]}})
    att = orm.attach(log=policy)
    live: list[Any] = []
    orm.det.rule("live", "Stock:update", action=live.append)
    orm.det.rule("D", "Stock:update", action=actions.record, coupling="detached")
    with orm.Session.begin() as s:
        stock = s.get(orm.model.Stock, ibm)
        stock.name = SECRET
        stock.qty = 7
    assert att.wait_detached(60)
    # live: unchanged
    (occ,) = live
    assert occ.params["new"]["name"] == SECRET and occ.params["old"]["name"] == "IBM"
    assert occ.params["old"]["qty"] == 0
    # the event log
    (row,) = [o for o in orm.log() if o.occurrence.event == "Stock:update"]
    assert dict(row.occurrence.params["new"]) == {"name": "<redacted>", "qty": 7}
    assert dict(row.occurrence.params["old"]) == {"name": "<redacted>"}
    # the outbox: what the detached action received, and what stays stored
    (entry,) = orm.outbox()
    assert entry.status == "done"
    (stored,) = entry.constituents
    assert dict(stored.params["new"]) == {"name": "<redacted>", "qty": 7}
    assert dict(stored.params["old"]) == {"name": "<redacted>"}
    assert len(orm.effects()) == 1
    # nowhere in any log table
    assert SECRET not in _stored_text(orm.engine)
    assert "<redacted>" in _stored_text(orm.engine)


def test_a_plain_name_still_redacts_the_whole_parameter(orm: ORM) -> None:
    (ibm,) = orm.add_stocks("IBM")
    orm.attach(log=LogPolicy({"Stock:*": {"redact": ["new"]}}))
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).name = SECRET
    (row,) = [o for o in orm.log() if o.occurrence.event == "Stock:update"]
    assert row.occurrence.params["new"] == "<redacted>"
    assert row.occurrence.params["old"]["name"] == "IBM"


def test_globs_in_dotted_names(orm: ORM) -> None:
    (ibm,) = orm.add_stocks("IBM")
    orm.attach(log=LogPolicy({"Stock:*": {"redact": ["*.na*"]}}))
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).name = SECRET
    (row,) = [o for o in orm.log() if o.occurrence.event == "Stock:update"]
    assert dict(row.occurrence.params["new"]) == {"name": "<redacted>"}
    assert dict(row.occurrence.params["old"]) == {"name": "<redacted>"}
    assert SECRET not in _stored_text(orm.engine)
