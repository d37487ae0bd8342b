"""Which build of sentinel is running: compiled (mypyc) or pure Python.

The hot path's modules (:data:`HOT_PATH`) are compiled with mypyc when sentinel is
installed on a machine with a C compiler (``hatch_build.py`` at the top of the
source tree); the same ``.py`` files run interpreted otherwise, or when
``SENTINEL_PURE=1`` was set at install time. Semantics are the same: the compiled
modules are those files, compiled.

``COMPILED`` says whether this process runs compiled modules, ``MODULES`` which
(found by where Python loads each module from, not by what the build meant to
do), ``NOTE`` what the build said (why it is pure, when it is). ``describe()``
is the one line ``sentinel --version`` and the benchmarks print.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
from pathlib import Path

__all__ = ["COMPILED", "HOT_PATH", "MODULES", "NOTE", "describe", "stale"]

#: The modules the compiled build compiles, chosen by measurement
#: (docs/performance.md, "The compiled build"). ``hatch_build.py`` reads this
#: tuple from this file's text, so keep it a literal.
HOT_PATH: tuple[str, ...] = ("sentinel.rules.scheduler",)

_EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)
#: Written by the build hook beside this file: what the build did.
_RECORD = Path(__file__).with_name("_build_record.json")


def _origin(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except ImportError:
        return None
    return spec.origin if spec is not None else None


def _compiled(name: str) -> bool:
    origin = _origin(name)
    return origin is not None and origin.endswith(_EXTENSIONS)


def _record() -> dict[str, object]:
    try:
        data = json.loads(_RECORD.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


#: The hot-path modules this process loads compiled.
MODULES: tuple[str, ...] = tuple(name for name in HOT_PATH if _compiled(name))
#: Whether any module of sentinel runs compiled.
COMPILED: bool = bool(MODULES)
_RECORDED = _record()
#: What the build said about itself (e.g. why it is pure), or ``None``.
NOTE: str | None = str(_RECORDED["note"]) if _RECORDED.get("note") else None


def stale() -> list[str]:
    """Compiled modules of an editable install whose source changed after they
    were compiled (their ``.py`` is newer than the extension loaded instead):
    the process runs old code for them until sentinel is installed again."""
    if _RECORDED.get("mode") != "editable":
        return []
    out = []
    for name in MODULES:
        origin = _origin(name)
        if origin is None:
            continue
        source = os.path.join(os.path.dirname(origin), name.rsplit(".", 1)[1] + ".py")
        try:
            if os.stat(source).st_mtime > os.stat(origin).st_mtime:
                out.append(name)
        except OSError:
            continue
    return out


def describe() -> str:
    """One line: which build this is, and what is compiled."""
    if COMPILED:
        text = f"compiled build (mypyc): {len(MODULES)} of {len(HOT_PATH)} hot-path modules"
        old = stale()
        if old:
            text += f"; STALE (source changed since compiled, reinstall): {', '.join(old)}"
        return text
    return "pure-Python build" + (f" ({NOTE})" if NOTE else "")


def _main() -> int:
    """``python -m sentinel._build``: print :func:`describe`; with
    ``SENTINEL_EXPECT_BUILD=compiled|pure`` set, exit 1 unless this is that build."""
    print(f"sentinel: {describe()}")
    expected = os.environ.get("SENTINEL_EXPECT_BUILD")
    if expected and expected != ("compiled" if COMPILED else "pure"):
        print(f"sentinel: expected the {expected} build (SENTINEL_EXPECT_BUILD)")
        return 1
    return 1 if stale() else 0


if __name__ == "__main__":
    raise SystemExit(_main())
