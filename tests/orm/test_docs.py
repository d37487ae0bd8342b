"""The complete programs of docs/orm.md (the blocks that say what they print)
run and print what their comments say; the page's other blocks are fragments."""

from __future__ import annotations

import contextlib
import io
import re
import sys
import types
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "orm.md"
PROGRAMS = [
    b for b in re.findall(r"```python\n(.*?)```", DOC.read_text("utf-8"), re.S) if "# prints:" in b
]


def test_the_page_has_programs() -> None:
    assert len(PROGRAMS) >= 2


@pytest.mark.parametrize("block", PROGRAMS, ids=[f"program{i}" for i in range(len(PROGRAMS))])
def test_program_prints_what_it_promises(block: str) -> None:
    pytest.importorskip("aiosqlite")
    promised = [m.strip() for m in re.findall(r"#\s*prints:\s*(.*)", block)]
    out = io.StringIO()
    # a module of its own, as a program has: SQLAlchemy reads its mapped
    # classes' annotations in their module
    module = types.ModuleType("orm_doc")
    sys.modules["orm_doc"] = module
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(DOC), "exec"), module.__dict__)
    finally:
        del sys.modules["orm_doc"]
    assert out.getvalue().splitlines() == promised
