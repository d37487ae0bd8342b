"""Fuzzing the parameter encoder (issue 11 item 3): any value either is refused
with :class:`~sentinel.UnloggableParameter` naming the event and the parameter,
or is normalized to a value that encodes to JSON, decodes back exactly (type and
value), and round-trips through every backend's log the same way. Nothing else
ever comes out (no ``TypeError``, ``ValueError``, ``RecursionError`` or database
error)."""

from __future__ import annotations

import datetime as dt
import enum
import json
import uuid
from decimal import Decimal
from itertools import count
from typing import Any

import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sentinel import ObjectRef, Occurrence
from sentinel.errors import UnloggableParameter
from sentinel.log import LogReader, LogWriter, migrate
from sentinel.log.encoding import _dumps, _params_text
from sentinel.log.records import encode_params
from sentinel.params import MAX_DEPTH, dumps, from_json, loads, normalize, to_json
from tests.orm.test_bad_values import canon


class Color(enum.Enum):
    RED = "\x00red"
    BLUE = 2**80


#: Strings biased to what backends refuse: NUL, surrogates, escapes, astral.
nasty_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(["\x00", "\ud800", "\udbff", "\udc00", "\udfff", "\\", '"', "$", "é"]),
        st.characters(codec=None),
    ),
    max_size=12,
)
ints = st.one_of(
    st.integers(),
    st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**400]),
    st.integers(0, 9).map(lambda i: -(10 ** (4300 + i)) + 1),  # beyond str()
)
floats = st.one_of(
    st.floats(),
    st.sampled_from([-0.0, 1e16, 1.5e300, 5e-324, float("nan"), float("inf")]),
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    ints,
    floats,
    nasty_text,
    st.binary(max_size=8),
    st.decimals(allow_nan=True),
    st.datetimes(timezones=st.one_of(st.none(), st.just(dt.UTC), st.timezones())),
    st.dates(),
    st.times(),
    st.timedeltas(),
    st.uuids(),
    st.sampled_from(list(Color)),
    st.builds(ObjectRef, nasty_text, st.tuples(st.integers(), nasty_text)),
    st.builds(object),
)
keys = st.one_of(nasty_text, st.integers(), st.none(), st.tuples(st.integers()))


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.frozensets(st.one_of(ints, nasty_text, st.booleans()), max_size=3),
        st.sets(st.one_of(ints, nasty_text), max_size=3),
        st.dictionaries(keys, children, max_size=3),
    )


values = st.recursive(leaves, containers, max_leaves=20)


def deep(depth: int) -> Any:
    value: Any = "\x00"
    for i in range(depth):
        value = [value] if i % 2 else {"$k": value}
    return value


deep_values = st.integers(0, 3 * MAX_DEPTH).map(deep)


def encode(value: Any) -> Any:
    """normalize, then JSON text and back: the normalized value, or the
    documented refusal."""
    try:
        v = normalize(value, event="Fuzz", param="p")
    except UnloggableParameter as err:
        assert err.event == "Fuzz" and err.param.startswith("p")
        assert "Fuzz" in str(err)
        return err
    text = dumps({"p": v})
    json.loads(text)  # plain JSON: no NaN, nothing but ASCII
    assert text.isascii()
    assert canon(loads(text)["p"]) == canon(v)
    assert canon(from_json(to_json(v))) == canon(v)
    # the writer's shortcut for plain values writes exactly the tagged form
    assert _params_text({"p": v}, "Fuzz") == _dumps(encode_params({"p": v}, event="Fuzz"))
    return v


@settings(max_examples=1500, deadline=None)
@given(st.one_of(values, deep_values))
@example(float("-nan"))  # found on Python 3.13: the sign of a NaN was lost
def test_any_value_is_refused_or_round_trips_exactly(value: Any) -> None:
    encode(value)


_T = count(1)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.one_of(values, deep_values), min_size=1, max_size=5))
def test_every_backend_keeps_what_normalize_accepts(engine: sa.Engine, batch: list[Any]) -> None:
    """Each accepted value, written by the writer (the ORM's path) and read
    back, is what normalize made of it; one batch with every value of a
    draw, so a value the database refused would fail the whole write."""
    migrate.upgrade(engine)
    accepted = [v for v in map(encode, batch) if not isinstance(v, UnloggableParameter)]
    if not accepted:
        return
    first = next(_T) * 10
    occs = [
        Occurrence("Fuzz", first + i, 0.0, params={"p": v}, scope="fuzz")
        for i, v in enumerate(accepted)
    ]
    with engine.begin() as conn:
        LogWriter().write(conn, occs)
    with LogReader(engine) as r:
        got = {o.t_occ: o.params["p"] for o, _, _ in r.occurrences()}
    assert [canon(got[o.t_occ]) for o in occs] == [canon(v) for v in accepted]


def test_examples_of_each_tag() -> None:
    """The forms the log stores, spelled out (an independent check of the
    encoder's choices)."""
    assert to_json("a\x00") == {"$str": "a\\x00"}
    assert to_json("\ud800") == {"$str": "\\ud800"}
    assert to_json("\U0001f600") == "\U0001f600"  # a valid pair is plain text
    assert to_json(2**63) == {"$int": "0x8000000000000000"}
    assert to_json(2**63 - 1) == 2**63 - 1
    assert to_json(1e16) == {"$float": "1e+16"}
    assert to_json(1.5e-7) == 1.5e-7
    assert to_json(-1e16) == {"$float": "-1e+16"}
    assert to_json(9999999999999998.0) == 9999999999999998.0
    assert to_json(-0.0) == {"$float": "-0.0"}
    assert to_json(frozenset({2, 1})) == {"$set": [1, 2]}
    assert normalize({2, 1}) == frozenset({1, 2})
    assert type(from_json(to_json(normalize({"a"})))) is frozenset
    assert to_json(Decimal("NaN")) == {"$decimal": "NaN"}
    assert to_json(uuid.UUID(int=0)) == {"$uuid": str(uuid.UUID(int=0))}
    assert to_json(ObjectRef("A\x00", (1,))) == {"$ref": [{"$str": "A\\x00"}, [1]]}
