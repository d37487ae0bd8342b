"""What ``make demo`` runs: the STOCK program live, then its log replayed on Spark.

1. Appendix B's STOCK program runs as a SQLAlchemy application on a SQLite file
   with sentinel attached: R2 fires during the transaction, R1 at commit, and the
   event log and rule-firing log are written in the same commit.
2. The same rules replay that event log after the fact on Spark (``local[2]``,
   reading the log through SQLAlchemy, no JDBC driver) and the demo checks that
   replay finds exactly the detections the live run made.

Run with ``python -m examples.demo`` (``--no-spark`` replays with the local
engine only).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from examples.stock import program
from sentinel.log import LogReader

RULES = "examples.stock.program:replay_rules"
Detection = tuple[str, str, int, tuple[tuple[str, int], ...]]


def online_detections(url: str) -> set[Detection]:
    """The detections the live run recorded in the rule-firing log."""
    with LogReader(url) as log:
        return {
            (f.rule, f.scope, f.t_occ, tuple((s, t) for s, t in f.constituents))
            for f in log.firings()
        }


def replayed(rows: list[dict[str, Any]]) -> set[Detection]:
    return {
        (
            r["rule"],
            r["scope"],
            r["t_occ"],
            tuple(zip(r["constituent_scopes"], r["constituent_t_occs"], strict=True)),
        )
        for r in rows
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-spark", action="store_true", help="replay locally only")
    args = parser.parse_args()

    print(INTRO)
    with tempfile.TemporaryDirectory(prefix="sentinel-demo-") as tmp:
        database = Path(tmp) / "stock.db"
        program.main(database=database)
        url = f"sqlite:///{database}"
        live = online_detections(url)

        import sentinel.replay
        from sentinel.errors import ReplayError
        from sentinel.replay.spark import session

        print("\nReplaying the event log with the same rules (actions off):")
        local = sentinel.replay(url, RULES, engine="local")
        _report("local engine", local, live)
        if args.no_spark:
            return
        if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
            print("  Spark skipped: it needs Java 17 (`java` on the PATH, or JAVA_HOME)")
            return
        print("  starting Spark (local[2]; its own log goes to a file) ...", flush=True)
        try:
            spark = session("local[2]")
        except ReplayError as err:
            raise SystemExit(f"sentinel demo: {err}") from None
        try:
            on_spark = sentinel.replay(url, RULES, engine="spark", spark=spark)
            _report("Spark local[2]", on_spark, live)
        finally:
            spark.stop()


INTRO = """\
sentinel demo: a stock-trading example from the Sentinel report (Chakravarthy et
al., 1995, Appendix B), run as a SQLAlchemy application with sentinel attached.
Its rules react to method calls inside the transaction; every event goes to the
event log, in the same commit as the data. Then the same rules replay that log
after the fact, locally and on Spark, and must find exactly what the live run
found.
"""


def _report(engine: str, result: Any, live: set[Detection]) -> None:
    found = replayed(result.rows())
    verdict = "match the live run" if found == live else "DIFFER from the live run"
    counts = Counter(rule for rule, *_ in found)
    per_rule = ", ".join(f"{rule}: {n}" for rule, n in sorted(counts.items()))
    print(
        f"  {engine}: {result.events} events read, {len(found)} detections ({per_rule}), "
        f"which {verdict}"
    )
    if found != live:
        raise SystemExit(f"replay on the {engine} found {sorted(found ^ live)} differently")


if __name__ == "__main__":
    main()
