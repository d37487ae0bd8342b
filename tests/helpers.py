"""Shared test helpers: histories in the paper's notation, detections as labels."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sentinel import CompositeOccurrence, Context, LocalEventDetector


class Run:
    """Signals a history on a fresh detector and records detections per context.

    Occurrences get the paper's labels: the i-th occurrence of ``E2`` is ``e2^i``.
    """

    def __init__(self, events: Iterable[str] = ("E1", "E2", "E3", "E4")) -> None:
        self.det = LocalEventDetector()
        for name in events:
            self.det.explicit(name)
        self.labels: dict[int, str] = {}
        self._counts: dict[str, int] = {}
        self.detections: dict[str, list[Any]] = {}

    def watch(self, name: str, expression: Any, context: Context | str, **kw: Any) -> list[Any]:
        out: list[Any] = []
        self.detections[name] = out
        self.det.rule(name, expression, action=out.append, context=context, **kw)
        return out

    def signal(self, *names: str, **params: Any) -> None:
        for name in names:
            n = self._counts[name] = self._counts.get(name, 0) + 1
            # Rules run before signal() returns: label the occurrence beforehand.
            self.labels[self.det.clock + 1] = f"{name.lower()}^{n}"
            occ = self.det.signal(name, **params)
            assert occ is not None

    def label(self, occ: Any) -> str:
        """``{e1^2, e2^1, e3^1}``: the constituents in t_occ order."""
        return "{" + ", ".join(self.labels[c.t_occ] for c in occ.constituents) + "}"

    def labelled(self, name: str) -> list[str]:
        return [self.label(o) for o in self.detections[name]]


def tree(occ: Any) -> Any:
    """A detection's structure: primitive t_occ at the leaves."""
    if len(occ) == 8:
        return occ.t_occ
    assert isinstance(occ, CompositeOccurrence)
    return (str(occ.expression), tuple(tree(p) for p in occ.parts))


def signal_all(det: LocalEventDetector, history: Sequence[str]) -> None:
    for name in history:
        det.signal(name)
