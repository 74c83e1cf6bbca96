"""Whose words a group's memory keeps: a member who opted out (`/memory optout`,
memory/consent/optouts.py) has their messages there answered without being stored
(`Conversations.chat_unstored`), and a reply to one of their messages is stored without
their words (`sessions.stored_text`'s `hide_replied`)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine
from telegram import Message

from memory.consent.optouts import opted_out
from memory.contract.types import Owner


def author_id(message: Message) -> int | None:
    """The member who wrote `message`; None for one posted as a chat (an anonymous
    admin, a channel), which no member can claim."""
    if message.sender_chat is not None or message.from_user is None:
        return None
    return message.from_user.id


async def keeps_out(engine: AsyncEngine | None, owner: Owner, message: Message | None) -> bool:
    """Whether `message`'s author opted out of `owner`'s memory."""
    if engine is None or message is None:
        return False
    author = author_id(message)
    return author is not None and await opted_out(engine, owner, author)
