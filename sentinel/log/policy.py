"""Which event parameters the log leaves out or redacts.

Some parameters must never reach the log (a password passed to ``set_password``),
others may be recorded only as "there was a value" (a card number). A
:class:`LogPolicy` says so per event, by event name or glob pattern, and the
writer applies it to each occurrence before anything is sent to the database.
Detection is unaffected: rules still see every parameter; only the log's copy
changes (so a replay of that log sees the redacted values).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from types import MappingProxyType
from typing import Any, Final

from sentinel.errors import LogConfigError
from sentinel.params import to_json

__all__ = ["REDACTED", "TOO_LARGE", "LogPolicy"]

#: What a redacted parameter's value becomes in the log.
REDACTED: Final = "<redacted>"
#: What a parameter's value becomes in the log when the log cannot hold it: an
#: occurrence whose parameters together are over ``sentinel.params.MAX_PARAMS``
#: (its largest values), or one the database refused on its own (every value).
TOO_LARGE: Final = "<too large for the log>"

_GLOB = frozenset("*?[")
_ACTIONS = ("exclude", "redact")

# Compiled plan for one event name: (excluded names, excluded globs, redacted names,
# redacted globs, paths into mappings as (action, parts)), or None when the policy
# leaves the event alone.
_Plan = (
    tuple[
        frozenset[str],
        tuple[str, ...],
        frozenset[str],
        tuple[str, ...],
        tuple[tuple[str, tuple[str, ...]], ...],
    ]
    | None
)


class LogPolicy:
    """Per-event exclusion and redaction of parameters in the event log.

    ``rules`` maps an event name or glob pattern (``fnmatch`` syntax, case
    sensitive: ``"User.*"``, ``"*:begin"``, ``"*"``) to ``{"exclude": [...],
    "redact": [...]}``; parameter names may be globs too. When several patterns
    match an event, their lists are combined; a parameter both excluded and
    redacted is excluded. Redacted values are replaced by ``marker``. A dotted
    name reaches into mapping parameters: ``"new.pw"`` is the ``pw`` entry of the
    ``new`` parameter (the column values a database event carries), each part
    a name or a glob; a plain name matches the whole parameter.

    The plan for each event name is computed once and cached, so an event the
    policy does not touch costs one dict lookup per occurrence. Safe to share
    between threads; changing the policy (:meth:`exclude`, :meth:`redact`) while
    writers use it is allowed and takes effect for later writes.

    >>> policy = LogPolicy({"User.set_password:*": {"exclude": ["password"]}})
    >>> policy.redact("Card.*", "number")  # doctest: +ELLIPSIS
    <LogPolicy ...>
    >>> dict(policy.apply("Card.charge:begin", {"number": "4111", "amount": 5}))
    {'number': '<redacted>', 'amount': 5}
    >>> dict(policy.apply("User.set_password:begin", {"user": 1, "password": "x"}))
    {'user': 1}
    """

    def __init__(
        self,
        rules: Mapping[str, Mapping[str, Iterable[str]]] | None = None,
        *,
        marker: Any = REDACTED,
    ) -> None:
        try:
            to_json(marker)
        except TypeError:
            raise LogConfigError(
                f"the redaction marker must be a loggable value, not {marker!r}"
            ) from None
        self.marker = marker
        self._rules: dict[str, dict[str, set[str]]] = {}
        self._plans: dict[str, _Plan] = {}
        self._lock = threading.Lock()
        for pattern, spec in (rules or {}).items():
            if not isinstance(spec, Mapping):
                raise LogConfigError(
                    f"log policy for {pattern!r} must be a mapping like "
                    f"{{'exclude': [...], 'redact': [...]}}, not {type(spec).__name__}"
                )
            unknown = set(spec) - set(_ACTIONS)
            if unknown:
                raise LogConfigError(
                    f"log policy for {pattern!r} has unknown key(s) {sorted(unknown)}; "
                    "expected 'exclude' and/or 'redact'"
                )
            for action in _ACTIONS:
                names = spec.get(action, ())
                if isinstance(names, str):
                    names = (names,)
                self._add(action, pattern, names)

    def exclude(self, event: str, *params: str) -> LogPolicy:
        """Leave ``params`` of events matching ``event`` out of the log; returns
        the policy (for chaining)."""
        self._add("exclude", event, params)
        return self

    def redact(self, event: str, *params: str) -> LogPolicy:
        """Log ``params`` of events matching ``event`` as the marker; returns the
        policy (for chaining)."""
        self._add("redact", event, params)
        return self

    def _add(self, action: str, pattern: str, params: Iterable[str]) -> None:
        if not isinstance(pattern, str) or not pattern:
            raise LogConfigError(f"an event pattern must be a non-empty string, not {pattern!r}")
        names = list(params)
        for p in names:
            if not isinstance(p, str) or not p:
                raise LogConfigError(
                    f"parameter names for {pattern!r} must be non-empty strings, not {p!r}"
                )
        with self._lock:
            entry = self._rules.setdefault(pattern, {"exclude": set(), "redact": set()})
            entry[action].update(names)
            self._plans = {}

    def __bool__(self) -> bool:
        return any(e["exclude"] or e["redact"] for e in self._rules.values())

    def _plan(self, event: str) -> _Plan:
        excluded: set[str] = set()
        redacted: set[str] = set()
        for pattern, entry in self._rules.items():
            if pattern == event or fnmatchcase(event, pattern):
                excluded |= entry["exclude"]
                redacted |= entry["redact"]
        if not excluded and not redacted:
            return None
        paths = tuple(
            sorted(
                (action, tuple(p.split(".")))
                for action, names in (("exclude", excluded), ("redact", redacted))
                for p in names
                if "." in p
            )
        )
        excluded = {p for p in excluded if "." not in p}
        redacted = {p for p in redacted if "." not in p}
        return (
            frozenset(p for p in excluded if _GLOB.isdisjoint(p)),
            tuple(p for p in excluded if not _GLOB.isdisjoint(p)),
            frozenset(p for p in redacted if _GLOB.isdisjoint(p)),
            tuple(p for p in redacted if not _GLOB.isdisjoint(p)),
            paths,
        )

    def apply(self, event: str, params: Mapping[str, Any]) -> Mapping[str, Any]:
        """``params`` as the log should store them for ``event``: the same object
        when the policy leaves the event alone, else a new dict."""
        plans = self._plans
        try:
            plan = plans[event]
        except KeyError:
            plan = plans[event] = self._plan(event)
        if plan is None or not params:
            return params
        ex_names, ex_globs, red_names, red_globs, paths = plan
        marker = self.marker
        out: dict[str, Any] = {}
        for k, v in params.items():
            if k in ex_names or (ex_globs and any(fnmatchcase(k, g) for g in ex_globs)):
                continue
            if k in red_names or (red_globs and any(fnmatchcase(k, g) for g in red_globs)):
                out[k] = marker
            else:
                out[k] = _within(v, k, paths, marker) if paths else v
        return out

    def __repr__(self) -> str:
        parts = []
        for pattern, entry in self._rules.items():
            spec = {a: sorted(entry[a]) for a in _ACTIONS if entry[a]}
            parts.append(f"{pattern!r}: {spec}")
        return "<LogPolicy {" + ", ".join(parts) + "}>"


def _within(
    value: Any, key: str, paths: tuple[tuple[str, tuple[str, ...]], ...], marker: Any
) -> Any:
    """``value`` (the parameter or entry ``key``) with the dotted ``paths`` that
    start at ``key`` applied inside it (a new read-only mapping), or ``value``
    itself when none reaches into it."""
    if not isinstance(value, Mapping):
        return value
    inner = tuple(
        (action, parts[1:])
        for action, parts in paths
        if len(parts) > 1 and (parts[0] == key or fnmatchcase(key, parts[0]))
    )
    if not inner:
        return value
    out: dict[str, Any] = {}
    for k, v in value.items():
        here = [a for a, parts in inner if len(parts) == 1 and fnmatchcase(k, parts[0])]
        if "exclude" in here:
            continue
        out[k] = marker if here else _within(v, k, inner, marker)
    return MappingProxyType(out)
