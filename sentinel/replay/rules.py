"""Rules for replay: importable references, and which rules replay in which order.

Spark executors rebuild the rules themselves, so the Spark engine takes them as an
importable reference, ``"package.module:attribute"``: the attribute (a dotted path
is allowed after the colon) is a :class:`~sentinel.LocalEventDetector`, or a
zero-argument callable returning one. The local engine also takes a detector.

Rules that keep detection state per transaction (the default, ``flush=True``)
replay scope by scope; rules that opted out of flushing (``flush=False``) combine
occurrences of different transactions and replay in the detector's global
``t_occ`` order (see ``docs/replay.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from sentinel.errors import RuleReferenceError
from sentinel.rules import LocalEventDetector, Rule
from sentinel.rules.reference import import_reference

__all__ = [
    "Rules",
    "cross_scope_rules",
    "load_rules",
    "per_scope_rules",
    "reference_of",
    "resolve_rules",
    "rule_events",
]

#: What replay accepts as rules: a reference ``"package.module:attribute"``, a
#: detector, or a zero-argument callable returning one.
Rules = str | LocalEventDetector | Callable[[], LocalEventDetector]


def load_rules(reference: str) -> LocalEventDetector:
    """The detector ``reference`` (``"package.module:attribute"``) names.

    The module is imported (``importlib``), the attribute looked up (dots after
    the colon walk attributes); a zero-argument callable is called. Raises
    :class:`~sentinel.errors.RuleReferenceError` saying which step failed.

    >>> det = load_rules("myapp.rules:detector")  # doctest: +SKIP
    """
    det: LocalEventDetector = import_reference(
        reference,
        (LocalEventDetector,),
        hint="is it installed, or on PYTHONPATH, here and on every Spark executor?",
    )
    return det


def resolve_rules(rules: Rules) -> LocalEventDetector:
    """The detector ``rules`` stands for (a reference is loaded, a callable
    called)."""
    if isinstance(rules, LocalEventDetector):
        return rules
    if isinstance(rules, str):
        return load_rules(rules)
    if callable(rules):
        made = rules()
        if isinstance(made, LocalEventDetector):
            return made
        raise RuleReferenceError(
            f"rules {rules!r} returned {type(made).__name__}, not a LocalEventDetector",
            reference=repr(rules),
        )
    raise RuleReferenceError(
        f"rules must be a reference 'package.module:attribute', a LocalEventDetector or a "
        f"zero-argument callable returning one, not {type(rules).__name__}",
        reference=repr(rules),
    )


def reference_of(rules: Rules) -> str:
    """``rules`` as a reference executors can load; raises
    :class:`~sentinel.errors.RuleReferenceError` for a detector object (it holds
    functions and locks that cannot travel to executors)."""
    if isinstance(rules, str):
        return rules
    raise RuleReferenceError(
        "the Spark engine rebuilds the rules on every executor, so it needs them as an "
        f"importable reference 'package.module:attribute', not {type(rules).__name__}",
        reference=repr(rules),
    )


def per_scope_rules(det: LocalEventDetector) -> list[Rule]:
    """The enabled rules whose detection state is flushed per transaction."""
    return [r for r in det.rules.values() if r.enabled and r.flush]


def cross_scope_rules(det: LocalEventDetector) -> list[Rule]:
    """The enabled rules that opted out of flushing (``flush=False``)."""
    return [r for r in det.rules.values() if r.enabled and not r.flush]


def rule_events(
    rules: Collection[Rule],
) -> tuple[frozenset[str], dict[str, tuple[str, ...] | None]]:
    """``(listened, keyed)``: the primitive event names ``rules`` detect on (their
    detected expressions, so deferred rules include ``txn:begin`` and
    ``txn:pre_commit``), and for the events whose parameters detection itself
    reads, which parameters (the keys of ``E by param`` around them), or
    ``None`` for "all of them".

    Occurrences of other events cannot change a detection of these rules; events
    outside ``keyed`` need their parameters only when a condition or action
    looks at them. Each operator says what it reads
    (:meth:`~sentinel.algebra.expressions.Expression.parameters_read`); one that
    does not say counts as reading every parameter (safe for operators added
    later).
    """
    listened: set[str] = set()
    keyed: dict[str, tuple[str, ...] | None] = {}

    def need(names: Iterable[str], key: str | None) -> None:
        for name in names:
            if key is None or (name in keyed and keyed[name] is None):
                keyed[name] = None
            else:
                keys = keyed.get(name) or ()
                keyed[name] = keys if key in keys else (*keys, key)

    for r in rules:
        expr = r.detected_expression
        listened.update(p.name for p in expr.primitives())
        for node in expr.walk():
            read = node.parameters_read()
            if read is None:
                need((p.name for p in node.primitives()), None)
            else:
                for key in read:
                    need((p.name for p in node.primitives()), key)
    return frozenset(listened), keyed
