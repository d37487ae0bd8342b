"""The replay step on its own (no Spark): order of the input, batch boundaries,
conditions, actions, coupling modes, transaction outcomes, parameters."""

from __future__ import annotations

import datetime as dt
import gc
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from sentinel import LocalEventDetector, ObjectRef, Occurrence
from sentinel.errors import ReplayError, ReplaySourceError
from sentinel.replay import DETECTION_SCHEMA, Replayer, log_table, replay, replay_batches
from sentinel.replay.batch import GC_YOUNG_THRESHOLD, LOG_SCHEMA
from sentinel.replay.recorder import LazyParams, decode_params
from tests.replay.workload import Online, RuleSpec, build, replayed, run_steps


def _detector() -> LocalEventDetector:
    det = LocalEventDetector()
    for name in ("order", "payment", "ship"):
        det.explicit(name)
    return det


def _rows(occs: list[tuple[str, int, str, dict[str, Any]]], outcome: str | None = "committed"):
    """A log table from (event, t_occ, scope, params)."""
    return log_table(
        (Occurrence(e, t, float(t), scope=s, params=p), outcome) for e, t, s, p in occs
    )


def _detections(table: pa.Table, det: LocalEventDetector, **kw: Any) -> list[dict[str, Any]]:
    return pa.Table.from_batches(
        list(replay_batches(table.to_batches(), det, **kw)), schema=DETECTION_SCHEMA
    ).to_pylist()


def test_a_keyed_sequence_replays_with_ids_parameters_and_condition() -> None:
    det = _detector()
    det.rule(
        "paid",
        "(order ; payment) by id",
        lambda o: o.values("amount")[0] > 5,
        action=print,
        context="chronicle",
    )
    table = _rows(
        [
            ("txn:begin", 1, "a", {}),
            ("order", 2, "a", {"id": 1, "amount": 9}),
            ("order", 3, "a", {"id": 2, "amount": 3}),
            ("payment", 4, "a", {"id": 2}),
            ("payment", 5, "a", {"id": 1}),
            ("txn:commit", 6, "a", {}),
        ]
    )
    out = _detections(table, det)
    assert [
        (d["rule"], d["scope"], d["t_occ"], d["constituent_t_occs"], d["condition"]) for d in out
    ] == [("paid", "a", 4, [3, 4], False), ("paid", "a", 5, [2, 5], True)]
    assert out[1]["constituent_scopes"] == ["a", "a"]
    assert out[1]["params"] == '[{"amount":9,"id":1},{"id":1}]'
    assert out[1]["coupling"] == "immediate" and out[1]["error"] is None


def test_scopes_never_combine_and_may_span_batches() -> None:
    det = _detector()
    det.rule("paid", "order ; payment", action=print, context="chronicle")
    occs = []
    t = 0
    for s in ("s1", "s2", "s3"):
        for e in ("order", "order", "payment", "payment", "payment"):
            t += 1
            occs.append((e, t, s, {}))
    occs.append(("payment", 99, "s4", {}))  # no order in its own scope
    table = _rows(occs)
    whole = _detections(table, det)
    assert len(whole) == 6 and {d["scope"] for d in whole} == {"s1", "s2", "s3"}
    for size in (1, 2, 3, 7):
        assert (
            _detections(pa.Table.from_batches(table.to_batches(max_chunksize=size)), det) == whole
        )


def test_pandas_batches_are_accepted() -> None:
    det = _detector()
    det.rule("r", "order", action=print)
    df = _rows([("order", 1, "a", {"x": 1})]).to_pandas()
    out = list(replay_batches([df], det))
    assert out[0].num_rows == 1 and out[0].schema == DETECTION_SCHEMA


def test_missing_log_columns_are_reported() -> None:
    det = _detector()
    det.rule("r", "order", action=print)
    with pytest.raises(ReplaySourceError, match="outcome"):
        list(replay_batches([_rows([("order", 1, "a", {})]).drop_columns(["outcome"])], det))


@pytest.mark.parametrize(
    "event_type",
    [pa.large_string(), pa.string_view(), pa.dictionary(pa.int32(), pa.string())],
)
def test_event_names_of_any_arrow_string_type_replay_alike(event_type: pa.DataType) -> None:
    det = _detector()
    det.rule("r", "order ; payment", action=print)
    table = _rows([("order", 1, "a", {}), ("ship", 2, "a", {}), ("payment", 3, "a", {"n": 1})])
    retyped = table.set_column(
        table.schema.get_field_index("event"), "event", table.column("event").cast(event_type)
    )
    assert _detections(retyped, det) == _detections(table, det)
    assert [d["constituent_t_occs"] for d in _detections(table, det)] == [[1, 3]]


def test_the_garbage_collector_is_tuned_while_replaying_and_restored_after() -> None:
    det = _detector()
    during: list[tuple[int, ...]] = []
    det.rule("r", "order", lambda o: during.append(gc.get_threshold()) or True, action=print)
    before = gc.get_threshold()
    assert len(_detections(_rows([("order", 1, "a", {})]), det)) == 1
    assert during[0][0] == max(before[0], GC_YOUNG_THRESHOLD) and during[0][1:] == before[1:]
    assert gc.get_threshold() == before
    with pytest.raises(ReplaySourceError):
        list(replay_batches([_rows([("order", 1, "a", {})]).drop_columns(["outcome"])], det))
    assert gc.get_threshold() == before


def test_an_empty_partition_yields_nothing() -> None:
    det = _detector()
    det.rule("r", "order", action=print)
    assert list(replay_batches([], det)) == []


def test_actions_do_not_run_unless_asked_and_then_cannot_signal() -> None:
    det = _detector()
    ran: list[int] = []

    def act(occ: Any) -> None:
        ran.append(occ.t_occ)
        det_signal = rep_holder[0]
        assert det_signal.signal("ship") is None  # muted: the log holds what it signalled

    rep_holder: list[Any] = []
    det.rule("r", "order", action=act)
    det.rule("s", "ship", action=print)
    table = _rows([("order", 1, "a", {})])
    assert len(_detections(table, det)) == 1 and ran == []
    replayer = Replayer(det, run_actions=True)
    rep_holder.append(replayer.detector)
    replayer.feed(table.to_batches()[0])
    replayer.finish()
    assert ran == [1]
    assert [d["rule"] for d in replayer.take().to_pylist()] == ["r"]


def test_a_failing_condition_is_recorded_and_stops_its_instant() -> None:
    det = _detector()
    det.rule("first", "order", lambda o: 1 / 0, action=print, priority=10)
    det.rule("second", "order", action=print)
    det.rule("later", "payment", action=print)
    out = _detections(_rows([("order", 1, "a", {}), ("payment", 2, "a", {})]), det)
    assert [(d["rule"], d["condition"]) for d in out] == [("first", None), ("later", True)]
    assert "ZeroDivisionError" in out[0]["error"] and "'first'" in out[0]["error"]


def test_coupling_modes_follow_the_logged_outcome() -> None:
    det = _detector()
    for coupling in ("immediate", "deferred", "detached", "detached_independent"):
        det.rule(coupling, "order", action=print, coupling=coupling)
    committed = [
        ("txn:begin", 1, "c", {}),
        ("order", 2, "c", {}),
        ("txn:pre_commit", 3, "c", {}),
        ("txn:commit", 4, "c", {}),
    ]
    aborted = [("txn:begin", 5, "x", {}), ("order", 6, "x", {}), ("txn:abort", 7, "x", {})]
    late = [
        ("txn:begin", 8, "y", {}),
        ("order", 9, "y", {}),
        ("txn:pre_commit", 10, "y", {}),
        ("txn:abort", 11, "y", {}),
    ]
    table = pa.concat_tables([_rows(committed), _rows(aborted, "aborted"), _rows(late, "aborted")])
    got = sorted((d["scope"], d["rule"], d["t_occ"]) for d in _detections(table, det))
    assert got == [
        ("c", "deferred", 3),
        ("c", "detached", 2),
        ("c", "detached_independent", 2),
        ("c", "immediate", 2),
        ("x", "detached_independent", 6),
        ("x", "immediate", 6),
        ("y", "deferred", 10),
        ("y", "detached_independent", 9),
        ("y", "immediate", 9),
    ]


def test_detached_rules_outside_transactions_are_recorded() -> None:
    det = _detector()
    det.rule("d", "order", action=print, coupling="detached")
    out = _detections(_rows([("order", 1, "process:ab", {})], outcome=None), det)
    assert [(d["rule"], d["scope"]) for d in out] == [("d", "process:ab")]


def test_scope_order_refuses_rules_that_span_transactions() -> None:
    det = _detector()
    det.rule("span", "order ; payment", action=print, flush=False)
    with pytest.raises(ReplayError, match=r"'span'.*t_occ order"):
        list(replay_batches([], det))
    out = _detections(_rows([("order", 1, "a", {}), ("payment", 2, "b", {})]), det, order="t_occ")
    assert [(d["scope"], d["constituent_scopes"]) for d in out] == [("b", ["a", "b"])]


def test_unknown_rule_names_are_refused() -> None:
    with pytest.raises(ReplayError, match="'nope'"):
        Replayer(_detector(), only=["nope"])


def test_parameters_keep_their_types_for_conditions() -> None:
    det = _detector()
    seen: list[Any] = []
    det.rule("r", "order ; payment", lambda o: seen.append(dict(o.params)) or True, action=print)
    ref = ObjectRef("Order", (7, "x"))
    params = {
        "when": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        "amount": Decimal("1.10"),
        "ref": ref,
        "tags": ("a", 1),
        "big": 10**30,
        "text": "[{$}]",
    }
    out = _detections(_rows([("order", 1, "a", params), ("payment", 2, "a", {"n": 1})]), det)
    assert seen == [{**params, "n": 1}]
    assert len(out) == 1


def test_parameters_are_decoded_only_when_read() -> None:
    det = _detector()
    det.rule("plain", "order ; payment", action=print)
    det.rule("keyed", "(ship ; ship) by id", action=print)
    replayer = Replayer(det)
    kept: list[Any] = []
    replayer.detector.scheduler.records = recs = replayer._records
    replayer.feed(
        _rows(
            [
                ("order", 1, "a", {"x": 1}),
                ("payment", 2, "a", {"x": 2}),
                ("ship", 3, "a", {"id": 1, "n": 5}),
                ("ship", 4, "a", {"id": 1}),
            ]
        ).to_batches()[0]
    )
    for _, _, _, occ, _, _ in recs:
        kept.extend(occ.constituents)
    by_event = {o.event: o[5] for o in kept}
    assert isinstance(by_event["order"], LazyParams) and by_event["order"].pending
    assert by_event["order"].raw == '{"x":1}' and dict(by_event["order"]) == {}
    ships = [o[5] for o in kept if o.event == "ship"]
    # The router reads the key: those parameters are decoded as they are read in.
    assert ships == [{"id": 1, "n": 5}, {"id": 1}] and not any(p.pending for p in ships)
    replayer.finish()
    assert [d["params"] for d in replayer.take().to_pylist()] == [
        '[{"x":1},{"x":2}]',
        '[{"id":1,"n":5},{"id":1}]',
    ]


@pytest.mark.parametrize(
    "text",
    [
        '{"n":1,"s":"caf\\u00e9","f":1.5,"b":true,"z":null}',
        '{"big":123456789012345678901234567890,"f":2.5}',  # beyond 64 bits: orjson reads a float
        '{"small":-123456789012345678901234567890}',
        '{"just_below_i64":-9223372036854775809}',  # orjson: the float -2**63
        '{"f":1e300,"g":-1e300,"u64":18446744073709551615,"i64":-9223372036854775808}',
        '{"s":"\\ud800"}',  # a lone surrogate: orjson refuses
        '{"when":{"$datetime":"2024-01-02T03:04:05+00:00"}}',  # tagged
    ],
)
def test_logged_parameters_decode_as_the_json_module_reads_them(text: str) -> None:
    from sentinel.params import loads

    assert decode_params(text) == loads(text)


def test_sources_become_object_references() -> None:
    det = _detector()
    seen: list[Any] = []
    det.rule("r", "order", lambda o: seen.append(o.source) or True, action=print)
    ref = ObjectRef("Order", (3,))
    table = log_table([(Occurrence("order", 1, 0.0, source=ref, scope="a"), "committed")])
    assert len(_detections(table, det)) == 1 and seen == [ref]


def test_a_small_workload_replays_as_it_ran_online() -> None:
    specs = [
        RuleSpec("seq", "E1 ; E2", "chronicle"),
        RuleSpec("def", "E3", coupling="deferred", condition="even"),
        RuleSpec("det", "E1 ^ E4", coupling="detached"),
        RuleSpec("span", "(E2 ; E4) by k", flush=False, condition="small_k"),
    ]
    online = Online(build(specs))
    run_steps(
        online,
        [
            ("begin",),
            ("signal", 0, "E1", 1, 2, False),
            ("begin",),
            ("signal", 1, "E2", 1, 3, True),
            ("signal", 0, "E2", 1, 3, False),
            ("signal", 0, "E3", 0, 4, False),
            ("signal", 0, "E4", 1, 1, False),
            ("signal", -1, "E4", 1, 5, False),
            ("end", 0, "commit"),
            ("signal", 0, "E4", 1, 6, False),
            ("end", 0, "late_abort"),
        ],
    )
    assert online.detections
    result = replay(log_table(online.rows), build(specs))
    assert replayed(result.rows()) == sorted(online.detections)


# Parameter texts of rows whose parameters detection reads (a keyed event): they
# are decoded in one orjson call per batch, each then checked as decode_params
# checks it. A tagged, nested or out-of-range value read as orjson reads it, or
# one text's value given to another row, would reach the condition below.
_KEYED_TEXTS = [
    '{"id":1,"n":1}',
    '{"id":2,"n":{"$int":"0x1ed09bead87c0378d8e6400000000"}}',  # 10**36
    '{"id":3,"n":{"$set":[1,2,3]}}',
    '{"id":4,"n":{"$float":"nan"}}',
    '{"id":5,"n":{"$float":"-0.0"}}',
    '{"id":6,"n":123456789012345678901234567890}',  # beyond 64 bits: orjson reads a float
    '{"id":7,"n":2.5}',
    '{"id":8,"n":[1,{"$decimal":"1.10"}]}',
    '{"id":9,"n":{"$map":{"$x":1}}}',
    '{"id":10,"n":{"k":{"$int":"-0x10"}},"z":null}',
    '{"id":{"$int":"0x1ed09bead87c0378d8e6400000000"},"n":"big key"}',
    "{}",
    '{ "id" : 11 , "n" : "spaced" }',
]


def _keyed_rows(texts: list[str]) -> pa.Table:
    """Rows of one transaction: an ``order`` then a ``payment`` with each text."""
    n = 2 * len(texts)
    return pa.table(
        {
            "scope": ["a"] * n,
            "t_occ": list(range(1, n + 1)),
            "event": ["order", "payment"] * len(texts),
            "ts": [float(i) for i in range(n)],
            "detected_ts": [float(i) for i in range(n)],
            "source_class": [None] * n,
            "source_key": [None] * n,
            "params": [t for t in texts for _ in (0, 1)],
            "outcome": ["committed"] * n,
        },
        schema=pa.schema([f for f in LOG_SCHEMA if f.name != "savepoint"]),
    )


@pytest.mark.parametrize("lone_surrogate", [False, True])
def test_parameters_detection_reads_decode_as_the_log_wrote_them(lone_surrogate: bool) -> None:
    from sentinel.params import dumps, loads

    texts = [*_KEYED_TEXTS, '{"id":12,"n":"\\ud800"}'] if lone_surrogate else _KEYED_TEXTS
    det = _detector()
    seen: list[Any] = []
    det.rule(
        "paid",
        "(order ; payment) by id",
        lambda o: seen.append([dict(p.params) for p in o.constituents]) or True,
        action=print,
        context="chronicle",
    )
    out = _detections(_keyed_rows(texts), det)
    expected = [loads(t) for t in texts if "id" in loads(t)]
    # dumps compares what == cannot: nan, -0.0, int against float.
    assert [[dumps(p) for p in pair] for pair in seen] == [[dumps(e), dumps(e)] for e in expected]
    kinds = [int, int, frozenset, float, float, int, float, tuple]  # lists read as tuples
    assert [type(pair[0]["n"]) for pair in seen[:8]] == kinds
    assert [d["params"] for d in out] == [f"[{t},{t}]" for t in texts if "id" in loads(t)]


def test_a_parameter_text_that_is_not_one_value_fails_as_it_fails_alone() -> None:
    from sentinel.replay.recorder import decode_params

    det = _detector()
    det.rule("paid", "(order ; payment) by id", action=print)
    bad = '{"id":1},{"id":2}'  # joined with the others, it would read as two
    with pytest.raises(Exception) as alone:
        decode_params(bad)
    with pytest.raises(type(alone.value)):
        _detections(_keyed_rows(['{"id":1}', bad, '{"id":3}']), det)


def _texts_rows(texts: list[str]) -> pa.Table:
    """Rows of one transaction: ``order``, ``payment``, ``order``, ... with these
    parameter texts (one each)."""
    n = len(texts)
    return pa.table(
        {
            "scope": ["a"] * n,
            "t_occ": list(range(1, n + 1)),
            "event": [("order", "payment")[i % 2] for i in range(n)],
            "ts": [float(i) for i in range(n)],
            "detected_ts": [float(i) for i in range(n)],
            "source_class": [None] * n,
            "source_key": [None] * n,
            "params": texts,
            "outcome": ["committed"] * n,
        },
        schema=pa.schema([f for f in LOG_SCHEMA if f.name != "savepoint"]),
    )


@pytest.mark.parametrize(
    "texts",
    [
        # a string that spans two rows, the second row ending with a second object
        ['{"id":1,"s":"x', 'y"},{"id":1}'],
        # an object that spans two rows; a third row holds two objects
        ['{"id":1', '"s":2}', '{"id":1},{"id":1}', '{"id":5}'],
        # a string that spans two rows, every text one brace of each kind
        ['{"id":1,"s":"}', '{"}', '{"id":1}', '{"x":"{"},{"id":1}'],
        # an object inside a nested array that spans two rows, each text an object
        ['{"id":1,"a":[{}', '{"id":2}]}', '{"id":1},{"id":1}', '{"id":9}'],
    ],
)
def test_parameter_texts_that_read_as_one_value_each_only_when_joined_fail_as_alone(
    texts: list[str],
) -> None:
    """Corrupt parameter texts that, joined into one JSON array, read as as many
    values as there are rows (each row then given another row's value) fail the
    replay as the first of them fails alone: never a detection made of values
    no row holds."""
    det = _detector()
    det.rule("paid", "(order ; payment) by id", action=print)
    first_bad = next(t for t in texts if not _valid_alone(t))
    with pytest.raises(Exception) as alone:
        decode_params(first_bad)
    with pytest.raises(type(alone.value)):
        _detections(_texts_rows(texts), det)


def _valid_alone(text: str) -> bool:
    try:
        decode_params(text)
    except Exception:
        return False
    return True


@pytest.mark.parametrize(
    "bad",
    [
        "null",
        "[1]",
        "",
        "1",
        '"abc"',
        '{"id":1} {"id":2}',
        '{"id":1,}',
        '{"id":{"$int":5}}',
        '{"id":1},{"id":2}',
    ],
)
@pytest.mark.parametrize("reader", ["detection", "condition", "t_occ order", "output"])
def test_a_corrupt_parameter_text_is_a_replay_source_error_naming_its_row(
    bad: str, reader: str
) -> None:
    """A row whose parameters replay reads (detection partitions by them, a
    condition reads them, or a detection's output holds them) but that holds no
    JSON object of parameters fails the replay with a :class:`ReplaySourceError`
    naming the row (event, t_occ, scope), whether it is read in the batch,
    alone, or lazily. A row no rule read was written into its detection's JSON
    array as stored: a broken array, or one with a value no row holds."""
    det = _detector()
    if reader == "output":
        det.rule("paid", "order ; payment", action=print)
    elif reader == "detection":
        det.rule("paid", "(order ; payment) by id", action=print)
    elif reader == "condition":
        det.rule("paid", "order ; payment", lambda o: True, action=print)
    else:
        det.rule("paid", "(order ; payment) by id", action=print, flush=False)
    order = "t_occ" if reader == "t_occ order" else "scope"
    rows = _texts_rows(['{"id":1}', bad, '{"id":3}'])
    with pytest.raises(ReplaySourceError, match=r"^log row payment@2 in scope 'a': its params"):
        _detections(rows, det, order=order)
