"""The suite on every Python sentinel supports (``pyproject.toml``'s classifiers).

``nox`` (installed by ``make dev``) runs the fast tier (everything but the slow and
Spark tests; PySpark is installed, since some fast tests import it) on 3.11, 3.12
and 3.13 in virtual environments of its own;
``nox -s tests-3.12`` runs one; ``nox -s tests -- tests/detector`` passes pytest
its arguments. ``make test`` runs the whole suite on the Python that made ``.venv``.
"""

from __future__ import annotations

import nox

PYTHONS = ["3.11", "3.12", "3.13"]
nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    session.install("-e", ".[dev,spark]")
    args = session.posargs or ["-m", "not slow and not spark", "tests"]
    session.run("pytest", "-n", "auto", *args)
