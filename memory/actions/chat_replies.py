"""What people read back from `/memory <sub>`: sentences, one message long at most
(`call.limit` characters; long listings say how much they left out). Each function
renders one action's result: (call, args, result)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from memory.actions import hit_groups, origins
from memory.actions.arguments import said_window
from memory.actions.fitting import clip, listing, one_line
from memory.actions.provenance import Why
from memory.actions.spec import Call, ContextFigures
from memory.contract.capabilities import (
    VersionedProfileStore,
)
from memory.contract.errors import StoreCorrupt
from memory.contract.facts import Fact
from memory.contract.tracing import capability, unwrap
from memory.contract.types import (
    ChangeEntry,
    ConstraintEntry,
    DescribeResult,
    ExpandResult,
    NoteEntry,
    Scope,
    SearchMode,
    SearchResult,
    SessionStats,
    minute_utc,
)
from memory.facts.citing import FactWrite
from memory.facts.render import describe_change
from memory.storage.stores import parse_constraints
from memory.text.sanitize import storable

if TYPE_CHECKING:
    from memory.storage.history import FoundMessage

log = logging.getLogger(__name__)

SHOWN_HITS = 10  # search hits listed; more are counted


def context_lines(f: ContextFigures) -> list[str]:
    """The next turn's context in the words the web console uses too."""
    compaction = (
        "automatic compaction off"
        if f.compact_above is None
        else f"automatic compaction above {f.compact_above:,}"
    )
    return [
        f"Next turn's context: {f.total:,} of {f.budget:,} tokens (system prompt "
        f"{f.system:,}, memory tool {f.tools:,}, summaries {f.summaries:,}, messages "
        f"{f.messages:,})" + (f"; the model's window is {f.window:,}" if f.window else ""),
        f"Conversation kept in context: {f.stored:,} tokens ({compaction})",
    ]


async def status(c: Call, args: Any, stats: SessionStats) -> str:
    p = c.provider
    budget = c.front.budget
    lines = [
        f"Memory provider: {p.name}",
        f"Conversation: {c.session.id}",
        f"Messages: {stats.message_count} ({stats.token_count} tokens)",
        f"Summaries: {stats.summary_count}",
    ]
    if c.front.context is not None:
        lines += context_lines(await c.front.context())
    elif budget is not None:
        compaction = (
            "auto-compaction off"
            if budget.compact_above is None
            else f"auto-compaction above {budget.compact_above:,}"
        )
        lines.append(
            f"Context now: {stats.context_tokens:,} tokens (budget {budget.tokens:,}, {compaction})"
        )
    else:
        lines.append(f"Context now: {stats.context_tokens:,} tokens")
    if stats.oldest_at:
        lines.append(f"Span: {minute_utc(stats.oldest_at)} → {minute_utc(stats.newest_at)}")
    versioned = capability(p, VersionedProfileStore)
    if versioned is not None:
        # The current version, not the session's snapshot: reading that would create the
        # snapshot, freezing the session's view before its first turn.
        version = await versioned.memory_version(c.session.user_id, c.session.agent_id)
        lines.append(f"Memory version (profile, soul, rules): {version}")
    # What the provider offers, as the sub-commands people type (never its class names):
    # the dispatch offers those open to everyone (memory.actions.commands.open_subs).
    subs = [s for s in c.offered if s not in ("status", "help")]
    lines.append("You can also use: " + ", ".join(f"/memory {s}" for s in subs))
    text = "\n".join(lines)
    usage = await _usage(c)
    return text.rstrip() + "\n\n" + "\n".join(usage) if usage else text


async def _usage(c: Call) -> list[str]:
    """What this user's model calls cost: the front-end's, not the provider's, to know."""
    if c.front.limits is None:
        return []
    try:
        return await c.front.limits.status_lines(c.session.user_id)
    except Exception:
        log.exception("could not read the usage of %s", c.session.id)
        return ["Usage: could not be read just now."]


async def search(c: Call, args: Any, hits: list[SearchResult]) -> str:
    # More hits were asked for than are shown, to say how many there are.
    asked = one_line(storable(args.text), 100)  # echoed: no lone surrogate, no NUL, one line
    dates = said_window(args)
    if not hits:
        if args.mode == SearchMode.HYBRID and getattr(unwrap(c.provider), "semantic", None):
            # Meaning was asked too: nothing near it either (far neighbours are no match).
            return f"No close matches for “{asked}”{dates}."
        return f"No matches for “{asked}”{dates}."
    lines = []
    for group in await hit_groups.by_conversation(c, hits[:SHOWN_HITS]):
        lines.append(f"From {group.name()}:")
        lines += [
            f"• [{h.source_type} {h.source_id}] {minute_utc(h.timestamp)}: "
            f"{one_line(h.content, 300)}"
            for h in group.hits
        ]
    shown = hits[:SHOWN_HITS]
    if len(hits) > len(shown):
        total = f"{len(hits)}+" if len(hits) >= args.limit else str(len(hits))
        header = f"First {len(shown)} of {total} matches for “{asked}”{dates}:"
    else:
        header = f"{len(hits)} match{'es' if len(hits) != 1 else ''} for “{asked}”{dates}:"
    footer = "\n(/memory show <id> shows one in full)"
    return listing(lines, header, c.limit - len(footer)) + footer


async def message(c: Call, args: Any, found: FoundMessage) -> str:
    where = (
        "this conversation"
        if found.session.id == c.session.id
        else (f"earlier conversation “{one_line(found.session.title, 60) or 'untitled'}”")
    )
    head = (
        f"Message {args.message_id} ({found.message.role}, "
        f"{minute_utc(found.message.created_at)}), #{found.seq} of {where}:\n"
    )
    opened = origins.link(found.origin)
    head += f"Open the original: {opened}\n\n" if opened else "\n"
    return clip(head + found.message.content, c.limit)


async def describe(c: Call, args: Any, d: DescribeResult) -> str:
    head = [
        f"Summary {d.summary_id} ({d.kind}, depth {d.depth}, {d.token_count} tokens)",
        f"Covers {d.descendant_count} messages, {minute_utc(d.earliest_at)} → "
        f"{minute_utc(d.latest_at)}",
        f"Contained in: {', '.join(d.parent_ids) or '—'}",
        f"Built from: {', '.join(d.child_ids) or '—'}",
        "",
    ]
    return clip("\n".join(head) + d.content, c.limit)


async def expand(c: Call, args: Any, r: ExpandResult) -> str:
    if r.children:
        lines = [
            f"• {ch.summary_id} ({ch.kind}, depth {ch.depth}): {one_line(ch.content, 400)}"
            for ch in r.children
        ]
        header = f"Summary {r.summary_id} was condensed from {len(r.children)} summaries:"
    else:
        lines = [
            f"• #{m.seq} {m.role} {minute_utc(m.created_at)}: {one_line(m.content, 400)}"
            for m in r.messages
        ]
        header = f"Summary {r.summary_id} covers {len(r.messages)} messages:"
    text = listing(lines, header, c.limit)
    if r.truncated:
        text += "\n(more than fits here: the listing is cut)"
    return text


async def profile(c: Call, args: Any, text: str) -> str:
    return "Your profile:\n" + text if text.strip() else "I have no profile of you yet."


async def soul(c: Call, args: Any, text: str) -> str:
    return "My soul:\n" + text if text.strip() else "No soul is set: I use my default personality."


async def constraint_list(c: Call, args: Any, items: list[ConstraintEntry]) -> str:
    if not items:
        return "You have given me no rules. Add one with /memory constrain <text>."
    return listing([f"• [{e.id}] {e.text}" for e in items], "Your rules:", c.limit)


async def constraint_added(c: Call, args: Any, items: list[ConstraintEntry]) -> str:
    added = next((e for e in reversed(items) if e.text == args.text), items[-1] if items else None)
    return f"Rule added [{added.id}]: {added.text}" if added else "Rule added."


async def constraint_removed(c: Call, args: Any, items: list[ConstraintEntry]) -> str:
    return f"Rule {args.id} removed."


async def facts(c: Call, args: Any, found: list[Fact]) -> str:
    when = f" on {args.as_of:%d %b %Y}" if args.as_of else ""
    about = f" about “{one_line(args.topic, 60)}”" if args.topic else ""
    if not found:
        return f"I hold no facts about you{when}{about}."
    lines = []
    for f in found:
        until = f" until {f.valid_to:%d %b %Y}" if f.valid_to else ""
        sources = f" (sources: {', '.join(map(str, f.evidence))})" if f.evidence else ""
        lines.append(f"• {f.key}: {f.value}, since {f.valid_from:%d %b %Y}{until}{sources}")
    head = f"What I hold about you{when}{about}:" if when else f"Facts about you{about}:"
    return listing(lines, head, c.limit)


async def fact_written(c: Call, args: Any, done: FactWrite) -> str:
    out = []
    for ch in done.changes:
        f = ch.fact
        if ch.action == "retracted":
            out.append(f"No longer true: {f.key}: {f.value}.")
        elif ch.action == "restated":
            out.append(f"I knew that already: {f.key}: {f.value}.")
        else:
            was = ", ".join(o.value for o in ch.closed)
            out.append(f"Noted: {f.key}: {f.value}" + (f" (was {was})." if was else "."))
    return " ".join(out)


async def history(c: Call, args: Any, entries: list[ChangeEntry]) -> str:
    if not entries:
        return "No changes yet."
    lines = []
    for e in entries:
        versions = f"v{e.version_before}→v{e.version_after}" if e.version_after is not None else ""
        lines.append(
            f"• {minute_utc(e.created_at)} {e.scope} {e.action} by {e.source} "
            f"{versions}: {change_text(e)}".rstrip(": ")
        )
    return listing(lines, "Recent memory changes (newest first):", c.limit)


def change_text(entry: ChangeEntry) -> str:
    """What a change did, in a line: the rules added and removed for constraints (their
    stored text is the whole list as JSON), the new text for profile and soul."""
    if entry.scope == Scope.CONSTRAINT:
        try:
            old, new = (
                {e.id: e.text for e in parse_constraints(t or "")}
                for t in (entry.before_text, entry.after_text)
            )
        except StoreCorrupt:
            pass  # shown as stored
        else:
            done = [f"added “{one_line(t, 60)}”" for i, t in new.items() if i not in old]
            done += [f"removed “{one_line(t, 60)}”" for i, t in old.items() if i not in new]
            return "; ".join(done) or "rules unchanged"
    if entry.scope == Scope.FACT:
        try:
            return one_line(describe_change(entry.before_text, entry.after_text), 160)
        except StoreCorrupt:
            pass  # shown as stored
    return one_line(entry.after_text or entry.before_text, 120)


async def rolled_back(c: Call, args: Any, new_version: int) -> str:
    return (
        f"Restored the {args.scope} as it was at version {args.version} "
        f"(now version {new_version})."
    )


async def note(c: Call, args: Any, entry: NoteEntry) -> str:
    aliases = f" (also: {', '.join(entry.aliases)})" if entry.aliases else ""
    return f"{entry.kind} {entry.name}{aliases}, {minute_utc(entry.created_at)}:\n{entry.content}"


async def notes(c: Call, args: Any, entries: list[NoteEntry]) -> str:
    if not entries:
        return "No notes or archives yet."
    lines = [
        f"• {e.kind} {e.name}"
        + (f" (also: {', '.join(e.aliases)})" if e.aliases else "")
        + f": {one_line(e.content, 100)}"
        for e in entries
    ]
    return listing(lines, f"{len(entries)} notes and archives:", c.limit)


async def why(c: Call, args: Any, found: Why | None) -> str:
    if found is None:
        return "I have not answered anything in this conversation yet."
    head = f"My last answer ({minute_utc(found.answered_at)}): {one_line(found.answer, 120)}"
    if not found.calls:
        return (
            f"{head}\n\nIt used no memory actions: it rests on the conversation I had in "
            "view and on what I keep about you (profile, rules)."
        )
    lines = [head, "", "Memory actions it used:"]
    for n, use in enumerate(found.calls, 1):
        asked = f" “{one_line(use.asked, 80)}”" if use.asked else ""
        if use.failed:
            got = "failed or found nothing"
        elif use.action == "followup_add":  # a write: it returns nothing to cite
            got = "follow-up set (/memory followups lists it)"
        elif use.returned:
            got = ", ".join(f"{r.kind} {r.id}" for r in use.returned)
        else:
            got = "nothing"
        lines.append(f"{n}. {use.action}{asked} → {got}")
    if found.cited:
        lines += ["", "It cited: " + ", ".join(f"{r.kind} {r.id}" for r in found.cited)]
    lines += ["", "/memory show <id> opens one."]
    return clip("\n".join(lines), c.limit)
