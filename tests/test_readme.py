"""The README's example runs and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), re.S)


def test_readme_has_an_example() -> None:
    assert python_blocks()


def test_readme_examples_print_what_they_promise() -> None:
    # Blocks that promise output are complete programs; the others are fragments.
    runnable = [b for b in python_blocks() if "prints:" in b]
    assert runnable
    for block in runnable:
        promised = [m.strip() for m in re.findall(r"#\s*prints:\s*(.*)", block)]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(README), "exec"), {"__name__": "readme"})
        printed = out.getvalue().splitlines()
        for line in promised:
            assert line in printed, f"README promises {line!r}; it printed {printed}"
