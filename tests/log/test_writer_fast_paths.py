"""The writer's fast paths give what the general ones give (issue 31).

The per-occurrence work of the log's writer was trimmed: the plainness test of
``batch_elements`` written out per value, read-only mappings handed to orjson
as copies made in C, a ``LogJSON`` column's text (a rule firing's
constituents) made without ``json.dumps``, a batch's scope checked once, and a
UTC datetime's SQLite text made without a naive copy. Each must agree with
what it replaces, value for value and error for error.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from types import MappingProxyType
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from sentinel.errors import LogWriteError
from sentinel.log import LogWriter, inserts
from sentinel.log.tables import UTCDateTime
from sentinel.occurrence import ObjectRef, Occurrence


def reference_plain(params: Any) -> bool:
    """``inserts._plain`` as it was: one ``_plain_chars`` call per value."""
    chars = 0
    for k, v in params.items():
        if type(k) is not str or "\x00" in k:
            return False
        if type(v) is MappingProxyType:
            for k2, v2 in v.items():
                if type(k2) is not str or k2.startswith("$") or "\x00" in k2:
                    return False
                n = inserts._plain_chars(v2)
                if n < 0:
                    return False
                chars += n
        else:
            n = inserts._plain_chars(v)
            if n < 0:
                return False
            chars += n
    return chars <= inserts._PLAIN_CHARS


edge_floats = st.sampled_from(
    [0.0, -0.0, 1e16, -1e16, 9.999999999999998e15, math.nan, math.inf, -math.inf, 5e-324]
)
scalars = st.one_of(
    st.text(max_size=4),
    st.sampled_from(["", "\x00", "a\x00b", "$x"]),
    st.floats(),
    edge_floats,
    st.integers(),
    st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1]),
    st.booleans(),
    st.none(),
    st.just(dt.date(2024, 1, 2)),
    st.just((1, 2)),
    st.just(b"x"),
)
keys = st.one_of(st.text(max_size=3), st.sampled_from(["", "$", "$ref", "a\x00"]), st.just(1))


@given(
    st.dictionaries(
        keys,
        st.one_of(scalars, st.dictionaries(keys, scalars, max_size=3).map(MappingProxyType)),
        max_size=4,
    )
)
def test_the_plainness_test_agrees_with_the_per_value_rule(params: dict[Any, Any]) -> None:
    assert inserts._plain(params) is reference_plain(params)


def test_a_long_string_total_is_not_plain_either_way() -> None:
    big = "x" * (inserts._PLAIN_CHARS // 2 + 1)
    params = {"a": big, "b": MappingProxyType({"c": big})}
    assert inserts._plain(params) is reference_plain(params) is False


T = 1_700_000_000.25


#: text JSON keeps as it is: no NUL, no lone surrogate
clean = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=3
)


@given(
    st.dictionaries(
        clean,
        st.dictionaries(
            clean.filter(lambda k: not k.startswith("$")),
            st.one_of(st.integers(-(2**63), 2**63 - 1), clean, st.booleans(), st.none()),
            max_size=3,
        ).map(MappingProxyType),
        max_size=3,
    )
)
def test_read_only_mappings_are_written_as_their_dicts(params: dict[str, Any]) -> None:
    row = ("tx", 1, "E", T, T, "Account", "[1]", params, "committed", None)
    [(_, _, text)] = inserts.batch_elements([row])[("tx", "committed", None)]
    item = [1, "E", T, None, "Account", "[1]", params]
    assert text == orjson.dumps(item, default=inserts._as_dict).decode()


class Custom(dict[str, Any]):
    """A dict whose read-only view orjson cannot take through ``copy``: its
    ``copy`` gives back its own kind, which orjson hands to ``default`` again."""

    def copy(self) -> Any:
        return CopyLess(self)


class CopyLess:
    def __init__(self, d: dict[str, Any]) -> None:
        self.d = d


def test_a_mapping_whose_copy_orjson_refuses_is_written_as_before() -> None:
    params = {"m": MappingProxyType(Custom(a=1))}
    row = ("tx", 1, "E", T, T, None, None, params, "committed", None)
    [(_, _, text)] = inserts.batch_elements([row])[("tx", "committed", None)]
    item = [1, "E", T, None, None, None, params]
    assert text == orjson.dumps(item, default=inserts._as_dict).decode()


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=4)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)
pairs = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["s1", "s1", "s2", 'é"{}%', ""]), st.integers()).map(list),
        st.lists(json_values, max_size=3),
        st.tuples(st.none(), st.integers()).map(list),
        st.tuples(st.text(max_size=2), st.booleans()).map(list),
    ),
    max_size=6,
)


@given(st.one_of(pairs, json_values))
def test_a_json_column_text_is_json_dumps_text(value: Any) -> None:
    assert inserts._json_dumps(value) == json.dumps(value)


def test_a_json_column_value_json_refuses_is_refused_alike() -> None:
    for value in ([["s", object()]], [[1, 2], {1j}], {"a": {1, 2}}):
        with pytest.raises(TypeError):
            json.dumps(value)
        with pytest.raises(TypeError):
            inserts._json_dumps(value)


def test_a_utc_datetime_is_stored_as_its_naive_text() -> None:
    dialect = sa.create_engine("sqlite://").dialect
    col: sa.Column[Any] = sa.Column("at", UTCDateTime(), nullable=False)
    proc = inserts._processor(col, dialect)
    for when in (
        dt.datetime(1, 1, 1, tzinfo=dt.UTC),
        dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC),
        dt.datetime(2024, 5, 6, 7, 8, 9, 123, tzinfo=dt.UTC),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC),
    ):
        assert proc(when) == when.replace(tzinfo=None).isoformat(" ", "microseconds")


def occurrence(scope: Any, t_occ: int, event: str = "E") -> Occurrence:
    new: Any = tuple.__new__
    return new(Occurrence, (event, t_occ, T, T, ObjectRef("A", (1,)), (1,), scope, ("x",)))  # type: ignore[no-any-return]


@pytest.mark.parametrize("bad", [None, 7, "s" * 1000], ids=["None", "int", "long"])
def test_a_bad_scope_after_good_ones_in_one_batch_is_refused(bad: Any) -> None:
    occs = [occurrence("tx", 1), occurrence("tx", 2), occurrence(bad, 3)]
    with pytest.raises(LogWriteError, match="scope id"):
        LogWriter().event_values(occs, "committed")


def test_a_long_event_name_after_good_ones_in_one_batch_is_refused() -> None:
    occs = [occurrence("tx", 1), occurrence("tx", 2, "E" * 1000)]
    with pytest.raises(LogWriteError, match="event name"):
        LogWriter().event_values(occs, "committed")


def test_new_and_known_source_keys_are_encoded() -> None:
    from sentinel.log.records import encode_key

    new: Any = tuple.__new__
    occs = [
        new(Occurrence, ("E", t, T, T, ObjectRef("A", ("fresh-key-31", t % 2)), (), "tx", ()))
        for t in range(1, 5)
    ]
    rows = LogWriter().event_values(occs, "committed")
    assert [r[6] for r in rows] == [encode_key(("fresh-key-31", t % 2)) for t in range(1, 5)]
