"""a show's feed as last served: a digest of what it said, and when that last changed (its Last-Modified)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 02:30:00.000000

The feed's Last-Modified had been the newest of the show's and its episodes' times, which an episode taken out, a
job deleted or purged, or a regenerated MP3 did not move: a podcast app asking `If-Modified-Since` kept a stale
feed. The feed route now keeps a digest of what each answer said and pointed at, and moves `feed_changed_at` to
now whenever it differs (`api.services.feed_files`). Both stay null until the feed is next served.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("shows", schema=None) as batch_op:
        batch_op.add_column(sa.Column("feed_digest", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("feed_changed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("shows", schema=None) as batch_op:
        batch_op.drop_column("feed_changed_at")
        batch_op.drop_column("feed_digest")
