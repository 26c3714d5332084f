"""hand-backs: how many times a job's worker gave it back on a planned stop

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 09:00:00.000000

A worker asked to stop (SIGTERM, Ctrl-C, its server gone) stores what its jobs have and queues them again. That is
not a death: `worker_deaths` (and, for script jobs, the deaths the guard reads off `deliveries`) must not count it,
so the hand-backs are counted apart, in both tables.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("jobs", "script_jobs")


def upgrade() -> None:
    """Upgrade schema."""
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("handbacks", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    """Downgrade schema."""
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("handbacks")
