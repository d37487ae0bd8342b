"""The readiness rules: integrity checks that disqualify bad updates at once,
situation monitoring at commit, alerting after it.

``rating_in_range`` (immediate)
    a readiness report outside 1..5 is rejected: the rule raises in the report's
    begin event, before the method runs, so the update never happens and the
    transaction (or the savepoint it ran in) is rolled back.
``assigned_units_ready`` (immediate)
    a unit assigned to a plan may not report a rating worse than 2: rejected the
    same way.
``plan_at_risk`` (deferred, cumulative)
    at commit, once per transaction, with every readiness report, assignment and
    release of the transaction (the OR of three class-level events, as in the
    report's application): each plan touched is checked for its net state
    (enough units, all of them ready) and an ``Alert`` row is added, in the same
    transaction, for each plan at risk.
``notify_command`` (detached)
    after an alert committed (its ``Alert:insert`` database event), a notice for
    command is written in a transaction of its own, exactly once (the outbox),
    keyed by the entry's idempotency key.

The conditions and actions are module-level functions (the detached one must be
importable by an outbox worker).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from examples.readiness.models import Alert, Notice, Plan, Unit, assignment
from sentinel import LocalEventDetector, session_of
from sentinel.orm import detached_context

__all__ = ["ReadinessError", "define_rules"]

#: The worst rating a unit assigned to a plan may have.
READY = 2


class ReadinessError(ValueError):
    """An update the readiness rules disqualify."""


def bad_rating(occ: Any) -> bool:
    return not 1 <= occ.params["rating"] <= 5


def reject_rating(occ: Any) -> None:
    raise ReadinessError(f"a readiness rating is 1 to 5, not {occ.params['rating']}")


def assigned_and_not_ready(occ: Any) -> bool:
    if occ.params["rating"] <= READY:
        return False
    session = session_of(occ)
    assert session is not None
    plans = session.scalars(
        sa.select(assignment.c.plan_id).where(assignment.c.unit_id == occ.source.key[0])
    ).all()
    return bool(plans)


def reject_unready(occ: Any) -> None:
    raise ReadinessError(
        f"unit {occ.source.key[0]} is assigned to a plan: it must stay at {READY} or better, "
        f"not {occ.params['rating']}"
    )


def check_plans(occ: Any) -> None:
    """The net effect of the transaction on each plan it touched."""
    session = session_of(occ)
    assert session is not None
    plan_ids: set[int] = set()
    for c in occ.constituents:
        if c.event.startswith("Plan."):
            plan_ids.add(c.source.key[0])
        else:  # a readiness report: the unit's plans
            unit = session.get(Unit, c.source.key[0])
            plan_ids.update(p.id for p in unit.plans)
    for plan in sorted((session.get(Plan, i) for i in plan_ids), key=lambda p: p.id):
        problems = []
        if len(plan.units) < plan.min_units:
            problems.append(f"{len(plan.units)} unit(s), needs {plan.min_units}")
        problems.extend(f"{u.name} at {u.rating}" for u in plan.units if u.rating > READY)
        if problems:
            session.add(Alert(plan_id=plan.id, message=f"{plan.name}: " + "; ".join(problems)))
    session.flush()


def notify_command(occ: Any) -> None:
    """Write the notice for an alert (in the detached transaction)."""
    ctx = detached_context()
    alert = occ.params["new"]
    ctx.session.add(
        Notice(
            alert_id=alert["id"],
            idempotency_key=ctx.idempotency_key,
            text=f"to command: {alert['message']}",
        )
    )


def define_rules(det: LocalEventDetector) -> None:
    """The readiness rules on ``det`` (whose classes are the models')."""
    det.rule("rating_in_range", "Unit.rating_report", bad_rating, action=reject_rating,
             priority=10)  # fmt: skip
    det.rule("assigned_units_ready", "Unit.rating_report", assigned_and_not_ready,
             action=reject_unready)  # fmt: skip
    det.rule(
        "plan_at_risk",
        "Unit.rating_report | Plan.assigned | Plan.released",
        action=check_plans,
        coupling="deferred",
        context="cumulative",
    )
    det.rule("notify_command", "Alert:insert", action=notify_command, coupling="detached")
