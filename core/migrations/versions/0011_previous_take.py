"""previous take: the segments a regeneration replaced, kept until the listener chooses

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 02:20:00.000000

`api.services.takes`: the rows of the segments as they were before the job's last regeneration; their files sit
beside the new ones (`<nnnn>.previous.flac`, `.previous.latents.npy`). Null when no earlier take is kept.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("previous_take", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("previous_take")
