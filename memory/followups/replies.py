"""What people and the model read about follow-ups: the one-line confirmation, the
list, the delivered message ("You mentioned on 3 May: ..."), each in the user's zone."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from memory.actions import origins
from memory.actions.fitting import one_line
from memory.contract.types import Origin
from memory.followups.store import Followup
from memory.followups.times import day_text, local_text

QUOTE_CHARS = 200
NO_ZONE = "times are UTC until you set your zone: /memory timezone Area/City"


def _zone(item: Followup) -> str:
    return item.timezone or "UTC"


def confirmation(item: Followup, zone_known: bool) -> str:
    """The one line a new follow-up is confirmed with (its Undo button goes with it)."""
    line = f"⏰ I'll follow up {local_text(item.due_at, item.timezone)} ({_zone(item)}): " + (
        one_line(item.text, 200)
    )
    return line if zone_known else f"{line} — {NO_ZONE}"


def for_model(item: Followup, zone_known: bool) -> str:
    line = (
        f"follow-up {item.id} set for {local_text(item.due_at, item.timezone)} "
        f"{_zone(item)} ({item.due_at:%Y-%m-%d %H:%M} UTC); the user is shown it with Undo"
    )
    if not zone_known:
        line += (
            "; the user's time zone is unknown, so the time was read as UTC: ask them once "
            "for their city (/memory timezone Area/City sets it)"
        )
    return line


def listing(items: Sequence[Followup], *, proactive: bool, zone: str | None) -> str:
    if not items:
        head = "No follow-ups pending."
    else:
        lines = [
            f"{i.id}. {local_text(i.due_at, i.timezone)} — {one_line(i.text, 120)}"
            + (" (snoozed)" if i.state == "snoozed" else "")
            + (" (proposed by me)" if i.proactive else "")
            for i in items
        ]
        head = "Follow-ups pending:\n" + "\n".join(lines)
    tail = [f"Time zone: {zone or 'UTC (not set: /memory timezone Area/City)'}."]
    if not proactive:
        tail.append("Follow-ups I propose myself are off (/memory followups on).")
    return head + "\n\n" + " ".join(tail)


def delivered(item: Followup, source: tuple[str, datetime] | None, *, late: bool) -> str:
    """The follow-up as sent: its text, when it was due if late, and where it came from:
    the source quoted, with a link to the original where the channel has one (a
    supergroup's message, memory/actions/origins.py); elsewhere the message is sent as a
    reply to the original, which links it."""
    lines = [f"⏰ {item.text}"]
    if late:
        # Late because the bot was down or the user had blocked it: "late" is true of both.
        lines.append(f"(due {local_text(item.due_at, item.timezone)}; sent late)")
    if source is not None:
        text, at = source
        said = one_line(text, QUOTE_CHARS)
        lines.append(f"You mentioned on {day_text(at, item.timezone)}: “{said}”")
        url = _link(item)
        if url is not None:
            lines.append(url)
    return "\n".join(lines)


def _link(item: Followup) -> str | None:
    if item.chat_id is None or item.quote_message_id is None:
        return None
    return origins.link(Origin(item.channel, item.chat_id, item.quote_message_id, item.thread_id))


def dropped(item: Followup) -> str:
    """The note for a follow-up missed past the grace window."""
    return (
        f"I missed a follow-up due {local_text(item.due_at, item.timezone)}, "
        f"too long ago to be useful now: {one_line(item.text, 200)}"
    )
