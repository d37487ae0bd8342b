"""The military readiness application of the Sentinel report (4.5): units,
readiness ratings, plans; rules that disqualify bad updates at once and alert at
commit. Run with ``python -m examples.readiness`` (see ``program.py``)."""

from examples.readiness.program import main, run

__all__ = ["main", "run"]
