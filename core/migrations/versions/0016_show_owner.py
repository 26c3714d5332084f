"""what directories ask of a feed: the show's owner address, its type and lock, and an episode's season

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03 14:00:00.000000

Apple and Spotify verify who owns a feed by the address in `itunes:owner`, and the Podcast Index's `podcast:locked`
names it too; `itunes:type` says whether apps list a show newest first (episodic) or in order (serial); episodes
may be grouped in seasons (`itunes:season`, `podcast:season`). Shows stored before keep no address, episodic and
unlocked; their episodes, no season.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("shows", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner_email", sa.String(length=254), nullable=True))
        batch_op.add_column(sa.Column("show_type", sa.String(length=16), server_default="episodic", nullable=False))
        batch_op.add_column(sa.Column("locked", sa.Boolean(), server_default=sa.false(), nullable=False))
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("season", sa.Integer(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.drop_column("season")
    with op.batch_alter_table("shows", schema=None) as batch_op:
        batch_op.drop_column("locked")
        batch_op.drop_column("show_type")
        batch_op.drop_column("owner_email")
