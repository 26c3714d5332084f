"""job revisions: a revision counter on jobs and the revision that made each segment

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 09:00:00.000000

Regenerating one turn of a finished job bumps `jobs.revision` and sets that turn's segments back to pending
with a new seed and the new revision; existing rows start at revision 0.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("revision", sa.Integer(), server_default="0", nullable=False))
    with op.batch_alter_table("job_segments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("revision", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("job_segments", schema=None) as batch_op:
        batch_op.drop_column("revision")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("revision")
