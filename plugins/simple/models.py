"""The simple provider's own table: one compact marker per compaction.

A marker says: messages of `conversation_id` up to and including `through_seq` are
replaced in the working context by `summary` (also stored in the user's notes file as
the Archive entry `archive_name`). The messages themselves stay in the shared history.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from memory.contract.types import utcnow
from memory.storage.store_models import BigIntPK


class SimpleCompaction(SQLModel, table=True):
    __tablename__ = "simple_compactions"

    id: int | None = Field(default=None, sa_column=sa.Column(BigIntPK, primary_key=True))
    conversation_id: int = Field(
        sa_column=sa.Column(
            sa.BigInteger, sa.ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False
        )
    )
    through_seq: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    summary: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    archive_name: str = Field(sa_column=sa.Column(sa.String(200), nullable=False))
    archived_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    messages_compacted: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False))
    source_tokens: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False))
