"""The two ways an occurrence's JSON is made agree: orjson for plain values,
the tagged encoder (``sentinel.params``) for the rest.

``batch_elements`` hands an occurrence whose parameters are plain (strings
without NUL, finite floats under 1e16 and not -0.0, 64-bit integers, booleans,
None, and read-only mappings of such) to orjson in one call; anything else
takes ``_params_text``, which tags what JSON (or JSONB) would not keep. Both
must give the same JSON values, and what orjson is not given must be what the
tagged encoder makes.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sentinel.log import inserts
from sentinel.log.encoding import _params_text

T = 1_700_000_000.25


def element(params: dict[str, Any], *, fast: bool) -> Any:
    row = ("tx", 1, "E", T, T + 1.0, "Account", "[1]", params, "committed", None)
    if not fast:
        saved = inserts._plain
        inserts._plain = lambda p: False  # type: ignore[assignment]
        try:
            groups = inserts.batch_elements([row])
        finally:
            inserts._plain = saved
    else:
        groups = inserts.batch_elements([row])
    [(_, _, text)] = groups[("tx", "committed", None)]
    return json.loads(text)


#: text JSON keeps as it is: no NUL, no lone surrogate
clean = st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00")
plain_values = st.one_of(
    st.text(alphabet=clean),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15),
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    st.none(),
)


@given(
    st.dictionaries(
        st.text(alphabet=clean, min_size=1, max_size=8),
        st.one_of(
            plain_values,
            st.dictionaries(
                st.text(
                    alphabet=st.characters(
                        blacklist_categories=["Cs"], blacklist_characters="\x00"
                    ),
                    min_size=1,
                    max_size=5,
                ).filter(lambda k: not k.startswith("$")),
                plain_values,
                max_size=3,
            ).map(MappingProxyType),
        ),
        max_size=5,
    )
)
def test_orjson_and_the_tagged_encoder_give_the_same_json(params: dict[str, Any]) -> None:
    params = {k: v for k, v in params.items() if not (type(v) is float and v == 0.0)}
    assert inserts._plain(params)
    assert element(params, fast=True) == element(params, fast=False)


@pytest.mark.parametrize(
    "value",
    [
        "nul\x00inside",
        -0.0,
        1e16,
        math.inf,
        2**64,
        dt.date(2024, 1, 2),
        MappingProxyType({"$ref": 1}),
        MappingProxyType({"at": dt.datetime(2024, 1, 2, tzinfo=dt.UTC)}),
        (1, 2),
    ],
    ids=repr,
)
def test_what_json_would_not_keep_takes_the_tagged_encoder(value: Any) -> None:
    params = {"v": value}
    assert not inserts._plain(params)
    assert element(params, fast=True)[6] == json.loads(_params_text(params, "E"))


def test_a_parameter_name_json_would_not_keep_is_refused_either_way() -> None:
    from sentinel.params import UnloggableParameter

    for params in ({"a\x00": 1}, {"v": MappingProxyType({"a\x00": 1})}):
        assert not inserts._plain(params)
        with pytest.raises(UnloggableParameter):
            element(params, fast=True)


def test_a_lone_surrogate_falls_back_to_the_tagged_encoder() -> None:
    params = {"v": "\ud800"}
    assert element(params, fast=True)[6] == json.loads(_params_text(params, "E"))
