"""What `/memory forget mine` forgets in a shared memory: every message a member wrote
there (found by `message_origins.sender_id`) and the bot's turns that answered them (its
tool calls, their results and its answer: they repeat and act on the member's words).
Messages stored before core revision 0013_group_consent carry no sender and are not
found (docs/OPERATIONS.md says what an operator can do about them)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from memory.contract.types import Owner
from memory.storage.history import conversations, messages, origins


async def member_messages(conn: AsyncConnection, owner: Owner, member: int) -> list[int]:
    """Ids of `member`'s messages in `owner`'s memory and of the bot's turns answering
    them, in order. One pass over the owner's messages (ids, roles and senders only)."""
    rows = await conn.stream(
        sa.select(messages.c.id, messages.c.conversation_id, messages.c.role, origins.c.sender_id)
        .join(conversations, conversations.c.id == messages.c.conversation_id)
        .outerjoin(origins, origins.c.message_id == messages.c.id)
        .where(conversations.c.user_id == owner.user_id, conversations.c.agent_id == owner.agent_id)
        .order_by(messages.c.conversation_id, messages.c.seq)
    )
    found: list[int] = []
    theirs = False  # whether the turn under way answers the member
    conversation = None
    async for msg_id, conv_id, role, sender in rows:
        if conv_id != conversation:
            conversation, theirs = conv_id, False
        if role == "user":
            theirs = sender is not None and int(sender) == member
        if theirs:
            found.append(int(msg_id))
    return found
