"""`/memory forget mine`, `/memory optout` and `/memory optin`: a group member's say over
their own words in the group's memory (what people see; the forgetting is
memory/storage/forgetting.py's, the selection memory/consent/mine.py's).

Who: the member who asks (`FrontEnd.member`, filled by the channel from the message's
sender), never anyone else; only in a shared memory (a group's), since in a private chat
the whole memory is the user's (`/memory forget everything`).

`forget mine` is two steps like `/memory forget`, with the same request store: the
request is kept under the conversation *and the member* (`_conversation`), so only that
member's `/memory forget mine confirm <code>` (typed, or their press on the preview's
button) finds it; anyone else's confirmation, an operator's included, finds nothing.
"""

from __future__ import annotations

from typing import Any

from memory.actions.fitting import listing
from memory.actions.forgetting import (
    Asked,
    Unconfirmed,
    derived_lines,
    item_lines,
    owner_of,
)
from memory.actions.spec import Call
from memory.consent import optouts
from memory.consent.mine import member_messages
from memory.contract.errors import InvalidArgument
from memory.storage import forget_requests as requests
from memory.storage import forgetting as fg
from memory.storage.forget_requests import CONFIRM_WITHIN_S
from memory.storage.forgetting import ForgetReport

CONFIRM_MINE = "/memory forget mine confirm"
CANCEL_MINE = "/memory forget mine cancel"
SHOWN_ITEMS = 10
GROUPS_ONLY = (
    "/memory {what} is for groups: in a private chat all of the memory is yours "
    "(/memory forget everything erases it)."
)


def _member(c: Call, what: str) -> int:
    """The member asking, in a shared memory; a clear refusal otherwise."""
    if not fg.shared_scope(c.session.user_id):
        raise InvalidArgument(GROUPS_ONLY.format(what=what))
    if c.front.member is None or c.front.member == c.session.user_id:
        # An anonymous admin or a channel posting as the group: no member to act for.
        raise InvalidArgument(f"/memory {what} needs to know who you are: write as yourself.")
    return c.front.member


def _conversation(c: Call, member: int) -> str:
    """The member's own request slot in the group's conversation."""
    return f"{c.session.base_id}#member:{member}"


# -- forget mine -------------------------------------------------------------------------


async def ask_mine(c: Call, args: Any) -> Asked:
    """The preview of forgetting what the member said here, kept for their confirmation."""
    member = _member(c, "forget mine")
    owner, engine = owner_of(c), fg.engine_of(c.provider)
    async with engine.connect() as conn:
        ids = await member_messages(conn, owner, member)
    preview = await fg.preview_of(c.provider, owner, ids)
    if not preview.items:
        return Asked(preview)
    code = await requests.keep(engine, _conversation(c, member), owner, ids=tuple(preview.ids))
    return Asked(preview, code)


async def confirm_mine(c: Call, args: Any) -> ForgetReport | Unconfirmed:
    """Forget what the member's own request `args.code` showed, once."""
    member = _member(c, "forget mine")
    owner, engine = owner_of(c), fg.engine_of(c.provider)
    slot = _conversation(c, member)
    request = await requests.take(engine, slot, owner, args.code) if args.code else None
    if request is None:
        pending = await requests.live(engine, slot, owner)
        return Unconfirmed(bool(args.code), pending[0] if pending else None)
    return await fg.forget(c.provider, owner, request.ids)


async def cancel_mine(c: Call, args: Any) -> int:
    member = _member(c, "forget mine")
    return await requests.cancel(fg.engine_of(c.provider), _conversation(c, member), owner_of(c))


async def mine_text(c: Call, args: Any, asked: Asked) -> str:
    preview = asked.preview
    if not preview.items:
        return "Nothing you said is in this group's memory."
    n = len(preview.items)
    lines = item_lines(preview)
    tail = derived_lines(preview.dependents)
    if preview.dependents.quoting_stores:
        tail.append(
            "The group's "
            + ", ".join(preview.dependents.quoting_stores)
            + " still quote them after the forget (the group's admins can change them)."
        )
    tail.append(
        f"Only you can confirm: reply {CONFIRM_MINE} {asked.code} within "
        f"{int(CONFIRM_WITHIN_S // 60)} minutes to forget them for good (search, summaries "
        f"and vectors included), or {CANCEL_MINE}."
    )
    head = f"This would forget {n} message(s): yours in this group and my answers to them:"
    return listing(lines, head, max(500, c.limit - 600)) + "\n" + "\n".join(tail)


async def confirmed_mine_text(c: Call, args: Any, report: ForgetReport | Unconfirmed) -> str:
    if isinstance(report, Unconfirmed):
        if report.code_given:
            return (
                "That confirmation is not yours, or no longer valid (done, cancelled, "
                "replaced by a newer preview, or expired): nothing was forgotten."
            )
        if report.pending is not None:
            return (
                f"Which request? Yours pending here would forget {len(report.pending.ids)} "
                f"message(s): reply {CONFIRM_MINE} {report.pending.code} to do it."
            )
        return "Nothing to confirm: ask with /memory forget mine first."
    return (
        f"Forgot {report.messages} message(s) of yours in this group; "
        f"{report.summaries_rebuilt} summaries rebuilt, {report.summaries_removed} removed."
    )


async def cancelled_mine_text(c: Call, args: Any, count: int) -> str:
    return "Cancelled: nothing was forgotten." if count else "Nothing to cancel."


# -- opting out and in -------------------------------------------------------------------


async def optout(c: Call, args: Any) -> bool:
    member = _member(c, "optout")
    return await optouts.opt_out(fg.engine_of(c.provider), owner_of(c), member)


async def optin(c: Call, args: Any) -> bool:
    member = _member(c, "optin")
    return await optouts.opt_in(fg.engine_of(c.provider), owner_of(c), member)


OPTED_OUT = (
    "I will not remember what you write in this group from now on: I still answer you, "
    "but your messages and my answers to them are stored nowhere (no history, search, "
    "summaries or vectors). What you said before stays unless you say /memory forget mine. "
    "/memory optin undoes this."
)


async def optout_text(c: Call, args: Any, new: bool) -> str:
    return OPTED_OUT if new else "You have opted out here already. " + OPTED_OUT


async def optin_text(c: Call, args: Any, dropped: bool) -> str:
    if not dropped:
        return "You had not opted out here: I remember this group's messages, yours included."
    return "I will remember what you write in this group again, from your next message on."
