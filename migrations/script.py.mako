"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}

Sentinel revisions take the log's schema and table-name prefix as arguments (env.py
passes them) and must spell types literally: never import from sentinel.log.tables,
which describes only the newest revision. Add the revision to SCHEMA_REVISIONS and
bump SCHEMA_VERSION in sentinel/log/tables.py.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None


def upgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    ${upgrades if upgrades else "pass"}


def downgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    ${downgrades if downgrades else "pass"}
