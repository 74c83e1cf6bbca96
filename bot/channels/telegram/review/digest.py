"""The digest of reflect's changes, sent after a reflect cycle changed someone's memory:
the `/memory review` listing with its Keep / Revert buttons, in a private chat only,
when the user has not turned digests off (`/memory review off`) and something is
undecided. Nothing is sent to a group unprompted: its memory belongs to every member.
"""

from __future__ import annotations

import logging
from typing import Any

from telegram import Bot

from bot.channels.telegram.delivery.sent import Target
from bot.channels.telegram.render.replies import send_plain_reply
from bot.channels.telegram.review.buttons import review_buttons
from bot.channels.telegram.sessions import CHANNEL
from memory.actions import changes
from memory.actions.spec import Call
from memory.contract.types import Session

log = logging.getLogger(__name__)
MAX_MESSAGE = 3900  # bot/channels/telegram/channel.py's LIMITS


async def send_digest(bot: Bot, conversations: Any, session: Session) -> None:
    """Send `session`'s user the digest, if one is due (module doc)."""
    if session.channel != CHANNEL or session.user_id <= 0:  # a group's ids are negative
        return
    text = await changes.digest_for(Call(conversations.provider, session, limit=MAX_MESSAGE))
    if text is None:
        return
    await send_plain_reply(bot, Target(session.user_id), text, review_buttons(text))
