"""``sentinel.log.loggable.loggable_params``: the one entry point that decides
whether, and as what, an occurrence's parameters are logged (issue 30)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from sentinel.log import LogPolicy
from sentinel.log.loggable import loggable_params
from sentinel.occurrence import ObjectRef
from sentinel.params import (
    MAX_INT_BITS,
    MAX_STRING,
    UnloggableParameter,
    normalize,
    oversize_error,
)

EVENT = "Doc.edit:begin"


def _error_of(value: Any, param: str) -> str:
    """The message :func:`sentinel.params.normalize` gives for ``value``."""
    with pytest.raises(UnloggableParameter) as info:
        normalize(value, event=EVENT, param=param)
    return str(info.value)


@pytest.mark.parametrize("policy", [None, LogPolicy()])
def test_loggable_values_are_kept_as_they_are_in_the_same_dict(policy: LogPolicy | None) -> None:
    ref = ObjectRef("Doc", (1,))
    params: dict[str, Any] = {"a": 1, "b": 1.5, "c": "x", "d": None, "e": True, "f": ref}
    same = dict(params)
    assert loggable_params(policy, EVENT, params) is params
    assert params == same


def test_kept_values_are_normalized_in_place() -> None:
    params: dict[str, Any] = {"n": 1, "items": [1, [2]], "tags": {"a": {"b"}}}
    out = loggable_params(LogPolicy(), EVENT, params)
    assert out is params
    assert params["n"] == 1
    assert params["items"] == (1, (2,))
    assert isinstance(params["tags"], MappingProxyType)
    assert params["tags"]["a"] == frozenset({"b"})


def test_an_explicit_events_read_only_mapping_is_normalized_like_a_dict() -> None:
    params: dict[str, Any] = {"m": MappingProxyType({"a": [1]})}
    loggable_params(None, EVENT, params)
    assert params["m"] == {"a": (1,)}
    assert isinstance(params["m"], MappingProxyType)


def test_a_kept_unloggable_value_is_refused_naming_event_and_parameter() -> None:
    params: dict[str, Any] = {"ok": 1, "handle": object()}
    with pytest.raises(UnloggableParameter) as info:
        loggable_params(LogPolicy(), EVENT, params)
    assert (info.value.event, info.value.param) == (EVENT, "handle")
    assert "parameter 'handle' of Doc.edit:begin is a object" in str(info.value)


@pytest.mark.parametrize("action", ["exclude", "redact"])
def test_a_value_the_policy_leaves_out_is_never_refused_nor_changed(action: str) -> None:
    handle = object()
    body = "x" * (MAX_STRING + 1)
    policy = getattr(LogPolicy(), action)(EVENT, "handle", "body")
    params: dict[str, Any] = {"handle": handle, "body": body, "items": [1]}
    loggable_params(policy, EVENT, params)
    assert params["handle"] is handle
    assert params["body"] is body
    assert params["items"] == (1,)  # what the log keeps is still normalized


def test_a_kept_string_too_long_is_refused_as_normalize_refuses_it() -> None:
    body = "x" * (MAX_STRING + 1)
    with pytest.raises(UnloggableParameter) as info:
        loggable_params(LogPolicy(), EVENT, {"body": body})
    assert str(info.value) == _error_of(body, "body")


def test_a_kept_integer_too_large_is_refused_as_normalize_refuses_it() -> None:
    big = 1 << 4_000_001
    with pytest.raises(UnloggableParameter) as info:
        loggable_params(None, EVENT, {"n": big})
    assert str(info.value) == _error_of(big, "n")


def test_a_database_events_column_over_its_cap_is_refused_unless_left_out() -> None:
    blob = b"x" * 1_000_001
    params: dict[str, Any] = {"new": MappingProxyType({"id": 1, "blob": blob})}
    with pytest.raises(UnloggableParameter) as info:
        loggable_params(LogPolicy(), "Doc:update", params, checked_mappings=True)
    assert info.value.param == "new.blob"
    assert str(info.value) == str(oversize_error("Doc:update", "new.blob", blob))
    policy = LogPolicy().redact("Doc:update", "new.blob")
    assert loggable_params(policy, "Doc:update", params, checked_mappings=True) is params
    assert params["new"]["blob"] is blob


def test_checked_mappings_are_not_normalized_again() -> None:
    inner = MappingProxyType({"a": 1})
    params: dict[str, Any] = {"new": inner}
    loggable_params(None, "Doc:insert", params, checked_mappings=True)
    assert params["new"] is inner


def test_a_parameter_name_no_backend_keeps_is_refused() -> None:
    with pytest.raises(UnloggableParameter, match="parameter names must be strings"):
        loggable_params(LogPolicy(), EVENT, {"a\x00b": 1})


@pytest.mark.parametrize("sign", [1, -1])
def test_the_integer_cap_is_exactly_max_int_bits(sign: int) -> None:
    """The bit-length test takes what the old ``-2**N < v < 2**N`` took."""
    edge = sign * ((1 << MAX_INT_BITS) - 1)
    assert loggable_params(None, EVENT, {"n": edge})["n"] == edge
    assert normalize(edge) == edge
    over = sign * (1 << MAX_INT_BITS)
    with pytest.raises(UnloggableParameter, match="integers may hold at most"):
        loggable_params(None, EVENT, {"n": over})
    with pytest.raises(UnloggableParameter, match="integers may hold at most"):
        normalize(over)
    new = MappingProxyType({"n": over})
    with pytest.raises(UnloggableParameter, match="integers may hold at most"):
        loggable_params(None, "Doc:insert", {"new": new}, checked_mappings=True)
