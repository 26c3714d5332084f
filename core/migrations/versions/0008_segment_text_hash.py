"""segment text hash: what a stored segment says, so its audio is never paired with other words

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 23:00:00.000000

Each segment row keeps the SHA-256 of its text (`script_text.plan.Segment.text_hash`). A run whose plan hashes a
segment differently (after an upgrade that spells or splits a script otherwise) generates that segment again
instead of laying out audio of other words. Rows stored before this migration have none and are trusted once.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("job_segments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("text_hash", sa.String(length=64), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("job_segments", schema=None) as batch_op:
        batch_op.drop_column("text_hash")
