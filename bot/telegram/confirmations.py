"""The buttons under a `/memory forget` preview: "Forget" runs `/memory forget confirm`
(and "Forget, notes too" `confirm notes`) for whoever presses it, with that person's
rights, exactly as if they had typed it: in a private chat only its user sees the
button; in a group the command itself admits only the bot's operators
(memory/actions/commands.py). The buttons are taken off the preview once pressed."""

from __future__ import annotations

from telegram import InlineKeyboardButton, InlineKeyboardMarkup

from memory.actions.forgetting import CONFIRM

PREFIX = "mnemo:forget:"
# callback data -> the words after `/memory`
ACTIONS = {f"{PREFIX}confirm": "forget confirm", f"{PREFIX}notes": "forget confirm notes"}


def forget_buttons(answer: str) -> InlineKeyboardMarkup | None:
    """The buttons for an answer that asks to confirm a forget; None for any other."""
    if f"Reply {CONFIRM} within" not in answer:
        return None
    row = [InlineKeyboardButton("Forget", callback_data=f"{PREFIX}confirm")]
    if f"Reply {CONFIRM} notes" in answer:
        row.append(InlineKeyboardButton("Forget, notes too", callback_data=f"{PREFIX}notes"))
    return InlineKeyboardMarkup([row])
