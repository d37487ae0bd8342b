"""Sentinel in a SQLAlchemy application: transactions, coupling modes, database
events, the event log and the detached-rule outbox.

::

    import sentinel
    from sqlalchemy.orm import sessionmaker

    Session = sessionmaker(engine)
    attachment = sentinel.attach(Session, detector=det)   # the log tables must exist
    with Session.begin() as session:
        stock = session.get(Stock, 1)
        stock.set_price(75.95)      # immediate rules run here
    # deferred rules ran before the commit; the log was written in it; detached
    # rules run now, each in its own transaction

Modules: :mod:`.attach` (attaching, the session events), :mod:`.db_events`
(insert/update/delete events), :mod:`.logsink` (when the log is written),
:mod:`.outbox` and :mod:`.worker` (detached rules; the outbox's store is
:mod:`sentinel.log.outbox`), :mod:`.state` (per-transaction
state). Depends on the rules, reactive and log layers; nothing below imports it.
See ``docs/orm.md``.
"""

from sentinel.orm.attach import Attachment, attach, attachments, detach, global_actions
from sentinel.orm.db_events import KINDS, DBEvents, db_events
from sentinel.orm.state import scope_of, session_of
from sentinel.orm.worker import DetachedContext, DrainReport, detached_context

__all__ = [
    "KINDS",
    "Attachment",
    "DBEvents",
    "DetachedContext",
    "DrainReport",
    "attach",
    "attachments",
    "db_events",
    "detach",
    "detached_context",
    "global_actions",
    "scope_of",
    "session_of",
]
