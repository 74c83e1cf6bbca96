"""Keep / Revert buttons under a review of reflect's changes (memory/actions/changes.py).

Each listed change names its commands (`/memory review keep <id>`, `... revert <id>`);
its buttons carry that id and run that command for whoever presses it, with that
person's rights, as if typed: so a button acts only on the change it was shown for,
and the command refuses a change already kept or reverted (a second press, an old
copy of the message) or one a later change made stale. A pressed change's row of
buttons is taken off the message; the others stay.
"""

from __future__ import annotations

import contextlib
import re

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Message
from telegram.error import TelegramError

PREFIX = "mnemo:review:"
KEEP, REVERT = "keep", "revert"
_LISTED = re.compile(r"^   /memory review keep (\d+) · /memory review revert \1$", re.M)
MAX_ROWS = 10


def review_buttons(answer: str) -> InlineKeyboardMarkup | None:
    """A row of Keep / Revert per change a review answer lists; None for any other."""
    ids = _LISTED.findall(answer)[:MAX_ROWS]
    if not ids:
        return None
    return InlineKeyboardMarkup(
        [
            [
                InlineKeyboardButton(f"Keep #{i}", callback_data=f"{PREFIX}{KEEP}:{i}"),
                InlineKeyboardButton(f"Revert #{i}", callback_data=f"{PREFIX}{REVERT}:{i}"),
            ]
            for i in ids
        ]
    )


def pressed(data: str) -> str | None:
    """The words after `/memory` a button stands for; None for data it does not make."""
    verb, _, change = data.removeprefix(PREFIX).partition(":")
    if verb not in (KEEP, REVERT) or not change.isdigit() or len(change) > 18:
        return None
    return f"review {verb} {change}"


async def drop_row(message: Message, data: str) -> None:
    """Take the pressed change's row of buttons off `message` (best effort: an old copy
    or a message too old to edit keeps them, and a press on them is refused anyway)."""
    markup = message.reply_markup
    if markup is None:
        return
    change = data.rpartition(":")[2]
    rows = [
        row
        for row in markup.inline_keyboard
        if not any(str(b.callback_data or "").endswith(f":{change}") for b in row)
    ]
    with contextlib.suppress(TelegramError):
        await message.edit_reply_markup(reply_markup=InlineKeyboardMarkup(rows) if rows else None)
