"""job storage: when the retention policy removed a job's segments, and the bytes a job's files take

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 20:00:00.000000

A job that has ended keeps its segments (audio and latents) so that a turn can be regenerated; with
`VOXCAST_KEEP_INTERMEDIATES_DAYS` set they are removed that long after the job ended, and the job records when:
from then on it can no longer be regenerated, and says so. `storage_bytes` is what the job's folder holds (or
will hold, while it runs), so a key's usage and quota are one query.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("intermediates_removed_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("storage_bytes", sa.BigInteger(), server_default="0", nullable=False))
        batch_op.create_index("ix_jobs_finished_at", ["finished_at"], unique=False)


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_finished_at")
        batch_op.drop_column("storage_bytes")
        batch_op.drop_column("intermediates_removed_at")
