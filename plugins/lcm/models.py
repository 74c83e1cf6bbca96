"""Tables of the lcm provider (created by the Alembic revision `lcm_0001`).

The raw history (conversations, messages, message_parts) is shared core
(`memory.storage.history_models`); lcm adds the summary DAG and the ordered context window:

- `summaries`: one node of the DAG. `id` is the public `sum_<hex>` id; `pk` is an
  internal integer key that exists only so SQLite's FTS5 indexes can address a summary
  by rowid (a table without an INTEGER PRIMARY KEY may have its rowids renumbered by
  VACUUM). `descendant_count` / `descendant_token_count` count the *messages* the
  summary covers, transitively.
- `context_items`: the session's current context window, ordered by `ordinal`. Each item
  is a message or a summary (exactly one). Ordinals are sparse and never renumbered: an
  append takes max+1, and a compaction replaces a contiguous run of items by one summary
  item that takes the ordinal of the run's first item. `token_count` is copied from the
  message/summary (both immutable) so budgets are summed without joins.
- `summary_messages`: leaf summary -> its source messages, in order.
- `summary_parents`: condensed summary (`summary_id`) -> its constituent summaries
  (`child_id`), in order. Read backwards, the same rows give a summary's parents (the
  condensed summaries that contain it).
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from memory.contract.types import utcnow
from memory.storage.store_models import BigIntPK

SUMMARY_ID_LENGTH = 40


class Summary(SQLModel, table=True):
    __tablename__ = "summaries"

    pk: int | None = Field(default=None, sa_column=sa.Column(BigIntPK, primary_key=True))
    id: str = Field(sa_column=sa.Column(sa.String(SUMMARY_ID_LENGTH), nullable=False, unique=True))
    conversation_id: int = Field(
        sa_column=sa.Column(
            sa.BigInteger, sa.ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False
        )
    )
    kind: str = Field(sa_column=sa.Column(sa.String(16), nullable=False))  # leaf | condensed
    depth: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    content: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    token_count: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    earliest_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True))
    )
    latest_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True))
    )
    descendant_count: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    descendant_token_count: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )


class ContextItem(SQLModel, table=True):
    __tablename__ = "context_items"

    conversation_id: int = Field(
        sa_column=sa.Column(
            sa.BigInteger,
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            primary_key=True,
        )
    )
    ordinal: int = Field(sa_column=sa.Column(sa.BigInteger, primary_key=True))
    message_id: int | None = Field(
        default=None,
        sa_column=sa.Column(sa.BigInteger, sa.ForeignKey("messages.id", ondelete="CASCADE")),
    )
    summary_id: str | None = Field(
        default=None,
        sa_column=sa.Column(
            sa.String(SUMMARY_ID_LENGTH), sa.ForeignKey("summaries.id", ondelete="CASCADE")
        ),
    )
    token_count: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))


class SummaryMessage(SQLModel, table=True):
    __tablename__ = "summary_messages"

    summary_id: str = Field(
        sa_column=sa.Column(
            sa.String(SUMMARY_ID_LENGTH),
            sa.ForeignKey("summaries.id", ondelete="CASCADE"),
            primary_key=True,
        )
    )
    ordinal: int = Field(sa_column=sa.Column(sa.Integer, primary_key=True))
    message_id: int = Field(
        sa_column=sa.Column(
            sa.BigInteger, sa.ForeignKey("messages.id", ondelete="CASCADE"), nullable=False
        )
    )


class SummaryParent(SQLModel, table=True):
    __tablename__ = "summary_parents"

    summary_id: str = Field(
        sa_column=sa.Column(
            sa.String(SUMMARY_ID_LENGTH),
            sa.ForeignKey("summaries.id", ondelete="CASCADE"),
            primary_key=True,
        )
    )
    ordinal: int = Field(sa_column=sa.Column(sa.Integer, primary_key=True))
    child_id: str = Field(
        sa_column=sa.Column(
            sa.String(SUMMARY_ID_LENGTH),
            sa.ForeignKey("summaries.id", ondelete="CASCADE"),
            nullable=False,
        )
    )


summaries: sa.Table = Summary.__table__  # type: ignore[attr-defined]
context_items: sa.Table = ContextItem.__table__  # type: ignore[attr-defined]
summary_messages: sa.Table = SummaryMessage.__table__  # type: ignore[attr-defined]
summary_parents: sa.Table = SummaryParent.__table__  # type: ignore[attr-defined]
