"""Tables of the raw, lossless message history shared by every SQL provider:
conversations, messages and message_parts (created by core revision `0002_history`), and
where each message came from, message_origins (`0007_message_origin`).

A message's text lives in `messages.content` (indexed for search); `message_parts`
carries the structure that text alone loses: reasoning, tool calls and tool results.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from memory.contract.types import utcnow
from memory.storage.store_models import BigIntPK


class Conversation(SQLModel, table=True):
    __tablename__ = "conversations"

    id: int | None = Field(default=None, sa_column=sa.Column(BigIntPK, primary_key=True))
    session_id: str = Field(sa_column=sa.Column(sa.String(255), nullable=False, unique=True))
    agent_id: str = Field(sa_column=sa.Column(sa.String(128), nullable=False))
    user_id: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    channel: str = Field(default="", sa_column=sa.Column(sa.String(32), nullable=False))
    title: str = Field(default="", sa_column=sa.Column(sa.String(200), nullable=False))
    archived: bool = Field(default=False, sa_column=sa.Column(sa.Boolean, nullable=False))
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    updated_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )


class MessageRow(SQLModel, table=True):
    __tablename__ = "messages"
    __table_args__ = (sa.UniqueConstraint("conversation_id", "seq", name="uq_messages_conv_seq"),)

    id: int | None = Field(default=None, sa_column=sa.Column(BigIntPK, primary_key=True))
    conversation_id: int = Field(
        sa_column=sa.Column(
            sa.BigInteger, sa.ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False
        )
    )
    seq: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    role: str = Field(sa_column=sa.Column(sa.String(16), nullable=False))
    content: str = Field(default="", sa_column=sa.Column(sa.Text, nullable=False))
    token_count: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False))
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )


class MessagePart(SQLModel, table=True):
    __tablename__ = "message_parts"
    __table_args__ = (sa.UniqueConstraint("message_id", "ordinal", name="uq_message_parts_ord"),)

    id: int | None = Field(default=None, sa_column=sa.Column(BigIntPK, primary_key=True))
    message_id: int = Field(
        sa_column=sa.Column(
            sa.BigInteger, sa.ForeignKey("messages.id", ondelete="CASCADE"), nullable=False
        )
    )
    ordinal: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    kind: str = Field(sa_column=sa.Column(sa.String(16), nullable=False))  # see PartKind
    # Model-chosen strings of any length: TEXT since core revision 0003_parts_text_ids.
    tool_call_id: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    tool_name: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    content: str = Field(default="", sa_column=sa.Column(sa.Text, nullable=False))


class MessageOriginRow(SQLModel, table=True):
    """Where a stored message came from (memory.contract.types.Origin; core revision
    `0007_message_origin`): at most one row per message, deleted with it."""

    __tablename__ = "message_origins"

    message_id: int = Field(
        sa_column=sa.Column(
            sa.BigInteger,
            sa.ForeignKey("messages.id", ondelete="CASCADE"),
            primary_key=True,
            autoincrement=False,
        )
    )
    channel: str = Field(sa_column=sa.Column(sa.String(32), nullable=False))
    chat_id: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    channel_message_id: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    thread_id: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger))
    # Who wrote it (a group member's user id; core revision 0013_group_consent).
    sender_id: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger))
