"""segment resume: how many frames of a segment came from stored latents instead of the model

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 03:15:00.000000

A worker stores the latents of the segment it is generating every few frames; a worker that takes the job
over after a crash replays them and generates only the rest. `resumed_from_frame` records where it picked up
(0 when the segment was generated in one go).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("job_segments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("resumed_from_frame", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("job_segments", schema=None) as batch_op:
        batch_op.drop_column("resumed_from_frame")
