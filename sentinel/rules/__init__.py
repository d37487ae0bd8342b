"""ECA rules on the detector: rules, coupling modes, trigger modes, scheduling."""

from sentinel.rules.coupling import Coupling
from sentinel.rules.local import DetachedExecutor, LocalEventDetector
from sentinel.rules.rule import Rule, TriggerMode
from sentinel.rules.scheduler import Scheduler

__all__ = ["Coupling", "DetachedExecutor", "LocalEventDetector", "Rule", "Scheduler", "TriggerMode"]
