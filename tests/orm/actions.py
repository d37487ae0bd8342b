"""Detached rules' conditions and actions for the ORM tests.

They must be module-level functions of an importable module (the outbox worker
runs them, possibly in another process). They write to the ``effects`` table of
the test models (plain SQL, so they need no model class) in the detached
transaction's session, and note each attempt in ``ATTEMPTS`` (this process
only).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from sentinel.orm import detached_context

#: (rule, idempotency key, attempt, committed) of every attempt in this process.
ATTEMPTS: list[tuple[str, str, int, bool]] = []
#: How many attempts of ``flaky`` fail before one succeeds.
FAILURES = {"flaky": 2}


def _record(occ: Any, note: str = "") -> None:
    ctx = detached_context()
    ATTEMPTS.append((ctx.rule, ctx.idempotency_key, ctx.attempt, ctx.committed))
    value = occ.params.get("price", occ.params.get("amount")) if hasattr(occ, "params") else None
    ctx.session.execute(
        sa.text("INSERT INTO effects (rule, ikey, value, note) VALUES (:r, :k, :v, :n)"),
        {"r": ctx.rule, "k": ctx.idempotency_key, "v": value, "n": note},
    )


def record(occ: Any) -> None:
    """Write one ``effects`` row."""
    _record(occ)


def record_if_committed(occ: Any) -> None:
    """Write one ``effects`` row noting whether the trigger committed."""
    _record(occ, "committed" if detached_context().committed else "aborted")


def positive(occ: Any) -> bool:
    return bool(occ.params.get("price", 0) > 0)


def flaky(occ: Any) -> None:
    """Fails ``FAILURES["flaky"]`` times, then writes its row."""
    ctx = detached_context()
    ATTEMPTS.append((ctx.rule, ctx.idempotency_key, ctx.attempt, ctx.committed))
    _write_then_fail = ctx.attempt <= FAILURES["flaky"]
    ctx.session.execute(
        sa.text("INSERT INTO effects (rule, ikey, value, note) VALUES (:r, :k, :v, :n)"),
        {"r": ctx.rule, "k": ctx.idempotency_key, "v": ctx.attempt, "n": "flaky"},
    )
    if _write_then_fail:  # the row written above is rolled back with the attempt
        raise RuntimeError(f"attempt {ctx.attempt} fails")


def always_fails(occ: Any) -> None:
    ctx = detached_context()
    ATTEMPTS.append((ctx.rule, ctx.idempotency_key, ctx.attempt, ctx.committed))
    raise ValueError("the remote service is down")


def external(occ: Any) -> None:
    """An effect outside the database first (a line in the file named by
    ``SENTINEL_TEST_EXTERNAL``, with the idempotency key), then one in it; with
    ``SENTINEL_TEST_CRASH=action`` the first attempt kills its own process in
    between (SIGKILL: nothing runs after it)."""
    ctx = detached_context()
    path = Path(os.environ["SENTINEL_TEST_EXTERNAL"])
    with path.open("a") as f:
        f.write(f"{ctx.idempotency_key} {ctx.attempt}\n")
    if os.environ.get("SENTINEL_TEST_CRASH") == "action" and ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    _record(occ, "external")


class CustomInterrupt(BaseException):
    """A BaseException of the application's own (as frameworks define them)."""


#: What ``raise_base`` raises (set by the test).
RAISE: dict[str, type[BaseException]] = {"exc": SystemExit}


def raise_base(occ: Any) -> None:
    """Raises ``RAISE["exc"]``: a BaseException that is not an Exception."""
    ctx = detached_context()
    ATTEMPTS.append((ctx.rule, ctx.idempotency_key, ctx.attempt, ctx.committed))
    raise RAISE["exc"]("raised by the action")


def raise_base_in_condition(occ: Any) -> bool:
    ctx = detached_context()
    ATTEMPTS.append((ctx.rule, ctx.idempotency_key, ctx.attempt, ctx.committed))
    raise RAISE["exc"]("raised by the condition")


#: Test-provided bodies for ``hook`` (``HOOKS["hook"](occ)``).
HOOKS: dict[str, Any] = {}


def hook(occ: Any) -> None:
    """Runs ``HOOKS["hook"](occ)`` (set by the test), then writes its row."""
    HOOKS["hook"](occ)
    _record(occ, "hook")


def note_attempt(occ: Any) -> None:
    """Notes the attempt only (no database effect)."""
    ctx = detached_context()
    ATTEMPTS.append((ctx.rule, ctx.idempotency_key, ctx.attempt, ctx.committed))


def slow(occ: Any) -> None:
    """Notes its start and end in the file ``SENTINEL_TEST_RUNLOG`` (with the
    process and thread running it) around a sleep of ``SENTINEL_TEST_SLEEP``
    seconds; then writes its row, or fails for an odd price."""
    import threading
    import time

    ctx = detached_context()
    path = Path(os.environ["SENTINEL_TEST_RUNLOG"])
    who = f"{os.getpid()}/{threading.get_ident()}"

    def note(what: str) -> None:
        with path.open("a") as f:  # one short append: atomic between processes
            f.write(f"{what} {ctx.idempotency_key} {who} {ctx.attempt}\n")

    note("start")
    time.sleep(float(os.environ["SENTINEL_TEST_SLEEP"]))
    note("end")
    if int(occ.params["price"]) % 2:
        raise RuntimeError("odd prices always fail")
    _record(occ, "slow")
