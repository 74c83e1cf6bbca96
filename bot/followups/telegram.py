"""Follow-ups on Telegram: the sender (a reply to the message that asked, in its chat and
topic; 403 means the user blocked the bot), the one-line confirmation with Undo after a
turn that made one, the buttons of `/memory followups` (Dismiss, Snooze 1 h / tomorrow /
next week) and their presses.

Each button carries its follow-up's id and the version it was shown at; a press acts on
that follow-up only if it is the presser's, still pending and unchanged since (memory/
followups/store.py `act`), so a stale button or one pressed twice is refused."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncEngine
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, Message
from telegram.error import Forbidden, TelegramError

from bot.channels.telegram.delivery.sent import Target
from bot.channels.telegram.render.replies import send_plain_reply
from bot.followups.delivery import Blocked
from memory.contract.errors import NotFound
from memory.contract.types import Owner, utcnow
from memory.followups import replies, store, times
from memory.followups.store import Followup

log = logging.getLogger(__name__)

PREFIX = "mnemo:fu:"
_VERBS = {"x": store.DISMISS, "u": store.UNDO, "h": "1h", "t": "tomorrow", "w": "week"}
STALE = "That follow-up is no longer pending, or changed since: /memory followups lists them."


class TelegramSender:
    def __init__(self, bot: Bot) -> None:
        self.bot = bot

    async def send(self, item: Followup, text: str) -> None:
        assert item.chat_id is not None
        target = Target(item.chat_id, item.thread_id, item.quote_message_id)
        try:
            await send_plain_reply(self.bot, target, text)
        except Forbidden as exc:
            raise Blocked(str(exc)) from exc


def _button(label: str, verb: str, item: Followup) -> InlineKeyboardButton:
    return InlineKeyboardButton(label, callback_data=f"{PREFIX}{verb}:{item.id}:{item.version}")


def undo_markup(item: Followup) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup([[_button("Undo", "u", item)]])


def list_markup(items: Sequence[Followup]) -> InlineKeyboardMarkup | None:
    rows = [
        [
            _button(f"✕ {i.id}", "x", i),
            _button("1 h", "h", i),
            _button("tomorrow", "t", i),
            _button("next week", "w", i),
        ]
        for i in items[:20]
    ]
    return InlineKeyboardMarkup(rows) if rows else None


async def confirm_new(bot: Bot, engine: AsyncEngine, owner: Owner, target: Target) -> None:
    """After a turn: one line with Undo for each follow-up it made (each confirmed once,
    by whichever process marks it first)."""
    fresh = await store.unconfirmed(engine, owner)
    if not fresh:
        return
    zone_known = (await store.get_prefs(engine, owner)).timezone is not None
    for item in fresh:
        if await store.confirmed(engine, item.id):
            await send_plain_reply(
                bot, target, replies.confirmation(item, zone_known), undo_markup(item)
            )


def is_listing(words: str | None) -> bool:
    return words is not None and words.strip().lower() == "followups"


async def send_listing(
    bot: Bot, engine: AsyncEngine, owner: Owner, target: Target, answer: str
) -> None:
    """`/memory followups`'s answer with a row of buttons per pending follow-up."""
    items = await store.listed(engine, owner)
    await send_plain_reply(bot, target, answer, list_markup(items))


def parse(data: str) -> tuple[str, int, int] | None:
    verb, _, rest = data.removeprefix(PREFIX).partition(":")
    ident, _, version = rest.partition(":")
    if verb not in _VERBS or not ident.isdigit() or not version.isdigit():
        return None
    return _VERBS[verb], int(ident), int(version)


async def press(bot: Bot, engine: AsyncEngine, owner: Owner, data: str, message: Message) -> str:
    """What a press answers, after acting on the follow-up it was shown for; its row of
    buttons goes once it acted (or was stale)."""
    parsed = parse(data)
    if parsed is None:
        return STALE
    what, ident, version = parsed
    try:
        if what in (store.DISMISS, store.UNDO):
            item = await store.act(engine, owner, ident, what, version=version)
        else:
            found = await store.get(engine, ident)
            if found is None:
                raise NotFound(str(ident))
            due = times.snoozed(what, found.timezone, utcnow())
            item = await store.act(engine, owner, ident, "snooze", version=version, due_at=due)
        said = {
            store.DISMISS: f"Dismissed: {item.text}",
            store.UNDO: f"Undone: I won't follow up on “{item.text}”.",
        }.get(what, f"Snoozed until {times.local_text(item.due_at, item.timezone)}: {item.text}")
    except NotFound:
        said = STALE
    await _drop_row(bot, message, ident)
    return said


async def _drop_row(bot: Bot, message: Message, ident: int) -> None:
    """Take the pressed follow-up's buttons off the message (best effort)."""
    markup = message.reply_markup
    if markup is None:
        return

    def of_it(button: InlineKeyboardButton) -> bool:
        data = button.callback_data
        return (
            isinstance(data, str)
            and data.startswith(PREFIX)
            and data.split(":")[3:4] == [str(ident)]
        )

    rows = [row for row in markup.inline_keyboard if not any(of_it(b) for b in row)]
    try:
        await bot.edit_message_reply_markup(
            chat_id=message.chat_id,
            message_id=message.message_id,
            reply_markup=InlineKeyboardMarkup(rows) if rows else None,
        )
    except TelegramError as exc:
        log.info("could not update follow-up buttons: %s", exc)
