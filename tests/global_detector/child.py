"""A process of the application (``python -m tests.global_detector.child URL
INDEX TXNS SEED``): commits, rolls back and uses savepoints in random
transactions that signal orders and payments of a few customers."""

from __future__ import annotations

import random
import sys
import time

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sentinel import LocalEventDetector, scope_of
from sentinel.orm import attach

from .rules import events


def main(url: str, index: int, txns: int, seed: int) -> None:
    rnd = random.Random(seed * 1000 + index)
    det = LocalEventDetector()
    events(det)
    engine = sa.create_engine(url)
    Session = sessionmaker(engine)
    attach(Session, detector=det, workers=0, commit_order=True)
    for i in range(txns):
        s = Session()
        try:
            s.begin()
            s.execute(sa.text("SELECT 1"))
            with det.use_scope(scope_of(s)):
                for _ in range(rnd.randint(1, 3)):
                    name = rnd.choice(["order", "payment"])
                    det.signal(name, customer=rnd.randint(1, 3), proc=index, n=i)
                if rnd.random() < 0.25:
                    sp = s.begin_nested()
                    det.signal(
                        rnd.choice(["order", "payment"]),
                        customer=rnd.randint(1, 3),
                        proc=index,
                        n=-i,
                    )
                    if rnd.random() < 0.5:
                        sp.rollback()
                    else:
                        sp.commit()
            if rnd.random() < 0.2:
                s.rollback()
            else:
                s.commit()
        finally:
            s.close()
        time.sleep(rnd.random() * 0.005)
    engine.dispose()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
