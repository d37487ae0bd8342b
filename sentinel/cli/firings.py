"""``sentinel log firings``: the rules that ran, and why each did.

Each firing of the rule-firing log is printed with its rule, coupling mode, status
and time, then the primitive occurrences it combined (from the event log). With
``--rules`` the application's rules are loaded and the firings' transactions
replayed (:mod:`sentinel.replay.explain`), so each firing also shows the rule's
event expression, parameter context and condition, and its constituents as a
tree: how the operators combined them.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import click

from sentinel.cli.common import (
    MAX_ROWS,
    EnvOption,
    count,
    db_options,
    errors,
    load_reference,
    require_database,
)

__all__ = ["firings"]


@click.command(name="firings")
@db_options
@click.option(
    "-n",
    "--limit",
    default=10,
    show_default=True,
    type=count(1, MAX_ROWS),
    help="How many of the latest firings to show.",
)
@click.option("--rule", "rule_names", multiple=True, help="Only this rule (repeatable).")
@click.option("--scope", "scopes", multiple=True, help="Only this scope (repeatable).")
@click.option(
    "--key",
    "keys",
    multiple=True,
    help="Only firings of a partitioned rule for this key value (repeatable): 7 finds "
    "order_id=7 of '(A ; B) by order_id' (the integer or the string), '[7,\"EU\"]' a key "
    "of two partitions (outermost first), '<Order 7>' an object (by @source).",
)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(["fired", "condition_false", "failed", "pending", "done"]),
    help="Only this status (repeatable).",
)
@click.option(
    "--rules",
    "rules_ref",
    cls=EnvOption,
    envvar="SENTINEL_RULES",
    default=None,
    help="The application's rules (package.module:attribute, imported from the current "
    "directory first): adds each rule's expression, context and condition, and shows "
    "how the operators combined the constituents (replays the firings' transactions: "
    "needs the replay extra). Or set SENTINEL_RULES.",
)
@errors
def firings(
    url: str,
    schema: str | None,
    prefix: str,
    limit: int,
    rule_names: tuple[str, ...],
    scopes: tuple[str, ...],
    keys: tuple[str, ...],
    statuses: tuple[str, ...],
    rules_ref: str | None,
) -> None:
    """Show the latest rule firings, oldest first, and why each fired: the
    occurrences it combined (with --rules: as a tree of operators, with the rule's
    context and coupling)."""
    from sentinel.log import LogReader
    from sentinel.rules import LocalEventDetector

    require_database(url, schema)
    det: LocalEventDetector | None = None
    if rules_ref is not None:
        from sentinel.extras import require

        # The trees come from replaying the firings' transactions: checked before
        # any work, so the message names the extra rather than a module.
        require("replay", "sentinel log firings --rules (the trees of operators)")
        det = load_reference(rules_ref, (LocalEventDetector,))
    with LogReader(url, schema=schema, prefix=prefix) as reader:
        shown = list(
            deque(
                reader.firings(
                    rules=rule_names or None,
                    scopes=scopes or None,
                    statuses=statuses or None,
                    keys=keys or None,
                ),
                maxlen=limit,
            )
        )
        ids = {c for f in shown for c in f.constituents}
        occurrences = {
            (o.scope, o.t_occ): o
            for o, _outcome, _id in reader.occurrences(scopes=sorted({s for s, _ in ids}))
            if (o.scope, o.t_occ) in ids
        }
    trees: dict[int, Any] = {}
    if det is not None and shown:
        from sentinel.replay.explain import detections_for

        trees = detections_for(url, shown, det, schema=schema, prefix=prefix)
    if not shown:
        click.echo(
            "no rule firings" + (" match" if rule_names or scopes or statuses or keys else "")
        )
        return
    for f in shown:
        for line in _describe(f, det, occurrences, trees.get(f.id or -1)):
            click.echo(line)


def _describe(f: Any, det: Any, occurrences: dict[Any, Any], tree: Any) -> list[str]:
    when = f.fired_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if f.fired_at else "?"
    lines = [
        f"#{f.id} {f.rule} {f.status} ({f.coupling}) at {when}",
        f"  detection: scope {f.scope}, t_occ {f.t_occ}"
        + ("" if f.key is None else f", key {f.key}"),
    ]
    rule = det.rules.get(f.rule) if det is not None else None
    if rule is not None:
        said = [f"on {rule.event}", f"{rule.context} context", f"{rule.coupling} coupling"]
        if rule.condition is not None:
            said.append(f"condition {getattr(rule.condition, '__qualname__', rule.condition)}")
        if rule.priority:
            said.append(f"priority {rule.priority}")
        if str(rule.trigger_mode) != "now":
            said.append(f"trigger mode {rule.trigger_mode}")
        if not rule.flush:
            said.append("across transactions (flush=False)")
        lines.append("  rule: " + ", ".join(said))
    if f.error:
        lines.append(f"  error: {f.error}")
    if tree is not None:
        lines.append("  why:")
        lines.extend("    " + line for line in _tree(tree))
        return lines
    if det is not None:
        lines.append("  why (replay did not reproduce this firing: the rule changed since?):")
    else:
        lines.append("  constituents (--rules shows how they combined):")
    for i, key in enumerate(f.constituents):
        branch = "└─ " if i == len(f.constituents) - 1 else "├─ "
        occ = occurrences.get(tuple(key))
        text = _primitive(occ) if occ is not None else f"{key[0]}@{key[1]} (not in the event log)"
        lines.append("    " + branch + text)
    return lines


def _tree(occ: Any) -> list[str]:
    """``occ`` and its parts, one line each, indented as the operators nest."""

    if len(occ) == 8:
        return [_primitive(occ)]
    lines = [f"{occ.expression} @{occ.t_occ}"]
    parts = occ.parts
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        sub = _tree(part)
        lines.append(("└─ " if last else "├─ ") + sub[0])
        lines.extend(("   " if last else "│  ") + s for s in sub[1:])
    return lines


def _primitive(occ: Any) -> str:
    from sentinel.log.records import encode_params

    params = json.dumps(encode_params(occ.params, event=occ.event), sort_keys=True)
    source = "" if occ.source is None else f" {occ.source!r}"
    at = occ.at.strftime("%H:%M:%S.%f")[:-3]
    return f"{occ.event} @{occ.t_occ}{source} {params} at {at}"
