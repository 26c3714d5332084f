"""a running job's ETA as its worker estimated it, and when

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 09:00:00.000000

The worker estimates a job's ETA from its measured speed (`core.progress_estimate.EtaEstimator`) and writes it with
the job's progress; the api's job view counts it down from `eta_at`, so the view and the job's events tell one ETA.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("eta_seconds", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("eta_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("eta_at")
        batch_op.drop_column("eta_seconds")
