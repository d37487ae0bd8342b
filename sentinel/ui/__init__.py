"""``sentinel ui``: a read-only web view of a log (the ``ui`` extra).

Pages for the rules and their event graph, the rule firings and why each fired,
the outbox and the global detectors' cursors, and the event log by transaction
(``docs/ui.md``). :func:`~sentinel.ui.app.create_app` builds the Starlette
application; :mod:`sentinel.ui.queries` holds its bounded reads of the log,
:mod:`sentinel.ui.graph` lays the event graph out as SVG.

This package sits just below the command line: it imports the log, the rules
and the detector's graph, never the other way round.
"""

from sentinel.ui.app import create_app

__all__ = ["create_app"]
