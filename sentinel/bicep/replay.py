"""Replaying a BiCEPL program over the event log.

A processor working with a session factory attached with sentinel logs, in each
tick's transaction, every announcement it read (event ``<program>:<Class>``),
the tick itself (``<program>@tick``) and every action it published
(``<program>.<action>``). :func:`replay` reads the announcements and ticks of
the committed transactions back, feeds them to a fresh processor of the same
program on an in-memory SQLite database, tick by tick, and returns the actions
it fires: the same as the live run's (:func:`logged_actions`), because a tick's
outcome depends only on the announcements it reads and the state before it.

The work is one plain function over ordered groups of announcements,
:func:`replay_groups`, so any engine that can deliver the log in order can run it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.pool import StaticPool

from sentinel.bicep.actions import ActionCall, action_event
from sentinel.bicep.compiler import CompiledProgram, compile_program
from sentinel.bicep.processor import Processor, announcement_event, tick_event
from sentinel.errors import ReplayError
from sentinel.occurrence import Occurrence

__all__ = ["Group", "log_groups", "logged_actions", "replay", "replay_groups"]

#: One tick of the live run: (tick, [(class name, announcement row)]).
Group = tuple[int, list[tuple[str, dict[str, Any]]]]


@dataclass
class ReplayResult:
    """What a replay found: the actions, in order, and what it read."""

    actions: list[ActionCall]
    ticks: int
    announcements: int


def log_groups(occurrences: Iterable[Occurrence], program: CompiledProgram) -> list[Group]:
    """Group logged occurrences of ``program`` by the tick that read them, in
    tick order. Occurrences of transactions without a tick event (nothing the
    processor committed) are ignored."""
    names = {announcement_event(program.name, c.name): c.name for c in program if not c.complex}
    tick_name = tick_event(program.name)
    by_scope: dict[Any, list[Occurrence]] = {}
    for occ in occurrences:
        if occ.event in names or occ.event == tick_name:
            by_scope.setdefault(occ.scope, []).append(occ)
    groups: list[Group] = []
    for occs in by_scope.values():
        occs.sort(key=lambda o: o.t_occ)
        ticks = [o for o in occs if o.event == tick_name]
        if not ticks:
            continue
        rows = []
        for o in occs:
            if o.event == tick_name:
                continue
            p = dict(o.params)
            row: dict[str, Any] = {
                "occ": p.pop("occ_time"),
                "det": p.pop("det_time"),
                "revoke": bool(p.pop("revoked", False)),
            }
            row.update(p)
            rows.append((names[o.event], row))
        groups.append((int(ticks[0].params["tick"]), rows))
    groups.sort(key=lambda g: g[0])
    return groups


def replay_groups(
    program: CompiledProgram | str,
    groups: Iterable[Group],
    *,
    name: str | None = None,
    chronon: int | str = "15m",
    archive: bool = False,
    purge: bool = True,
) -> Iterator[tuple[int, list[ActionCall]]]:
    """Run ``program`` over ``groups`` (in tick order) on a fresh in-memory
    SQLite database; yield each processed tick and the actions it fired."""
    from sentinel.log import migrate
    from sentinel.rules import LocalEventDetector

    engine = sa.create_engine("sqlite://", poolclass=StaticPool)
    try:
        migrate.upgrade(engine)
        text = program.text if isinstance(program, CompiledProgram) else program
        if name is None and isinstance(program, CompiledProgram):
            name = program.name
        proc = Processor(
            text,
            engine,
            name=name,
            chronon=chronon,
            archive=archive,
            purge=purge,
            detector=LocalEventDetector(),
            require_actions=False,
            signal_events=False,
        )
        proc.install()
        c = proc.chronon
        for tick, rows in groups:
            # Everything before this tick first, as the live run had done before
            # these announcements reached it; then they are read at this tick.
            for r in proc.run_until(tick - c):
                yield int(r.tick.timestamp()), r.actions
            by_class: dict[str, list[dict[str, Any]]] = {}
            for cls, row in rows:
                by_class.setdefault(cls, []).append(row)
            with engine.begin() as conn:
                for cls, batch in by_class.items():
                    proc.announce_many(cls, batch, connection=conn)
            for r in proc.run_until(tick):
                yield int(r.tick.timestamp()), r.actions
    finally:
        engine.dispose()


def _reader(source: str | Engine, schema: str | None, prefix: str) -> Any:
    from sentinel.log import LogReader

    return LogReader(source, schema=schema, prefix=prefix)


def replay(
    source: str | Engine,
    program: CompiledProgram | str,
    *,
    name: str | None = None,
    chronon: int | str = "15m",
    archive: bool = False,
    purge: bool = True,
    schema: str | None = None,
    prefix: str = "sentinel_",
) -> ReplayResult:
    """Replay ``program`` over the event log at ``source`` (a URL or Engine).

    ``name`` and ``chronon`` must be those of the live run (the log's events
    are named after the program). Raises :class:`~sentinel.errors.ReplayError`
    when the log holds no tick of the program.
    """
    compiled = (
        program
        if isinstance(program, CompiledProgram)
        else compile_program(program, name=name or "bicep")
    )
    if name is not None and name != compiled.name:
        compiled = compile_program(compiled.text, name=name)
    events = [announcement_event(compiled.name, c.name) for c in compiled if not c.complex]
    events.append(tick_event(compiled.name))
    with _reader(source, schema, prefix) as reader:
        occs = [
            r.occurrence for r in reader.occurrences(events=events, outcomes={"committed", None})
        ]
    groups = log_groups(occs, compiled)
    if not groups:
        raise ReplayError(
            f"the event log holds no tick of program {compiled.name!r} (was the processor "
            "running with a session factory attached with sentinel.attach?)"
        )
    actions: list[ActionCall] = []
    ticks = 0
    for _, fired in replay_groups(compiled, groups, chronon=chronon, archive=archive, purge=purge):
        ticks += 1
        actions.extend(fired)
    return ReplayResult(actions, ticks, sum(len(rows) for _, rows in groups))


def logged_actions(
    source: str | Engine,
    program: CompiledProgram,
    *,
    schema: str | None = None,
    prefix: str = "sentinel_",
) -> list[ActionCall]:
    """The actions the live run published, as the event log recorded them, in
    the order they were signalled."""
    events = [action_event(program.name, a.name) for a in program.actions.values()]
    with _reader(source, schema, prefix) as reader:
        occs = [r.occurrence for r in reader.occurrences(events=events, order="t_occ")]
    return [ActionCall.from_occurrence(o) for o in occs]
