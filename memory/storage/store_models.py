"""Tables of the shared stores (memory/storage/stores.py), one model per table.

The schema itself is created by the Alembic revision `0001_core`; these models are how
code reads and writes it.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from memory.contract.types import utcnow

# SQLite only auto-increments an `INTEGER PRIMARY KEY`; PostgreSQL wants BIGINT.
BigIntPK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class MemoryState(SQLModel, table=True):
    """Profile, soul and constraints of one (user, agent), with one version counter."""

    __tablename__ = "memory_state"

    user_id: int = Field(sa_column=sa.Column(sa.BigInteger, primary_key=True))
    agent_id: str = Field(sa_column=sa.Column(sa.String(128), primary_key=True))
    profile: str = Field(default="", sa_column=sa.Column(sa.Text, nullable=False, default=""))
    soul: str = Field(default="", sa_column=sa.Column(sa.Text, nullable=False, default=""))
    # JSON list of {id, text, created_at}, kept as text so both databases agree byte-for-byte.
    constraints: str = Field(
        default="[]", sa_column=sa.Column(sa.Text, nullable=False, default="[]")
    )
    version: int = Field(default=0, sa_column=sa.Column(sa.BigInteger, nullable=False))
    updated_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )


class MemoryChangelog(SQLModel, table=True):
    """One row per write to the shared stores (and per compaction, scope `compaction`)."""

    __tablename__ = "memory_changelog"

    id: int | None = Field(default=None, sa_column=sa.Column(BigIntPK, primary_key=True))
    user_id: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    agent_id: str = Field(sa_column=sa.Column(sa.String(128), nullable=False))
    session_id: str = Field(default="", sa_column=sa.Column(sa.String(255), nullable=False))
    scope: str = Field(sa_column=sa.Column(sa.String(32), nullable=False))
    action: str = Field(sa_column=sa.Column(sa.String(32), nullable=False))
    source: str = Field(sa_column=sa.Column(sa.String(32), nullable=False))
    version_before: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger))
    version_after: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger))
    before_text: str = Field(default="", sa_column=sa.Column(sa.Text, nullable=False))
    after_text: str = Field(default="", sa_column=sa.Column(sa.Text, nullable=False))
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )


class SessionSnapshotRow(SQLModel, table=True):
    """The memory version a session sees (frozen at its first turn)."""

    __tablename__ = "session_snapshots"

    session_id: str = Field(sa_column=sa.Column(sa.String(255), primary_key=True))
    user_id: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    agent_id: str = Field(sa_column=sa.Column(sa.String(128), nullable=False))
    version: int = Field(default=0, sa_column=sa.Column(sa.BigInteger, nullable=False))
    updated_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
