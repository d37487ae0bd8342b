"""An application using sentinel type-checks under ``mypy --strict`` with no
ignores: the package is typed (``py.typed``) and its decorators keep the
signatures they decorate."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import sentinel

pytestmark = pytest.mark.slow

APP = '''\
"""A small bank: a reactive mapped class, rules (one as a decorator), attach."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

import sentinel
from sentinel import (
    Attachment, CompositeOccurrence, LocalEventDetector, Occurrence, Reactive, Rule, event, on,
    within,
)

det = LocalEventDetector()


class Base(Reactive, DeclarativeBase, detector=det):
    pass


class Account(Base):
    __tablename__ = "account"
    id: Mapped[int] = mapped_column(primary_key=True)
    balance: Mapped[int] = mapped_column(default=0)

    @event
    def deposit(self, amount: int) -> int:
        self.balance += amount
        return self.balance

    @event(begin="withdrawing", end="withdrew")
    def withdraw(self, amount: int, *, note: str = "") -> int:
        self.balance -= amount
        return self.balance

    @event("both")
    @classmethod
    def open(cls, owner: str) -> Account:
        return cls()

    @event(end="ticked")
    @staticmethod
    def tick(n: int) -> str:
        return str(n)


@det.rule("big_deposit", Account.deposit.end, lambda occ: occ.params["amount"] > 100)
def big_deposit(occ: Occurrence) -> None:
    print("big deposit of", occ.params["amount"])


@sentinel.rule("quick", within(Account.deposit.end, Account.withdraw.begin, "00:00:10"),
               detector=det, context="chronicle")
def quick(occ: CompositeOccurrence) -> None:
    print(occ.values("amount"))


def banking(session: Session) -> int:
    account = session.get(Account, 1)
    assert account is not None
    balance: int = account.deposit(5)
    balance = account.withdraw(3, note="rent")
    fresh: Account = Account.open("ann")
    label: str = Account.tick(balance)
    return balance + fresh.balance + len(label)


Sessions = sessionmaker(sa.create_engine("sqlite://"))
attachment: Attachment = sentinel.attach(Sessions, detector=det)
rules: list[Rule] = [big_deposit, quick]
level_events = [Account.open.begin, Account.tick.end, on(Account).deposit.end]
'''

# The same application with mistakes a type checker must catch: proof that the
# signatures above are checked, not waved through as Any.
MISTAKES = """\
from app import Account, det

account = Account()
a: str = account.deposit(5)
account.deposit("five")
account.withdraw(3, memo="rent")
Account.open(3)
b: int = Account.tick(1)
reveal_type(Account.deposit.end)
reveal_type(det.rule("r", Account.deposit.end))
"""


def mypy(tmp_path: Path, *files: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--config-file=",
            f"--cache-dir={tmp_path / '.mypy_cache'}",
            *files,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_package_is_marked_typed() -> None:
    assert (Path(sentinel.__file__).parent / "py.typed").is_file()


def test_an_application_passes_mypy_strict_and_its_mistakes_do_not(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "mistakes.py").write_text(MISTAKES)
    done = mypy(tmp_path, "app.py", "mistakes.py")
    lines = done.stdout.splitlines()
    assert not [line for line in lines if line.startswith("app.py")], done.stdout
    said: dict[int, str] = {}
    for m in map(re.compile(r"mistakes\.py:(\d+): (?:error|note): (.*)").match, lines):
        if m:
            said[int(m.group(1))] = said.get(int(m.group(1)), "") + m.group(2)
    want = {
        4: 'expression has type "int", variable has type "str"',  # deposit returns int
        5: 'incompatible type "str"; expected "int"',  # amount: int
        6: 'Unexpected keyword argument "memo"',  # withdraw(amount, *, note)
        7: 'incompatible type "int"; expected "str"',  # the classmethod's owner: str
        8: 'expression has type "str", variable has type "int"',  # the staticmethod's str
        9: 'Revealed type is "sentinel.algebra.expressions.Primitive"',
        10: "-> sentinel.rules.rule.Rule",  # det.rule without action: a decorator
    }
    missing = {n: text for n, text in want.items() if text not in said.get(n, "")}
    assert not missing, done.stdout
