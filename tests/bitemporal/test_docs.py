"""The examples of docs/bitemporal.md run and print what their comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "bitemporal.md"
#: The page's Python blocks, each self-contained, but those marked as needing
#: more than the page has (``<!-- docs-test: needs ... -->``: fragments, which
#: tests/test_docs.py compiles).
BLOCKS = [
    code
    for marker, code in re.findall(
        r"(<!-- docs-test: needs [^>]*-->\n)?```python\n(.*?)```", DOC.read_text("utf-8"), re.S
    )
    if not marker
]


def test_the_page_has_examples() -> None:
    assert BLOCKS


@pytest.mark.parametrize("block", BLOCKS, ids=[f"example{i}" for i in range(len(BLOCKS))])
def test_example_prints_what_it_promises(block: str) -> None:
    promised = [m.strip() for m in re.findall(r"#\s*prints:\s*(.*)", block)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(DOC), "exec"), {"__name__": "bitemporal_doc"})
    assert out.getvalue().splitlines() == promised
