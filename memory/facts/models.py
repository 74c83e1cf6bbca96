"""Tables of the fact store, created by core revision `0015_facts` (evidence roles:
`0016_fact_evidence_role`)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from memory.contract.types import utcnow
from memory.storage import history_models as _history  # noqa: F401  (the FK target, messages)


class FactRow(SQLModel, table=True):
    __tablename__ = "memory_facts"

    id: str = Field(sa_column=sa.Column(sa.String(32), primary_key=True))
    user_id: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    agent_id: str = Field(sa_column=sa.Column(sa.String(128), nullable=False))
    key: str = Field(sa_column=sa.Column(sa.String(64), nullable=False))
    value: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    state: str = Field(sa_column=sa.Column(sa.String(16), nullable=False))
    valid_from: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    valid_to: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    version_from: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    version_to: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger))
    source: str = Field(sa_column=sa.Column(sa.String(32), nullable=False))
    session_id: str = Field(default="", sa_column=sa.Column(sa.String(255), nullable=False))
    replaced_by: str | None = Field(default=None, sa_column=sa.Column(sa.String(32)))
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )


class FactEvidenceRow(SQLModel, table=True):
    __tablename__ = "memory_fact_evidence"

    fact_id: str = Field(
        sa_column=sa.Column(
            sa.String(32), sa.ForeignKey("memory_facts.id", ondelete="CASCADE"), primary_key=True
        )
    )
    message_id: int = Field(
        sa_column=sa.Column(
            sa.BigInteger,
            sa.ForeignKey("messages.id", ondelete="CASCADE"),
            primary_key=True,
            autoincrement=False,
        )
    )
    # SUPPORT: the message says the fact; RETRACTION: it says the fact stopped.
    role: str = Field(
        default="support",
        sa_column=sa.Column(sa.String(16), nullable=False, server_default="support"),
    )


SUPPORT = "support"
RETRACTION = "retraction"


facts: sa.Table = FactRow.__table__  # type: ignore[attr-defined]
evidence: sa.Table = FactEvidenceRow.__table__  # type: ignore[attr-defined]
