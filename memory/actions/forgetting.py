"""`/memory forget`: what people see and confirm (the forgetting itself is
memory/forgetting.py and the provider's `Forgetter`).

A forget is two steps: `/memory forget <message id | summary id | text>` (or
`everything`) shows what would go and keeps the request; `/memory forget confirm` does
it (`confirm notes` also drops the notes that quote it). A request is kept in this
process for CONFIRM_WITHIN_S, per conversation, and only the newest one: a confirmation
always does what the last preview in that chat showed. The ids shown are resolved at the
preview; a message stored after it is never forgotten by its confirmation.

Scope: the caller's own memory only (`Call.owner`); ids of anyone else's messages or
summaries are "not found", exactly like ids that do not exist. In a group the memory is
the group's, which every member shares: forgetting there is for the bot's operators
(`Audience.OWNER`, checked in memory/actions/commands.py).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from memory import forgetting as fg
from memory.actions.fitting import listing, one_line
from memory.actions.spec import Call
from memory.capabilities import NoteStore
from memory.errors import NotFound
from memory.forgetting import ErasureReport, ForgetPreview, ForgetReport, Owner
from memory.tracing import unwrap
from memory.types import minute_utc

CONFIRM_WITHIN_S = 600.0
MAX_PENDING = 10_000
SHOWN_ITEMS = 10
CONFIRM = "/memory forget confirm"


@dataclass
class _Pending:
    owner: Owner
    preview: ForgetPreview | None  # None: everything
    at: float


# session id -> its pending request, oldest first
_pending: OrderedDict[str, _Pending] = OrderedDict()


def _keep(session_id: str, request: _Pending) -> None:
    _pending.pop(session_id, None)
    _pending[session_id] = request
    while len(_pending) > MAX_PENDING:
        _pending.popitem(last=False)


def _take(session_id: str, owner: Owner) -> _Pending | None:
    request = _pending.pop(session_id, None)
    if request is None or request.owner != owner:
        return None
    if time.monotonic() - request.at > CONFIRM_WITHIN_S:
        return None
    return request


def by_whom(c: Call) -> str:
    """Who asked, for the erasure's changelog row: the memory's own id, no content."""
    return f"/memory forget everything in session {c.session.id}"


def owner_of(c: Call) -> Owner:
    return Owner(*c.owner)


# -- handlers ----------------------------------------------------------------------------


async def ask(c: Call, args: Any) -> ForgetPreview:
    """The preview of forgetting `args.target`; kept for the confirmation when not empty."""
    preview = await fg.preview(c.provider, owner_of(c), args.target)
    if preview.items:
        _keep(c.session.id, _Pending(preview.owner, preview, time.monotonic()))
    return preview


async def ask_everything(c: Call, args: Any) -> tuple[int, int]:
    """(sessions, messages) an erasure of the caller's memory would delete."""
    owner = owner_of(c)
    counts = await fg.owner_counts(fg.engine_of(c.provider), owner)
    _keep(c.session.id, _Pending(owner, None, time.monotonic()))
    return counts


async def confirm(c: Call, args: Any) -> ForgetReport | ErasureReport | None:
    """Do what the chat's last preview showed; None when there is none (or it expired)."""
    owner = owner_of(c)
    request = _take(c.session.id, owner)
    if request is None:
        return None
    if request.preview is None:
        return await fg.erase(c.provider, owner, by_whom(c))
    preview = request.preview
    report = await fg.forget(c.provider, owner, preview.ids, preview.needles)
    if args.notes and isinstance(unwrap(c.provider), NoteStore):
        for name in report.quoting_notes:
            try:
                await c.provider.note_remove(c.session, name)
            except NotFound:
                continue
        report.quoting_notes = []
    return report


# -- what people read ----------------------------------------------------------------------


async def preview_text(c: Call, args: Any, preview: ForgetPreview) -> str:
    if not preview.items:
        return f"Nothing in your memory matches {one_line(args.target, 60)!r}."
    n = len(preview.items)
    lines = [
        f"• #{i.id} {minute_utc(i.created_at) if i.created_at else '?'} {i.role}: "
        f"{one_line(i.first_words, 80)}"
        for i in preview.items[:SHOWN_ITEMS]
    ]
    if n > SHOWN_ITEMS:
        lines.append(f"… and {n - SHOWN_ITEMS} more")
    deps = preview.dependents
    tail = []
    if deps.summaries:
        tail.append(
            f"{deps.summaries} summaries depend on them: they will be rebuilt from what "
            "remains, or removed if nothing does."
        )
    if deps.quoting_stores:
        tail.append(
            "Still quoting them after the forget (yours to change): "
            + ", ".join(deps.quoting_stores)
            + "."
        )
    if deps.quoting_notes:
        tail.append(
            "Notes quoting them (kept unless you say so): "
            + ", ".join(deps.quoting_notes)
            + f". Reply {CONFIRM} notes to forget those notes too."
        )
    tail.append(
        f"Reply {CONFIRM} within {int(CONFIRM_WITHIN_S // 60)} minutes to forget "
        f"{'it' if n == 1 else 'them'} for good (search, summaries, exports and vectors included)."
    )
    body = listing(lines, f"This would forget {n} message(s):", max(500, c.limit - 600))
    return body + "\n" + "\n".join(tail)


async def everything_text(c: Call, args: Any, counts: tuple[int, int]) -> str:
    sessions, messages = counts
    return (
        f"This would erase ALL of this memory: {sessions} conversation(s), {messages} "
        "message(s), every summary, the profile, soul and rules with their history, notes "
        "and archives. The change history keeps one line saying that an erasure happened, "
        f"when and how much, nothing of what was said.\nReply {CONFIRM} within "
        f"{int(CONFIRM_WITHIN_S // 60)} minutes to erase it for good."
    )


async def confirmed_text(c: Call, args: Any, report: ForgetReport | ErasureReport | None) -> str:
    if report is None:
        return "Nothing to confirm: ask with /memory forget <message id | summary id | text> first."
    if isinstance(report, ErasureReport):
        return f"Erased: {report.describe()}."
    text = (
        f"Forgot {report.messages} message(s); {report.summaries_rebuilt} summaries rebuilt, "
        f"{report.summaries_removed} removed."
    )
    if report.quoting_notes:
        text += " Notes still quoting them (yours to keep or drop): " + ", ".join(
            report.quoting_notes
        )
    return text
