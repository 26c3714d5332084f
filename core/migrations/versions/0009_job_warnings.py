"""job warnings: what in a submitted script is likely a typo, shown with the job

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30 23:30:00.000000

`script_text.parser.script_warnings` of the script as submitted ([{"line", "message"}]); null for jobs submitted before.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("warnings", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("warnings")
