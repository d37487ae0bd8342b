"""Draining an attachment's outbox until told to stop: what ``sentinel worker``
runs (:func:`serve`), and what a drain reports (:class:`DrainReport`).
:mod:`sentinel.orm.worker` runs the entries."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sentinel.orm.attach import Attachment

__all__ = ["DrainReport", "serve"]

log = logging.getLogger("sentinel.orm")


@dataclass
class DrainReport:
    """What a :meth:`Runner.drain` did: entries done (action committed, or
    condition false), retried later, failed for good, and skipped (claimed by
    someone else meanwhile)."""

    done: int = 0
    retried: int = 0
    failed: int = 0
    skipped: int = 0
    keys: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.done + self.retried + self.failed


def serve(
    attachment: Attachment,
    *,
    poll: float = 1.0,
    once: bool = False,
    stop: threading.Event | None = None,
    report: Callable[[DrainReport], None] | None = None,
) -> DrainReport:
    """Drain ``attachment``'s outbox until ``stop`` is set (or once, with
    ``once``), waiting ``poll`` seconds between drains that found nothing due;
    return the totals. ``report(drain)`` is called after each drain that did
    something. What ``sentinel worker`` runs. Once ``stop`` is set, the entry
    running finishes and those not started are handed back
    (:attr:`Runner.stop_event`).

    A drain that fails (the database is unreachable for a while) is logged and
    tried again after ``poll`` seconds; with ``once`` its error is raised."""
    total = DrainReport()
    stop = stop or threading.Event()
    runner = attachment.runner
    before, runner.stop_event = runner.stop_event, stop
    try:
        _serve(attachment, poll, once, stop, report, total)
    finally:
        runner.stop_event = before
    return total


def _serve(
    attachment: Attachment,
    poll: float,
    once: bool,
    stop: threading.Event,
    report: Callable[[DrainReport], None] | None,
    total: DrainReport,
) -> None:
    while not stop.is_set():
        try:
            done = attachment.drain()
        except Exception:
            if once:
                raise
            log.exception("sentinel's outbox: a drain failed; trying again in %g s", poll)
            stop.wait(poll)
            continue
        for name in ("done", "retried", "failed", "skipped"):
            setattr(total, name, getattr(total, name) + getattr(done, name))
        total.keys.extend(done.keys)
        if report is not None and (done.total or done.skipped):
            report(done)
        if once:
            break
        if not done.total:
            stop.wait(poll)
