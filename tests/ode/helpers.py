"""Running Ode events on a detector over a history written as words."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sentinel import LocalEventDetector, ode


class History:
    """A detector with explicit events ``names``; ``watch`` adds an Ode rule,
    ``run`` signals a history (a list of names, or ``(name, params)`` pairs)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.det = LocalEventDetector()
        self.ev = {n: self.det.explicit(n) for n in names}
        self.found: dict[str, list[Any]] = {}

    def watch(self, name: str, expression: Any, **kw: Any) -> list[Any]:
        out: list[Any] = []
        self.found[name] = out
        self.det.rule(name, expression, action=out.append, **kw)
        return out

    def run(self, history: Sequence[str | tuple[str, dict[str, Any]]]) -> None:
        for item in history:
            if isinstance(item, str):
                self.det.signal(item)
            else:
                self.det.signal(item[0], **item[1])

    def at(self, name: str) -> list[int]:
        """The positions (1-based, in the history) where ``name`` was detected."""
        return [d.t_occ for d in self.found[name]]


def detect(text: str, history: str, *, over: Iterable[str] = ()) -> list[int]:
    """Positions (1-based) where the Ode text is detected on the history of
    space-separated event names (the universe: the names in the history, plus
    ``over``)."""
    words = history.split()
    names = sorted({*words, *over})
    h = History(names)
    event = ode.event(text, over=[h.ev[n] for n in names])
    h.watch("e", event)
    h.run(words)
    return h.at("e")
