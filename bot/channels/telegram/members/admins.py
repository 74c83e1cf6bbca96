"""Whether a user administers a group, asked of Telegram (`getChatMember`) and kept
for `ADMIN_TTL_S`: the group's creator and administrators may use the group-wide memory
commands there (`/memory forget ...`, memory/actions/commands.py `group_admin`), besides
the bot's operators (`telegram.admin_ids`).

A short cache: a demoted admin keeps the right for at most a minute, and a burst of
commands costs one request. An answer Telegram does not give (network, a chat the bot
left) counts as "not an admin" and is not kept, so the next command asks again."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

from telegram import Bot, ChatMember
from telegram.error import TelegramError

log = logging.getLogger(__name__)

ADMIN_TTL_S = 60.0
KEPT = 10_000  # (chat, user) answers kept, least recently asked dropped first
ADMIN_STATUSES = (ChatMember.OWNER, ChatMember.ADMINISTRATOR)


class ChatAdmins:
    def __init__(self, ttl_s: float = ADMIN_TTL_S) -> None:
        self.ttl_s = ttl_s
        self._known: OrderedDict[tuple[int, int], tuple[float, bool]] = OrderedDict()

    async def is_admin(self, bot: Bot, chat_id: int, user_id: int) -> bool:
        key = (chat_id, user_id)
        now = time.monotonic()
        hit = self._known.get(key)
        if hit is not None and hit[0] > now:
            self._known.move_to_end(key)
            return hit[1]
        try:
            member = await bot.get_chat_member(chat_id, user_id)
        except TelegramError as exc:
            log.info("could not ask whether %s administers chat %s: %s", user_id, chat_id, exc)
            return False
        answer = member.status in ADMIN_STATUSES
        self._known[key] = (now + self.ttl_s, answer)
        self._known.move_to_end(key)
        while len(self._known) > KEPT:
            self._known.popitem(last=False)
        return answer
