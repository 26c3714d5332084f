"""shows and episodes: a key's podcasts, and the jobs each publishes in its feed

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 09:00:00.000000

`core.models.Show` (its feed's token, its Podcasting 2.0 guid, its artwork's format) and `core.models.Episode` (a
job in a show: title, description, number, when it was first published). Deleting a show deletes its episode rows,
never the jobs; deleting a job deletes its episode row.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "shows",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("author", sa.String(length=200), nullable=False),
        sa.Column("language", sa.String(length=35), nullable=False),
        sa.Column("category", sa.String(length=100), nullable=False),
        sa.Column("explicit", sa.Boolean(), nullable=False),
        sa.Column("feed_token", sa.String(length=64), nullable=False),
        sa.Column("podcast_guid", sa.String(length=36), nullable=False),
        sa.Column("artwork_format", sa.String(length=8), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["owner_id"], ["api_keys.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("shows", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_shows_owner_id"), ["owner_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_shows_feed_token"), ["feed_token"], unique=True)
    op.create_table(
        "episodes",
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("show_id", sa.String(length=32), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("number", sa.Integer(), nullable=True),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["show_id"], ["shows.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id"),
    )
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_episodes_show_id"), ["show_id"], unique=False)


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("episodes")
    op.drop_table("shows")
