"""What an erasure (memory/storage/forgetting.py `erase`) deletes of Telegram's own rows: the
updates parked in `telegram_inbox` that came from the erased memory's chat (unread
messages), and the answer texts `telegram_updates` keeps while they are owed. The
handled-update rows themselves stay, content-free (ids and times), so a redelivered
update is still recognised and not answered twice.

A memory's scope is a chat: a user's private chat (chat id = user id) or a group's
(the group's chat id), which is how both tables are matched. One bot serves one agent,
so the inbox, which knows bots and not agents, is matched by chat alone.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.channels.telegram.delivery.handled import telegram_updates
from bot.channels.telegram.delivery.inbox import telegram_inbox
from memory.storage import forgetting as fg
from memory.storage.forgetting import Owner

_MESSAGE_KEYS = ("message", "edited_message", "channel_post", "edited_channel_post")


def _chat_id(payload: str) -> int | None:
    try:
        update: Any = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(update, dict):
        return None
    for key in _MESSAGE_KEYS:
        message = update.get(key)
        if isinstance(message, dict) and isinstance(message.get("chat"), dict):
            chat = message["chat"].get("id")
            return chat if isinstance(chat, int) else None
    query = update.get("callback_query")
    if isinstance(query, dict) and isinstance(query.get("message"), dict):
        chat = query["message"].get("chat", {}).get("id")
        return chat if isinstance(chat, int) else None
    return None


async def erase_telegram_rows(conn: AsyncConnection, owner: Owner) -> dict[str, int]:
    rows = await conn.execute(
        sa.select(telegram_inbox.c.bot_id, telegram_inbox.c.update_id, telegram_inbox.c.payload)
    )
    parked = [(b, u) for b, u, p in rows if _chat_id(p) == owner.user_id]
    for bot_id, update_id in parked:
        await conn.execute(
            telegram_inbox.delete().where(
                telegram_inbox.c.bot_id == bot_id, telegram_inbox.c.update_id == update_id
            )
        )
    mine = sa.and_(
        telegram_updates.c.chat_id == owner.user_id,
        telegram_updates.c.session_id.like(f"{owner.agent_id}:%"),
    )
    owed = int(
        await conn.scalar(
            sa.select(sa.func.count()).where(mine, telegram_updates.c.answer.is_not(None))
        )
        or 0
    )
    await conn.execute(
        telegram_updates.update().where(mine).values(answer=None, resume=False, undelivered=False)
    )
    return {"unread Telegram update(s)": len(parked), "owed Telegram answer(s)": owed}


def register() -> None:
    fg.on_erase("telegram", erase_telegram_rows)
