"""The buttons under a `/memory forget` preview: "Forget" runs `/memory forget confirm
<code>` (and "Forget, notes too" `confirm <code> notes`) for whoever presses it, with that
person's rights, exactly as if they had typed it: in a private chat only its user sees
the button; in a group the command itself admits only the group's admins and the bot's
operators (memory/actions/commands.py). Under a `/memory forget mine` preview the one
button runs `/memory forget mine confirm <code>` for the presser, which finds only their
own request (memory/consent/actions.py): anyone else's press leaves it for its member.

Each button carries its preview's code (memory/storage/forget_requests.py), so it acts only on
its own preview, and at most once. A preview whose request ended (confirmed by a button
or by typing, cancelled, superseded by a newer preview, expired) loses its buttons: the
request's row keeps where its preview was shown, and after each `/memory forget ...` in
a chat (and each press) the bot takes the buttons off that chat's ended previews. A
button whose request is gone answers that it is no longer valid, and loses its buttons.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, Message
from telegram.error import BadRequest, TelegramError

from bot.channels.telegram.delivery.sent import Target
from bot.channels.telegram.render.replies import send_plain_reply
from memory.actions.commands import split_words
from memory.actions.forgetting import CONFIRM, NO_LONGER_VALID
from memory.consent.actions import CONFIRM_MINE
from memory.storage import forget_requests as requests
from memory.storage import forgetting as fg

log = logging.getLogger(__name__)

PREFIX = "mnemo:forget:"
_CONFIRM, _NOTES, _MINE = "confirm", "notes", "mine"
_ASKED = re.compile(rf"Reply {re.escape(CONFIRM)} ([0-9a-f]+) within")
# A group member's own request (`/memory forget mine`, memory/consent/actions.py): its
# button runs the member's confirmation, which finds only the presser's own request.
_ASKED_MINE = re.compile(rf"reply {re.escape(CONFIRM_MINE)} ([0-9a-f]+) within")


def forget_buttons(answer: str) -> tuple[str, InlineKeyboardMarkup] | None:
    """The request code and buttons of an answer that asks to confirm a forget; None
    for any other answer. The code is the last one named: the preview's own closing
    line, after the messages it lists (whose words anyone may have written)."""
    codes = _ASKED.findall(answer)
    if not codes:
        mine = _ASKED_MINE.findall(answer)
        if not mine:
            return None
        button = InlineKeyboardButton("Forget", callback_data=f"{PREFIX}{_MINE}:{mine[-1]}")
        return mine[-1], InlineKeyboardMarkup([[button]])
    code = codes[-1]
    row = [InlineKeyboardButton("Forget", callback_data=f"{PREFIX}{_CONFIRM}:{code}")]
    if f"Reply {CONFIRM} {code} notes" in answer:
        row.append(
            InlineKeyboardButton("Forget, notes too", callback_data=f"{PREFIX}{_NOTES}:{code}")
        )
    return code, InlineKeyboardMarkup([row])


def pressed(data: str) -> tuple[str, str] | None:
    """(code, the words after `/memory`) of a button's callback data; None for data this
    version does not make (a button from before codes: no longer valid)."""
    action, _, code = data.removeprefix(PREFIX).partition(":")
    if not requests.CODE.fullmatch(code) or action not in (_CONFIRM, _NOTES, _MINE):
        return None
    if action == _MINE:
        return code, f"forget mine confirm {code}"
    return code, f"forget confirm {code}" + (" notes" if action == _NOTES else "")


def _engine(conversations: Any) -> AsyncEngine | None:
    try:
        return fg.engine_of(conversations.provider)
    except AttributeError:  # a memory without a database keeps no forget requests
        return None


async def reply(
    bot: Bot, conversations: Any, target: Target, answer: str, memory_words: str | None
) -> None:
    """Send a command's answer; for `/memory forget ...` (`memory_words`: the words after
    `/memory`), the buttons of the chat's ended previews taken off first (so none is
    left live once the answer is seen), then with the preview's buttons, recorded with
    its request."""
    if memory_words is None or split_words(memory_words)[0] != "forget":
        await send_plain_reply(bot, target, answer)
        return
    engine = _engine(conversations)
    if engine is not None:
        with _best_effort("take the buttons off ended previews"):
            await settle(bot, engine, target.chat_id)
    asked = forget_buttons(answer)
    message_id = await send_plain_reply(bot, target, answer, asked[1] if asked else None)
    if engine is not None and asked is not None:
        with _best_effort("record where a forget preview was shown"):
            await requests.shown(engine, asked[0], target.chat_id, message_id)


async def after_press(bot: Bot, conversations: Any, message: Message, code: str | None) -> None:
    """After a press on `message`'s button for request `code` (None: a button from
    before codes): take its buttons off unless the request is still live (a press by
    someone not allowed to confirm leaves it), and settle the chat."""
    engine = _engine(conversations)
    with _best_effort("take the buttons off ended previews"):
        if engine is None or code is None or not await requests.is_live(engine, code):
            await _unbutton(bot, message.chat_id, message.message_id)
        if engine is not None:
            await settle(bot, engine, message.chat_id)


@contextmanager
def _best_effort(what: str) -> Iterator[None]:
    """The buttons' upkeep is extra to the answer: the database failing here is logged
    (by its kind only), and the answer still goes; the buttons are then tidied later, or
    answer "no longer valid" when pressed."""
    try:
        yield
    except (SQLAlchemyError, OSError) as exc:
        log.warning("could not %s: %s", what, type(exc).__name__)


async def no_longer_valid(bot: Bot, target: Target) -> None:
    await send_plain_reply(bot, target, NO_LONGER_VALID)


async def settle(bot: Bot, engine: AsyncEngine, chat_id: int) -> None:
    """Take the buttons off `chat_id`'s previews whose requests ended, then forget them."""
    ended = await requests.unsettled(engine, chat_id)
    done = [shown.code for shown in ended if await _unbutton(bot, chat_id, shown.message_id)]
    await requests.settled(engine, done)


async def _unbutton(bot: Bot, chat_id: int, message_id: int) -> bool:
    """Take the buttons off a message; False when Telegram could not be asked now (the
    next settle tries again)."""
    try:
        await bot.edit_message_reply_markup(chat_id=chat_id, message_id=message_id)
    except BadRequest:
        # Gone, too old to edit, or its buttons off already (another replica): either
        # way they cannot be pressed to any effect, their request having ended.
        return True
    except TelegramError as exc:
        log.info("could not take the buttons off message %s: %s", message_id, exc)
        return False
    return True
