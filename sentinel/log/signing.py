"""Signing outbox rows, so a worker runs only what an application wrote.

Anyone who can write to the outbox table can make a worker run a rule of its rule
set with parameters of their choosing. With a signing key, the writer adds an
HMAC-SHA256 of the row's identity and payload (``payload["sig"]``), and the
worker refuses a row whose signature is missing or does not match: a forged or
altered row is marked ``failed`` and never runs.

What is signed: the rule's name, the idempotency key, the trigger's scope and
``t_occ``, and the payload without ``sig``, in a canonical JSON form (keys
sorted, ASCII, floats in the tagged form ``{"$float": "1e+16"}`` read as the
float they stand for) that survives what the log's JSON column does to a
document: PostgreSQL's ``jsonb`` reorders keys, and the column writes the floats
``jsonb`` would change (``1e16``, ``-0.0``) in that tagged form
(:class:`~sentinel.log.tables.LogJSON`).

The worker's status columns (``status``, ``attempts``, ``next_attempt_at``,
``claimed_by``, ``last_error``) are not signed: whoever can write the table can
still delay, fail, delete or re-run (set back to ``pending``) a genuine row.

Keys are given as text or bytes; the first key signs and every key verifies, so
a key can be replaced without failing rows written with the old one:
``OutboxSigner(new, old)``. The environment variable
:data:`OUTBOX_KEY_ENV` is where :func:`sentinel.orm.attach` looks when no key is
passed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["OUTBOX_KEY_ENV", "SIGNATURE_FIELD", "OutboxSigner", "key_from_env"]

#: The environment variable holding the outbox signing key.
OUTBOX_KEY_ENV: Final = "SENTINEL_OUTBOX_KEY"
#: The payload field holding the signature.
SIGNATURE_FIELD: Final = "sig"
_VERSION: Final = "v1"

Key = str | bytes


def key_from_env() -> str | None:
    """The key in :data:`OUTBOX_KEY_ENV` (``None`` when unset or empty)."""
    return os.environ.get(OUTBOX_KEY_ENV) or None


def _canonical(value: Any) -> Any:
    if isinstance(value, Mapping):
        if len(value) == 1:
            tagged = value.get("$float")
            if type(tagged) is str:
                number = float(tagged)
                if math.isfinite(number):  # NaN and infinities keep their tag
                    return number
            inner = value.get("$map")
            if isinstance(inner, Mapping):
                # a mapping's own keys (escaped by $map because one starts with
                # "$"): {"$float": "100"} there is the application's text, not a
                # tag, and "1e2" is another value
                return {"$map": {k: _canonical(v) for k, v in inner.items()}}
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def _message(rule: str, key: str, scope: str, t_occ: int, payload: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in payload.items() if k != SIGNATURE_FIELD}
    return json.dumps(
        [_VERSION, rule, key, scope, int(t_occ), _canonical(body)],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
        allow_nan=False,
    ).encode("ascii")


class OutboxSigner:
    """Signs and verifies outbox rows with HMAC-SHA256 (see the module docs).

    ``keys``: one or more keys (text or bytes, at least 16 bytes each); the first
    signs, all verify. Raises :class:`ValueError` for no key or a short one.
    Thread-safe.

    >>> signer = OutboxSigner("a long random secret, from config")
    >>> payload = signer.signed("R", "k" * 64, "txn-1", 7, {"constituents": []})
    >>> signer.verify("R", "k" * 64, "txn-1", 7, payload) is None
    True
    >>> signer.verify("R", "k" * 64, "txn-1", 8, payload)
    'its signature does not match'
    """

    __slots__ = ("_keys",)

    def __init__(self, *keys: Key) -> None:
        if not keys:
            raise ValueError("OutboxSigner needs at least one key")
        raw = [k.encode("utf-8") if isinstance(k, str) else bytes(k) for k in keys]
        for k in raw:
            if len(k) < 16:
                raise ValueError(
                    "an outbox signing key must be at least 16 bytes long (use a random "
                    "secret: python -c 'import secrets; print(secrets.token_hex(32))')"
                )
        self._keys = tuple(raw)

    def __repr__(self) -> str:
        return f"<OutboxSigner with {len(self._keys)} key(s)>"

    def sign(self, rule: str, key: str, scope: str, t_occ: int, payload: Mapping[str, Any]) -> str:
        """The signature of a row (``v1:`` and 64 hex digits)."""
        msg = _message(rule, key, scope, t_occ, payload)
        return f"{_VERSION}:" + hmac.new(self._keys[0], msg, hashlib.sha256).hexdigest()

    def signed(
        self, rule: str, key: str, scope: str, t_occ: int, payload: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``payload`` with its signature in :data:`SIGNATURE_FIELD`."""
        out = {k: v for k, v in payload.items() if k != SIGNATURE_FIELD}
        out[SIGNATURE_FIELD] = self.sign(rule, key, scope, t_occ, out)
        return out

    def verify(
        self, rule: str, key: str, scope: str, t_occ: int, payload: Mapping[str, Any]
    ) -> str | None:
        """``None`` when the row carries a signature made with one of the keys;
        else why not (for the entry's error)."""
        sig = payload.get(SIGNATURE_FIELD)
        if not sig:
            return "it is not signed"
        if not isinstance(sig, str) or not sig.startswith(f"{_VERSION}:"):
            return "its signature is not one this sentinel makes"
        try:
            msg = _message(rule, key, scope, t_occ, payload)
        except (TypeError, ValueError) as err:
            return f"its payload cannot be read ({err})"
        given = sig[len(_VERSION) + 1 :]
        for k in self._keys:
            if hmac.compare_digest(hmac.new(k, msg, hashlib.sha256).hexdigest(), given):
                return None
        return "its signature does not match"
