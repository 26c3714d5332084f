"""script jobs: drafting from notes and cleaning up transcripts, run by the scripts workers

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 22:30:00.000000

A script job's input and result are text and live in its row; `attempt_log` records each model reply and
the reason it was rejected, so the api can show a job's attempts whenever it is asked.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "script_jobs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("task", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("attempt_log", sa.JSON(), nullable=False),
        sa.Column("script", sa.Text(), nullable=True),
        sa.Column("via", sa.String(length=16), nullable=True),
        sa.Column("notes", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("deliveries", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["owner_id"], ["api_keys.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("script_jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_script_jobs_owner_id"), ["owner_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_script_jobs_state"), ["state"], unique=False)
        batch_op.create_index(batch_op.f("ix_script_jobs_created_at"), ["created_at"], unique=False)


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("script_jobs")
