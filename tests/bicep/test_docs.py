"""The examples of docs/bicepl.md run and print what their comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "bicepl.md"


def test_the_examples_of_the_bicepl_guide_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text("utf-8"), re.S)
    assert len(blocks) >= 2
    namespace: dict[str, object] = {"__name__": "bicepl_doc"}
    out = io.StringIO()
    promised: list[str] = []
    with contextlib.redirect_stdout(out):
        for block in blocks:  # later blocks continue the first
            promised += [m.strip() for m in re.findall(r"#\s*prints:\s*(.*)", block)]
            exec(compile(block, str(DOC), "exec"), namespace)
    printed = out.getvalue().splitlines()
    for line in promised:
        assert line in printed, f"docs/bicepl.md promises {line!r}; it printed {printed}"
