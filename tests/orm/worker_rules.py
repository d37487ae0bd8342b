"""The rules a ``sentinel worker`` process loads in the tests
(``--rules tests.orm.worker_rules:detector``): the toy model on a detector of
its own, with the detached rule ``R`` of the tests."""

from __future__ import annotations

from sentinel import LocalEventDetector

from . import actions
from .models import make_model

detector = LocalEventDetector()
model = make_model(detector)
detector.rule("R", "Stock.e2", action=actions.record, coupling="detached")
