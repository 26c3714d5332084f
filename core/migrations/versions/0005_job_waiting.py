"""job waiting: a job its worker holds while it waits for the worker's quarantine

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 15:00:00.000000

A worker runs many jobs at once; a job that was running when its worker died runs its next attempt alone, and
the jobs its worker takes meanwhile wait (held, but not generating). A worker death while a job waits is not
that job's doing, so it is not counted against it (`worker_deaths`).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("waiting", sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("waiting")
