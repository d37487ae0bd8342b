"""Appendix B of the Sentinel/Snoop report: the STOCK program, on plain objects.

Run with ``python -m examples.stock`` (or ``make demo``). See ``program.py``.
"""

from examples.stock.program import Firing, Stock, main, run

__all__ = ["Firing", "Stock", "main", "run"]
