"""Rules whose names hold rich markup, for ``sentinel replay``'s table."""

from __future__ import annotations

from typing import Any

from sentinel import LocalEventDetector


def noted(occ: Any) -> None:
    pass


detector = LocalEventDetector()
detector.explicit("order")
detector.explicit("payment")
detector.rule("alert[high]", "order ; payment", action=noted)
detector.rule("[/x]paid", "order ; payment", action=noted)
