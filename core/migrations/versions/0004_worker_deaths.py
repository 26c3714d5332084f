"""worker deaths: how many attempts at a job ended with their worker dead

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 13:30:00.000000

A job whose attempts keep coinciding with a worker's death (a native crash, a kill) is failed once they
reach `VOXCAST_MAX_WORKER_DEATHS`, instead of being re-enqueued forever and taking every worker down with it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("worker_deaths", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("worker_deaths")
