"""Regions, the chains of partitions nodes sit in: interned, so that equal chains
are one object, and read like tuples of their partitions."""

from __future__ import annotations

import pickle

import pytest

from sentinel.algebra import parse
from sentinel.detector.regions import ROOT


def test_equal_chains_are_one_object_and_read_as_tuples() -> None:
    outer, inner = parse("(a ; b) by k by j"), parse("(a ; b) by k")
    # Equal partitions parsed apart: one region all the same.
    r = ROOT.inside(outer).inside(inner)
    assert ROOT.inside(parse("(a ; b) by k by j")).inside(parse("(a ; b) by k")) is r
    assert r is not ROOT.inside(inner).inside(outer)
    assert tuple(r) == (outer, inner) and len(r) == 2 and r and not ROOT
    assert r[0] == outer and r[-1] == inner and r.keyed == inner
    assert r[:1] is r.parent is ROOT.inside(outer) and r[:0] is ROOT and r[:-1] is r.parent
    assert inner in r and parse("a by k") not in r
    assert pickle.loads(pickle.dumps(r)) is r
    with pytest.raises(IndexError):
        r[2]
    with pytest.raises(IndexError):
        r[1:]
