"""Tables of the reflect job (created by the Alembic revision `reflect_0001`).

`reflect_watermarks`: per session, how far reflect has reviewed it and who is reviewing
it right now (a lease, so two reviewers never work on one session at once).
`reflect_slots`: one row per scheduled cycle that ran; the primary key is what makes a
cycle run once across replicas (see `bot.jobs.reflect.state.ReflectState.claim_slot`).
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from memory.contract.types import utcnow


class ReflectWatermark(SQLModel, table=True):
    __tablename__ = "reflect_watermarks"

    session_id: str = Field(sa_column=sa.Column(sa.String(255), primary_key=True))
    agent_id: str = Field(sa_column=sa.Column(sa.String(128), nullable=False))
    user_id: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    # The session's activity time (conversations.updated_at) the last successful review
    # covered; NULL until one succeeded.
    watermark: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=True)
    )
    reviewed_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=True)
    )
    # Last attempt, successful or not: candidates are taken oldest attempt first, so a
    # session that keeps failing cannot starve the others.
    attempted_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=True)
    )
    failures: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False))
    last_error: str = Field(default="", sa_column=sa.Column(sa.Text, nullable=False))
    lease_token: str = Field(default="", sa_column=sa.Column(sa.String(64), nullable=False))
    lease_until: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=True)
    )


class ReflectSlot(SQLModel, table=True):
    __tablename__ = "reflect_slots"

    agent_id: str = Field(sa_column=sa.Column(sa.String(128), primary_key=True))
    slot: int = Field(sa_column=sa.Column(sa.BigInteger, primary_key=True, autoincrement=False))
    claimed_by: str = Field(sa_column=sa.Column(sa.String(255), nullable=False))
    claimed_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    finished_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=True)
    )
    reviewed: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False))
    changes: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False))
    failed: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False))
