"""whom a job's last worker death was charged to, so that a holder that wakes (it was paused) takes it back

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03 15:00:00.000000

A worker that goes silent past `stale_after_seconds` is taken for dead and its jobs are charged a death (a suspect
runs alone next). A paused process (SIGSTOP, a frozen VM) that wakes finds its job gone: only a process's death is a
death, so the charge is taken back, which needs to know whom it was charged to. Jobs stored before carry none.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("death_charged_to", sa.String(length=200), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("death_charged_to")
