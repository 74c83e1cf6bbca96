"""`/memory forget`: what people see and confirm (the forgetting itself is
memory/storage/forgetting.py and the provider's `Forgetter`).

A forget is two steps: `/memory forget <message id | summary id | text>` (or
`everything`) shows what would go and keeps the request under a short code;
`/memory forget confirm <code>` does it (`confirm <code> notes` also drops the notes
that quote it), and `/memory forget cancel` drops it. Requests are kept in the database
(memory/storage/forget_requests.py) for CONFIRM_WITHIN_S, so any replica confirms them; per
conversation only the newest is live (a newer preview supersedes it), and each is done
at most once. A confirmation without the code does nothing: it says what is pending
and asks for the code, so a confirmation never does something other than what the
person saw (another preview, made meanwhile in the chat, by someone else in a group).
The ids shown are resolved at the preview; a message stored after it is never forgotten
by its confirmation.

Scope: the caller's own memory only (`Call.owner`); ids of anyone else's messages or
summaries are "not found", exactly like ids that do not exist. In a group the memory is
the group's, which every member shares: forgetting there is for the group's admins and
the bot's operators (`Audience.OWNER`, checked in memory/actions/commands.py); a member's
own words are theirs to forget (`/memory forget mine`, memory/consent/actions.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memory.actions.fitting import listing, one_line
from memory.actions.spec import Call
from memory.contract.capabilities import NoteStore
from memory.contract.errors import NotFound
from memory.contract.tracing import capability
from memory.contract.types import Dependents, minute_utc
from memory.storage import forget_requests as requests
from memory.storage import forgetting as fg
from memory.storage.forget_requests import CONFIRM_WITHIN_S
from memory.storage.forgetting import ErasureReport, ForgetPreview, ForgetReport, Owner

SHOWN_ITEMS = 10
CONFIRM = "/memory forget confirm"
CANCEL = "/memory forget cancel"

__all__ = ["CONFIRM", "CONFIRM_WITHIN_S"]


@dataclass(frozen=True)
class Asked:
    """A preview and the code of the request it keeps ("" when nothing matched)."""

    preview: ForgetPreview
    code: str = ""


@dataclass(frozen=True)
class AskedEverything:
    sessions: int
    messages: int
    code: str


@dataclass(frozen=True)
class Unconfirmed:
    """A confirmation that did nothing: why, and the request still pending, if any."""

    code_given: bool
    pending: requests.Request | None = None


def by_whom(c: Call) -> str:
    """Who asked, for the erasure's changelog row: the memory's own id, no content."""
    return f"/memory forget everything in session {c.session.id}"


def owner_of(c: Call) -> Owner:
    return Owner(*c.owner)


def _conversation(c: Call) -> str:
    """The conversation a request belongs to: its base session, so `/new` in between
    does not lose it."""
    return c.session.base_id


# -- handlers ----------------------------------------------------------------------------


async def ask(c: Call, args: Any) -> Asked:
    """The preview of forgetting `args.target`; kept for the confirmation when not empty."""
    preview = await fg.preview(c.provider, owner_of(c), args.target)
    if not preview.items:
        return Asked(preview)
    code = await requests.keep(
        fg.engine_of(c.provider),
        _conversation(c),
        preview.owner,
        ids=tuple(preview.ids),
        needles=preview.needles,
    )
    return Asked(preview, code)


async def ask_everything(c: Call, args: Any) -> AskedEverything:
    """What an erasure of the caller's memory would delete, kept for the confirmation."""
    owner = owner_of(c)
    engine = fg.engine_of(c.provider)
    sessions, messages = await fg.owner_counts(engine, owner)
    code = await requests.keep(engine, _conversation(c), owner, everything=True)
    return AskedEverything(sessions, messages, code)


async def confirm(c: Call, args: Any) -> ForgetReport | ErasureReport | Unconfirmed:
    """Do what request `args.code` of this conversation showed, once (module doc)."""
    owner = owner_of(c)
    engine = fg.engine_of(c.provider)
    if not args.code:
        pending = await requests.live(engine, _conversation(c), owner)
        return Unconfirmed(False, pending[0] if pending else None)
    request = await requests.take(engine, _conversation(c), owner, args.code)
    if request is None:
        pending = await requests.live(engine, _conversation(c), owner)
        return Unconfirmed(True, pending[0] if pending else None)
    if request.everything:
        return await fg.erase(c.provider, owner, by_whom(c))
    report = await fg.forget(c.provider, owner, request.ids, request.needles)
    notes = capability(c.provider, NoteStore)
    if args.notes and notes is not None:
        for name in report.quoting_notes:
            try:
                await notes.note_remove(c.session, name)
            except NotFound:
                continue
        report.quoting_notes = []
    return report


async def cancel(c: Call, args: Any) -> int:
    """Drop this conversation's pending request; how many there were."""
    return await requests.cancel(fg.engine_of(c.provider), _conversation(c), owner_of(c))


# -- what people read ----------------------------------------------------------------------


def item_lines(preview: fg.ForgetPreview) -> list[str]:
    """The messages a forget would take, one line each (the first SHOWN_ITEMS)."""
    n = len(preview.items)
    lines = [
        f"• #{i.id} {minute_utc(i.created_at) if i.created_at else '?'} {i.role}: "
        f"{one_line(i.first_words, 80)}"
        for i in preview.items[:SHOWN_ITEMS]
    ]
    if n > SHOWN_ITEMS:
        lines.append(f"… and {n - SHOWN_ITEMS} more")
    return lines


def derived_lines(deps: Dependents) -> list[str]:
    """What a forget rebuilds or drops with the messages: summaries and facts."""
    tail = []
    if deps.summaries:
        tail.append(
            f"{deps.summaries} summaries depend on them: they will be rebuilt from what "
            "remains, or removed if nothing does."
        )
    if deps.facts:
        tail.append(
            "Facts resting on them alone go too (what they replaced is current again): "
            + "; ".join(one_line(f, 80) for f in deps.facts[:SHOWN_ITEMS])
            + "."
        )
    if deps.facts_back:
        tail.append(
            "Facts they alone retracted are current again: "
            + "; ".join(one_line(f, 80) for f in deps.facts_back[:SHOWN_ITEMS])
            + "."
        )
    return tail


async def preview_text(c: Call, args: Any, asked: Asked) -> str:
    preview, confirm = asked.preview, f"{CONFIRM} {asked.code}"
    if not preview.items:
        return f"Nothing in your memory matches {one_line(args.target, 60)!r}."
    n = len(preview.items)
    lines = item_lines(preview)
    deps = preview.dependents
    tail = derived_lines(deps)
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
            + f". Reply {confirm} notes to forget those notes too."
        )
    tail.append(
        f"Reply {confirm} within {int(CONFIRM_WITHIN_S // 60)} minutes to forget "
        f"{'it' if n == 1 else 'them'} for good (search, summaries, exports and vectors "
        f"included), or {CANCEL}."
    )
    body = listing(lines, f"This would forget {n} message(s):", max(500, c.limit - 600))
    return body + "\n" + "\n".join(tail)


async def everything_text(c: Call, args: Any, asked: AskedEverything) -> str:
    return (
        f"This would erase ALL of this memory: {asked.sessions} conversation(s), "
        f"{asked.messages} message(s), every summary, the profile, soul and rules with their "
        "history, notes and archives. The change history keeps one line saying that an "
        "erasure happened, when and how much, nothing of what was said.\nReply "
        f"{CONFIRM} {asked.code} within {int(CONFIRM_WITHIN_S // 60)} minutes to erase it "
        f"for good, or {CANCEL}."
    )


NOTHING = "Nothing to confirm: ask with /memory forget <message id | summary id | text> first."
NO_LONGER_VALID = (
    "That confirmation is no longer valid (done, cancelled, replaced by a newer preview, or "
    "expired): nothing was forgotten."
)


def _which(request: requests.Request) -> str:
    what = (
        "erase ALL of this memory"
        if request.everything
        else f"forget {len(request.ids)} message(s)"
    )
    return (
        f"Which request? The one pending here would {what}: reply {CONFIRM} {request.code} "
        f"to do it, or {CANCEL}."
    )


async def confirmed_text(
    c: Call, args: Any, report: ForgetReport | ErasureReport | Unconfirmed
) -> str:
    if isinstance(report, Unconfirmed):
        if report.code_given:
            return NO_LONGER_VALID
        return NOTHING if report.pending is None else _which(report.pending)
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


async def cancelled_text(c: Call, args: Any, count: int) -> str:
    return "Cancelled: nothing was forgotten." if count else "Nothing to cancel."
