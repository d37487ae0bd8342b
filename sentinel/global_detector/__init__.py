"""The global event detector: rules over every process's committed events.

Each application process has its own (local) event detector; a rule whose
event combines occurrences signalled in different processes needs the global
detector (Snoop's architecture, section 3.3). sentinel builds it on the event
log, written in every transaction: :class:`GlobalDetector` reads the committed
occurrences of all processes in commit order (:mod:`.order`), feeds a detector
holding the rules (:mod:`.detect`), and runs them detached through the outbox,
with a durable cursor and a lease (:mod:`.cursor`). ``sentinel global`` runs
it; ``docs/global.md`` describes when to use it and how to operate it.
"""

from __future__ import annotations

from sentinel.global_detector.detect import CommitFeeder, Detection, global_t_occ
from sentinel.global_detector.order import CommitReader, LogRow
from sentinel.global_detector.replay import replay_committed
from sentinel.global_detector.service import GlobalDetector, StepReport

__all__ = [
    "CommitFeeder",
    "CommitReader",
    "Detection",
    "GlobalDetector",
    "LogRow",
    "StepReport",
    "global_t_occ",
    "replay_committed",
]
