"""script job heartbeat: a running script job proves its scripts worker alive

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 02:00:00.000000

Refreshed every `heartbeat_seconds` while a scripts worker runs the job; a running job silent for
`stale_after_seconds` is taken back by any scripts worker (`workers.script_execution.take_back_script_jobs`), so a
worker on a host that never returns does not leave its jobs running for ever. Null for jobs never run.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("script_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("script_jobs", schema=None) as batch_op:
        batch_op.drop_column("heartbeat_at")
