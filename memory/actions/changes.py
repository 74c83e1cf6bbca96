"""What changed in a memory, for the people it belongs to (issue #29):

- `/memory timeline [topic]`: every fact in any state, by when it became true, with its
  interval, state, who wrote it and its source messages: a link where Telegram has one
  (a supergroup), else the date and first words of the message, as an answer's sources
  are shown (memory/actions/origins.py, bot/channels/telegram/sources.py).
- `/memory review`: reflect's changes to facts, profile, soul and rules the user has
  not decided on yet, newest first, each with its evidence (a fact's source messages;
  for the others, the messages of the review that made it, bot/jobs/reflect/runs.py)
  and how to keep or revert it. `review keep <id>` / `review revert <id>` decide one
  change, once: a change already decided, or one made stale by a later change of the
  same facts or scope, is refused (so a replayed or old button does nothing).
  Revert is a new version written by the user (`revert_fact_change`, or a rollback of
  that scope to the version before the change). `review off` / `review on`: whether a
  digest of reflect's changes is sent after a reflect cycle (private chats only).

Decided changes and the digest switch are changelog rows of scope `review` (action
keep | revert | off | on; `after_text` the change's id): no table of their own, and
the operator's changelog shows who decided what.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memory.actions import origins
from memory.actions.fitting import MAX_REPLY, listing, one_line
from memory.actions.spec import Call
from memory.contract.capabilities import (
    ChangelogReader,
    ChangelogWriter,
    MessageReader,
    ProfileStore,
    VersionedProfileStore,
)
from memory.contract.errors import Conflict, ContractError, NotFound
from memory.contract.facts import Fact, FactState, FactStore
from memory.contract.tracing import capability
from memory.contract.types import ChangeEntry, ChangeSource
from memory.facts.render import describe_change
from memory.facts.revert import changelog_lists
from memory.text.replies import first_words

REVIEW_SCOPE = "review"
KEEP, REVERT, OFF, ON = "keep", "revert", "off", "on"
REVIEWABLE = ("fact", "profile", "soul", "constraint")
DIGEST_CHANGES = 5  # changes one review message lists: a digest, not a report
READ_BACK = 500  # changelog rows read to find the undecided changes
SOURCES_PER_FACT = 2
WORDS = 12  # of a source message without a link


# --- sources ------------------------------------------------------------------------


async def source_text(c: Call, message_id: int | str) -> str | None:
    """One source message as people are shown it: its link where Telegram has one,
    else its date and first words; None when it is gone or not this memory's."""
    reader = capability(c.provider, MessageReader)
    if reader is None:
        return None
    try:
        found = await reader.read_message(c.session, str(message_id))
    except ContractError:
        return None
    url = origins.link(found.origin)
    if url is not None:
        return url
    at = found.message.created_at
    date = f"{at:%Y-%m-%d} " if at else ""
    return f"{date}“{first_words(found.message.content, WORDS)}”"


async def _sources(c: Call, ids: Sequence[int]) -> list[str]:
    shown = []
    for i in ids[:SOURCES_PER_FACT]:
        text = await source_text(c, i)
        if text is not None:
            shown.append(text)
    more = len(ids) - SOURCES_PER_FACT
    return shown + ([f"(+{more} more)"] if more > 0 else [])


# --- the timeline -------------------------------------------------------------------


async def timeline(c: Call, args: Any) -> list[Fact]:
    topic = " ".join(str(getattr(args, "topic", "")).split()) or None
    facts = await c.provider_as(FactStore).fact_history(*c.owner, topic)
    return [f for f in facts if f.state != FactState.REVERTED]


def _interval(f: Fact) -> str:
    start = f"{f.valid_from:%Y-%m-%d}"
    if f.state == FactState.CURRENT:
        return f"{start} → now"
    end = f"{f.valid_to:%Y-%m-%d}" if f.valid_to else "?"
    return f"{start} → {end}, {f.state}"


async def timeline_text(c: Call, args: Any, facts: list[Fact]) -> str:
    topic = one_line(str(getattr(args, "topic", "")), 60)
    about = f" about “{topic}”" if topic else ""
    if not facts:
        return f"No facts{about} yet."
    by_id = {f.id: f for f in facts}
    lines = []
    for f in facts:
        head = f"• {f.key}: {one_line(f.value, 200)} ({_interval(f)}; by {f.source})"
        if f.replaced_by and f.replaced_by in by_id:
            head += f", then {one_line(by_id[f.replaced_by].value, 60)}"
        lines.append(head)
        lines += [f"   source: {s}" for s in await _sources(c, f.evidence)]
    header = f"Facts{about}, by the date they became true ({len(facts)}):"
    return listing(lines, header, c.limit or MAX_REPLY)


# --- the review ---------------------------------------------------------------------


@dataclass
class Change:
    entry: ChangeEntry
    what: str
    evidence: list[str] = field(default_factory=list)


@dataclass
class Review:
    changes: list[Change]
    pending: int  # undecided in all (more than shown when over DIGEST_CHANGES)
    digest: bool  # whether digests are on


def _decided(rows: Sequence[ChangeEntry]) -> set[int]:
    out = set()
    for r in rows:
        if r.scope == REVIEW_SCOPE and r.action in (KEEP, REVERT) and r.after_text.isdigit():
            out.add(int(r.after_text))
    return out


def digest_on(rows: Sequence[ChangeEntry]) -> bool:
    """Digests are on unless the newest switch row says off (rows newest first)."""
    for r in rows:
        if r.scope == REVIEW_SCOPE and r.action in (OFF, ON):
            return r.action == ON
    return True


async def _rows(c: Call) -> list[ChangeEntry]:
    return await c.provider_as(ChangelogReader).read_changelog(*c.owner, "", READ_BACK)


def _undecided(rows: Sequence[ChangeEntry]) -> list[ChangeEntry]:
    decided = _decided(rows)
    return [
        r
        for r in rows
        if r.source == ChangeSource.REFLECT
        and r.scope in REVIEWABLE
        and r.id is not None
        and r.id not in decided
    ]


def _describe(entry: ChangeEntry) -> str:
    if entry.scope == "fact":
        return "facts: " + describe_change(entry.before_text, entry.after_text)
    if entry.scope == "constraint":
        return f"rules: {entry.action} (/memory constraints lists them)"
    words = first_words(entry.after_text, 20) or "(cleared)"
    return f"{entry.scope}: now “{words}”"


async def _evidence(c: Call, entry: ChangeEntry, rows: Sequence[ChangeEntry]) -> list[str]:
    if entry.scope == "fact":
        _, after = changelog_lists(entry.before_text, entry.after_text)
        ids = sorted({int(i) for f in after for i in f.get("evidence") or ()})
        return await _sources(c, ids)
    # The review that made it: its row spans the change's versions in the same session.
    for r in rows:
        if (
            r.scope == "reflect"
            and r.session_id == entry.session_id
            and (r.version_before or 0) <= (entry.version_before or 0)
            and (r.version_after or 0) >= (entry.version_after or 0)
        ):
            return [f"reflect read {one_line(r.before_text, 200)}"]
    return []


async def review(c: Call, args: Any) -> Review:
    rows = await _rows(c)
    undecided = _undecided(rows)
    shown = []
    for entry in undecided[:DIGEST_CHANGES]:
        shown.append(Change(entry, _describe(entry), await _evidence(c, entry, rows)))
    return Review(shown, len(undecided), digest_on(rows))


def review_text_of(r: Review, limit: int = MAX_REPLY) -> str:
    if not r.changes:
        return "Nothing to review: every change reflect made is kept or reverted." + (
            "" if r.digest else "\n(Digests after reflect are off: /memory review on.)"
        )
    lines = []
    for ch in r.changes:
        e = ch.entry
        when = f"{e.created_at:%Y-%m-%d %H:%M}" if e.created_at else "?"
        lines.append(f"#{e.id} {one_line(ch.what, 300)} (reflect, {when} UTC)")
        lines += [f"   evidence: {s}" for s in ch.evidence]
        lines.append(f"   /memory review keep {e.id} · /memory review revert {e.id}")
    more = r.pending - len(r.changes)
    header = "Reflect changed your memory; keep or revert each change:"
    footer = f"\n({more} more after these.)" if more > 0 else ""
    return listing(lines, header, limit - len(footer)) + footer


async def review_text(c: Call, args: Any, r: Review) -> str:
    return review_text_of(r, c.limit or MAX_REPLY)


async def _record(c: Call, action: str, text: str) -> None:
    await c.provider_as(ChangelogWriter).write_changelog(
        ChangeEntry(
            user_id=c.session.user_id,
            agent_id=c.session.agent_id,
            scope=REVIEW_SCOPE,
            action=action,
            source=ChangeSource.USER.value,
            session_id=c.session.id,
            after_text=text,
        )
    )


async def _pending(c: Call, change_id: int) -> tuple[ChangeEntry, list[ChangeEntry]]:
    rows = await _rows(c)
    for r in rows:
        if r.id == change_id and r.source == ChangeSource.REFLECT and r.scope in REVIEWABLE:
            if change_id in _decided(rows):
                raise Conflict(f"change #{change_id} was already kept or reverted")
            return r, rows
    raise NotFound(f"no change #{change_id} of reflect to review in your memory")


async def keep(c: Call, args: Any) -> str:
    entry, _ = await _pending(c, int(args.change_id))
    await _record(c, KEEP, str(entry.id))
    return f"Kept #{entry.id}."


async def revert(c: Call, args: Any) -> str:
    entry, rows = await _pending(c, int(args.change_id))
    assert entry.id is not None
    if entry.scope == "fact":
        await c.provider_as(FactStore).revert_fact_change(
            *c.owner, entry.id, options=c.write_options()
        )
    else:
        newest = next((r for r in rows if r.scope == entry.scope), None)
        if newest is None or newest.id != entry.id:
            raise Conflict(f"your {entry.scope} changed after #{entry.id}; see /memory history")
        before = entry.version_before or 0
        if before >= 1:
            await c.provider_as(VersionedProfileStore).rollback(
                *c.owner, entry.scope, before, options=c.write_options()
            )
        elif entry.scope in ("profile", "soul"):  # nothing before it: empty again
            store = c.provider_as(ProfileStore)
            setter = store.set_profile if entry.scope == "profile" else store.set_soul
            await setter(*c.owner, "", options=c.write_options())
        else:
            raise Conflict(f"#{entry.id} has no earlier version to return to")
    await _record(c, REVERT, str(entry.id))
    return f"Reverted #{entry.id}: {one_line(_describe(entry), 200)}."


async def switch(c: Call, args: Any) -> str:
    on = args.digest == ON
    await _record(c, ON if on else OFF, "")
    if on:
        return "Review digests are on: after reflect changes your memory, I list the changes."
    return "Review digests are off; /memory review still lists reflect's changes."


async def digest_for(c: Call) -> str | None:
    """The digest to send `c.session`'s user after a reflect cycle: the review, when
    digests are on and something is undecided; else None."""
    r = await review(c, None)
    if not r.digest or not r.changes:
        return None
    return review_text_of(r, c.limit or MAX_REPLY)
