"""The global detector's firings log the partition key too (issue 34): its
rule ``(order ; payment) by customer`` runs in the service's action runner,
whose firing records go through the same writer as an application's."""

from __future__ import annotations

import sqlalchemy as sa

from sentinel.global_detector import GlobalDetector
from sentinel.log import LogReader, LogWriter, migrate
from sentinel.occurrence import Occurrence
from sentinel.orm import global_actions

from . import rules


def test_a_global_rules_firing_logs_its_key(engine: sa.Engine) -> None:
    migrate.upgrade(engine)
    rules.make_effects(engine)
    writer = LogWriter(commit_order=True)
    service = GlobalDetector(rules.detector, engine, lease=10, actions=global_actions)
    try:
        service.step()  # takes the lease
        for t, (event, customer) in enumerate(
            [("order", 1), ("order", "7"), ("payment", "7"), ("payment", 1)], start=1
        ):
            with engine.begin() as conn:
                writer.write(
                    conn,
                    [
                        Occurrence(
                            event, t, 1000.0 + t, scope=f"t{t}", params={"customer": customer}
                        )
                    ],
                )
        assert service.step().detections == 2
    finally:
        service.close()
    with LogReader(engine) as reader:
        got = sorted((f.rule, f.status, f.key) for f in reader.firings())
        assert got == [("paid", "done", '["7"]'), ("paid", "done", "[1]")]
        assert [f.key for f in reader.firings(keys=['"7"'])] == ['["7"]']
