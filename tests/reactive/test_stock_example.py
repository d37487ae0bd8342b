"""examples/stock: Appendix B with decorated methods (seeds/000, Appendix B)."""

from __future__ import annotations

import pytest

from examples.stock import Firing, Stock, main, run
from sentinel import LocalEventDetector
from sentinel.testing import RuleRecorder


def test_r2_during_the_transaction_then_r1_at_commit() -> None:
    assert run() == [
        Firing("R2", "during the transaction", (("DEC", 100.0), ("MS", 200), ("IBM", 75.95))),
        Firing("R1", "at commit", (("IBM", 115.0), ("DEC", 100.0), ("MS", 200))),
    ]


def test_runs_again_on_a_fresh_detector(
    sentinel_detector: LocalEventDetector, sentinel_recorder: RuleRecorder
) -> None:
    firings = run(sentinel_detector)
    assert [f.rule for f in firings] == ["R2", "R1"]
    assert set(sentinel_detector.rules) == {"R1", "R2"}
    # What the rules' actions reported is what ran: R2 immediate, R1 deferred.
    assert [(r.rule, r.coupling, r.status) for r in sentinel_recorder] == [
        ("R2", "immediate", "fired"),
        ("R1", "deferred", "fired"),
    ]
    for firing, occ in zip(firings, sentinel_recorder.fired(), strict=True):
        seen = tuple(c.params.get("price", c.params.get("qty")) for c in occ.constituents)
        assert seen == tuple(value for _, value in firing.constituents)
    assert [f.rule for f in run()] == ["R2", "R1"]


def test_get_price_is_not_an_event_generator() -> None:
    assert "get_price" not in dir(__import__("sentinel").on(Stock))


def test_main_prints_the_firings(capsys: pytest.CaptureFixture[str]) -> None:
    main()
    out = capsys.readouterr().out
    assert "R2 fired during the transaction: {DEC 100, MS 200, IBM 75.95}" in out
    assert "R1 fired at commit: {IBM 115, DEC 100, MS 200}" in out
    assert out.index("R2 fired") < out.index("R1 fired")
