"""The ``env.py`` recipe of docs/eventlog.md, as printed there, in an application's
alembic environment: ``alembic upgrade head`` creates sentinel's tables and
records their revision, and running it again changes nothing, whether or not the
application has revisions of its own yet, on every backend."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from sentinel.log import migrate
from sentinel.log.tables import SCHEMA_VERSION, log_tables

DOC = Path(__file__).resolve().parents[2] / "docs" / "eventlog.md"


def documented_recipe() -> str:
    """The python block of "From your env.py", dedented."""
    text = DOC.read_text("utf-8")
    section = text[text.index("**From your `env.py`**") :]
    block = re.search(r"```python\n(.*?)^\s*```", section, re.S | re.M)
    assert block is not None
    return textwrap.dedent(block.group(1))


ENV_HEAD = """\
import sqlalchemy as sa
from alembic import context

config = context.config
target_metadata = sa.MetaData()   # the application's models
connectable = sa.create_engine(config.get_main_option("sqlalchemy.url"),
                               poolclass=sa.pool.NullPool)
"""

APP_REVISION = '''\
"""app tables"""
import sqlalchemy as sa
from alembic import op

revision = "a1"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table("app_items", sa.Column("id", sa.Integer, primary_key=True))


def downgrade():
    op.drop_table("app_items")
'''


def application(root: Path, db_url: str, *, revisions: bool) -> Config:
    """An application's alembic environment whose env.py is the documented recipe."""
    versions = root / "migrations" / "versions"
    versions.mkdir(parents=True)
    (root / "migrations" / "env.py").write_text(ENV_HEAD + documented_recipe())
    if revisions:
        (versions / "a1_items.py").write_text(APP_REVISION)
    ini = root / "alembic.ini"
    ini.write_text(
        f"[alembic]\nscript_location = {root / 'migrations'}\n"
        f"sqlalchemy.url = {db_url.replace('%', '%%')}\n"
    )
    return Config(str(ini))


def state(engine: sa.Engine) -> tuple[list[str], str | None, bool]:
    """The application's recorded revisions, sentinel's, and whether every
    sentinel table exists."""
    with engine.connect() as conn:
        names = set(sa.inspect(conn).get_table_names())
        app = (
            list(conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalars())
            if "alembic_version" in names
            else []
        )
    return app, migrate.current(engine), set(log_tables().names) <= names


def test_the_recipe_is_the_documented_one() -> None:
    recipe = documented_recipe()
    assert "context.run_migrations()" in recipe and "migrate.upgrade(connection)" in recipe


@pytest.mark.parametrize("revisions", [False, True], ids=["no-app-revisions", "app-revision"])
def test_upgrade_head_twice(
    tmp_path: Path, db_url: str, engine: sa.Engine, revisions: bool
) -> None:
    cfg = application(tmp_path, db_url, revisions=revisions)
    expected = (["a1"] if revisions else [], SCHEMA_VERSION, True)

    command.upgrade(cfg, "head")
    assert state(engine) == expected

    command.upgrade(cfg, "head")  # nothing to do, and no "table already exists"
    assert state(engine) == expected
