"""BiCEPL: bitemporal event classes as SQL on the application's database.

A BiCEPL program (Burgstaller 2014, Huemer 2014) declares *subscribed* event
classes (announced by the application, mutable or immutable, with keys and a
lifespan) and *complex* event classes (SQL queries over other classes with
``OCCURRING AT``), each with condition-action statements over timing primitives
(``ON CHANGE AND new.occTime > old.occTime DO informOwner(...)``). The
:class:`Processor` keeps each class in tables of the application's database and
processes the program at clock ticks; fired actions become sentinel events, so
rules can combine them, and registered Python callables run with sentinel's
coupling modes. See ``docs/bicepl.md``.

Names are imported on first use (the compiler needs lark and sqlglot, the
processor SQLAlchemy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "ActionCall",
    "CompiledProgram",
    "Processor",
    "Rejected",
    "TickResult",
    "compile_program",
]

if TYPE_CHECKING:
    from sentinel.bicep.actions import ActionCall
    from sentinel.bicep.compiler import CompiledProgram, compile_program
    from sentinel.bicep.pipeline import Rejected
    from sentinel.bicep.processor import Processor, TickResult

_WHERE = {
    "ActionCall": "sentinel.bicep.actions",
    "CompiledProgram": "sentinel.bicep.compiler",
    "compile_program": "sentinel.bicep.compiler",
    "Rejected": "sentinel.bicep.pipeline",
    "Processor": "sentinel.bicep.processor",
    "TickResult": "sentinel.bicep.processor",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'sentinel.bicep' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
