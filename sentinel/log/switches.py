"""Rule switches: requests to enable or disable a global detector's rule, in
the log's table ``<prefix>rule_switches`` (schema revision 0007).

A rule's enabled state lives in the memory of the process running the rules.
For the global detector service (``sentinel global``), which rebuilds that
memory from the log whenever it starts, a switch must be part of the log too,
or the detections after a restart would depend on when it restarted. So:

1. :func:`request_switch` (``sentinel rules enable|disable``, the web view's
   action) writes a request: which detector (its cursor's name), which rule,
   enabled or not, when and by whom;
2. the service picks pending requests up at a read-batch boundary and records,
   under its cursor's lease, the commit number after which it applied each
   (:func:`mark_handled`; see :mod:`sentinel.global_detector.switches`);
3. whatever rebuilds the detector from the log applies the recorded switches
   at those same positions (:func:`applied_switches`).

This module is the table's access only (SQLAlchemy Core); it knows nothing of
rules beyond their names.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from sentinel.errors import LogTablesMissingError, RuleSwitchError
from sentinel.log.commit_order import notify_channel
from sentinel.log.schema import location, schema_revision, upgrade_hint
from sentinel.log.tables import NAME_LENGTH, SCHEMA_VERSION, LogTables

#: The schema revision that adds the rule switches table
#: (``migrations/versions/0007_rule_switches.py``).
SWITCHES_REVISION = "0007"

__all__ = [
    "Switch",
    "applied_switches",
    "has_switches",
    "latest_switches",
    "mark_handled",
    "pending_switches",
    "request_switch",
    "require_switches",
]


@dataclass(frozen=True, slots=True)
class Switch:
    """One row of ``rule_switches`` (see :mod:`sentinel.log.tables`)."""

    id: int
    detector: str
    rule: str
    enabled: bool
    requested_at: datetime
    requested_by: str | None
    position: int | None = None
    applied_at: datetime | None = None
    applied_by: str | None = None
    refused: str | None = None

    @property
    def state(self) -> str:
        """``pending``, ``applied`` or ``refused``."""
        if self.position is None:
            return "pending"
        return "refused" if self.refused is not None else "applied"


def _switch(row: sa.Row[tuple[object, ...]]) -> Switch:
    m = row._mapping
    return Switch(
        id=int(m["id"]),
        detector=str(m["detector"]),
        rule=str(m["rule"]),
        enabled=bool(m["enabled"]),
        requested_at=m["requested_at"],
        requested_by=m["requested_by"],
        position=None if m["position"] is None else int(m["position"]),
        applied_at=m["applied_at"],
        applied_by=m["applied_by"],
        refused=m["refused"],
    )


def has_switches(conn: Connection, tables: LogTables) -> bool:
    """Whether the database holds the switches table (a catalog query only,
    safe inside a transaction that must not see an error)."""
    return sa.inspect(conn).has_table(tables.rule_switches.name, schema=tables.schema)


def require_switches(conn: Connection, tables: LogTables) -> None:
    """Raise :class:`~sentinel.errors.LogTablesMissingError` naming the
    command that creates the switches table, unless it exists."""
    if has_switches(conn, tables):
        return
    found = schema_revision(conn, tables)
    where = location(conn, tables)
    at = "has no sentinel log" if found is None else f"is at schema revision {found}"
    raise LogTablesMissingError(
        f"{where} {at}: it has no table {tables.qualified(tables.rule_switches.name)}, "
        f"where rule switches are requested (schema revision {SWITCHES_REVISION} adds "
        "it); "
        f"{upgrade_hint(conn, tables)}",
        location=where,
        found=found,
        expected=SCHEMA_VERSION,
        missing=[tables.rule_switches.name],
    )


def _requester() -> str:
    return f"{socket.gethostname()[:40]}:{os.getpid()}"


def request_switch(
    bind: Engine | Connection,
    tables: LogTables,
    rule: str,
    enabled: bool,
    *,
    detector: str = "global",
    by: str | None = None,
    rules: Collection[str] | None = None,
) -> Switch:
    """Ask the global detector named ``detector`` to enable (``enabled=True``)
    or disable ``rule``; return the request as written (pending).

    ``rules``, when the caller knows the detector's rule set, are its rule
    names: a ``rule`` not among them raises
    :class:`~sentinel.errors.RuleSwitchError` and nothing is written (the
    service refuses such a request too, recording why, when nobody could
    check it before). A database without the switches table raises
    :class:`~sentinel.errors.LogTablesMissingError`, naming the command that
    adds it. ``by`` (default ``host:pid``) is who asked. On PostgreSQL the
    request wakes a sleeping service (``NOTIFY``), which applies it at its next
    read-batch boundary; elsewhere it polls.

    With an Engine the request commits on return; with a Connection it is
    written in the caller's transaction.
    """
    if not rule or len(rule) > NAME_LENGTH:
        raise RuleSwitchError(f"a rule name is 1 to {NAME_LENGTH} characters", rule=rule)
    if not detector or len(detector) > NAME_LENGTH:
        raise RuleSwitchError(f"a detector name is 1 to {NAME_LENGTH} characters", rule=rule)
    if rules is not None and rule not in rules:
        known = ", ".join(repr(r) for r in sorted(rules)) or "none"
        raise RuleSwitchError(
            f"the rule set defines no rule named {rule!r} (its rules: {known})", rule=rule
        )
    if isinstance(bind, Engine):
        with bind.begin() as conn:
            return request_switch(
                conn, tables, rule, enabled, detector=detector, by=by, rules=rules
            )
    require_switches(bind, tables)
    t = tables.rule_switches
    values = {
        "detector": detector,
        "rule": rule,
        "enabled": bool(enabled),
        "requested_at": datetime.now(UTC),
        "requested_by": (by or _requester())[:NAME_LENGTH],
    }
    key = bind.execute(sa.insert(t).values(**values)).inserted_primary_key
    assert key is not None
    new_id = key[0]
    if bind.dialect.name == "postgresql":
        bind.execute(sa.text("SELECT pg_notify(:c, '')"), {"c": notify_channel(tables)})
    return Switch(id=int(new_id), **values)  # type: ignore[arg-type]


def pending_switches(conn: Connection, tables: LogTables, detector: str) -> list[Switch]:
    """The requests for ``detector`` the service has not handled, oldest first."""
    t = tables.rule_switches
    q = sa.select(t).where(t.c.detector == detector, t.c.position.is_(None)).order_by(t.c.id)
    return [_switch(r) for r in conn.execute(q)]


def applied_switches(
    conn: Connection, tables: LogTables, detector: str, upto: int | None = None
) -> list[Switch]:
    """The switches ``detector`` applied (not those it refused), at positions up
    to ``upto`` (``None``: all), in the order it applied them."""
    t = tables.rule_switches
    q = sa.select(t).where(
        t.c.detector == detector, t.c.position.is_not(None), t.c.refused.is_(None)
    )
    if upto is not None:
        q = q.where(t.c.position <= upto)
    return [_switch(r) for r in conn.execute(q.order_by(t.c.position, t.c.id))]


def mark_handled(
    conn: Connection,
    tables: LogTables,
    handled: Iterable[tuple[int, str | None]],
    position: int,
    by: str,
) -> int:
    """Record requests as handled at ``position`` by instance ``by``: each
    ``(id, refused)`` pair, ``refused`` being why it was not applied (``None``:
    applied). Only pending rows change; returns how many did."""
    t = tables.rule_switches
    now = datetime.now(UTC)
    n = 0
    for sid, refused in handled:
        res = conn.execute(
            sa.update(t)
            .where(t.c.id == sid, t.c.position.is_(None))
            .values(position=position, applied_at=now, applied_by=by[:NAME_LENGTH], refused=refused)
        )
        n += res.rowcount
    return n


def latest_switches(
    conn: Connection, tables: LogTables, *, detector: str | None = None, limit: int = 50
) -> list[Switch]:
    """The newest requests (of ``detector``, or of every detector), newest first."""
    t = tables.rule_switches
    q = sa.select(t)
    if detector is not None:
        q = q.where(t.c.detector == detector)
    return [_switch(r) for r in conn.execute(q.order_by(t.c.id.desc()).limit(limit))]
