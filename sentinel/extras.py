"""sentinel's distribution name and optional dependency sets ("extras"), and the
check that names the right one when a feature's packages are missing.

The import package is ``sentinel``; the distribution on the package index is
``sqlalchemy-sentinel`` (``sentinel`` there is an unrelated project). Extras:
``replay`` (local replay and the Parquet export: pyarrow), ``spark``
(the Spark engine: ``replay`` plus PySpark and pandas), ``postgresql``,
``mysql`` (database drivers), ``ui`` (``sentinel ui``: Starlette, Jinja2,
uvicorn) and ``dev``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from sentinel.errors import DISTRIBUTION, MissingExtraError

__all__ = ["DISTRIBUTION", "EXTRAS", "require"]

#: The modules each extra brings, by import name.
EXTRAS: dict[str, tuple[str, ...]] = {
    "replay": ("pyarrow",),
    "spark": ("pyarrow", "pyspark", "pandas"),
    "postgresql": ("psycopg",),
    "mysql": ("pymysql",),
    "ui": ("starlette", "jinja2", "uvicorn"),
}


def require(extra: str, feature: str) -> list[ModuleType]:
    """Import the modules of ``extra`` and return them; raise
    :class:`~sentinel.errors.MissingExtraError` naming ``feature`` and the extra
    to install when one is missing."""
    modules = []
    for name in EXTRAS[extra]:
        try:
            modules.append(importlib.import_module(name))
        except ImportError as err:
            raise MissingExtraError(feature, extra, err.name or name) from err
    return modules


def extra_for_module(name: str | None) -> str | None:
    """The extra that brings the top-level module ``name`` (the first that
    does), if any."""
    top = (name or "").partition(".")[0]
    for extra, modules in EXTRAS.items():
        if top in modules:
            return extra
    return None
