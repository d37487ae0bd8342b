"""The examples run as the guide says (``python -m examples.stock``,
``python -m examples.readiness``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from examples.readiness import run as readiness
from examples.stock import Firing, main, run


def test_stock_r2_during_the_transaction_and_r1_at_commit(tmp_path: Path) -> None:
    log: list[Any] = []
    assert run(database=tmp_path / "stock.db", log=log) == [
        Firing("R2", "during the transaction", (("DEC", 100.0), ("MS", 200), ("IBM", 75.95))),
        Firing("R1", "at commit", (("IBM", 115.0), ("DEC", 100.0), ("MS", 200))),
    ]
    rows = [r for r in log if hasattr(r, "occurrence")]
    assert {r.outcome for r in rows} == {"committed"}
    events = [r.occurrence.event for r in rows]
    assert events[0] == "txn:begin" and events[-2:] == ["txn:pre_commit", "txn:commit"]
    assert events.count("Stock:update") == 3
    firings = [(f.rule, f.coupling) for f in log if not hasattr(f, "occurrence")]
    assert firings == [("R2", "immediate"), ("R1", "deferred")]


def test_stock_main_prints_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    main()
    out = capsys.readouterr().out
    assert "R2 fired during the transaction: {DEC 100, MS 200, IBM 75.95}" in out
    assert "R1 fired at commit: {IBM 115, DEC 100, MS 200}" in out
    assert "txn:pre_commit" in out and "Stock.sell_stock:end" in out


def test_readiness(tmp_path: Path) -> None:
    said: list[str] = []
    result = readiness(said.append, database=tmp_path / "readiness.db")
    assert result["alerts"] == ["Relief: 1 unit(s), needs 2"]
    assert result["notices"] == ["to command: Relief: 1 unit(s), needs 2"]
    # the rejected reports changed nothing
    assert result["ratings"] == {
        "1st Armored": 1, "82nd Airborne": 2, "10th Mountain": 1, "3rd Infantry": 3,
    }  # fmt: skip
    assert any("rejected by rating_in_range" in s for s in said)
    assert any("rejected by assigned_units_ready" in s for s in said)
    assert result["firings"][("notify_command", "done")] == 1
    assert result["events"][("Unit.report_readiness:begin", "aborted")] == 2
