"""What the model reads back from the memory tool: terse, complete, with the ids it can
pass to the next call. Each function renders one action's result: (call, args, result)."""

from __future__ import annotations

from typing import Any

from memory.actions import hit_groups
from memory.actions.arguments import said_window
from memory.actions.fitting import one_line
from memory.actions.spec import Call
from memory.contract.capabilities import capabilities_of
from memory.contract.facts import Fact
from memory.contract.tracing import unwrap
from memory.contract.types import (
    ChangeEntry,
    ConstraintEntry,
    DescribeResult,
    ExpandResult,
    NoteEntry,
    NoteHit,
    SearchMode,
    SearchResult,
    SessionStats,
    minute_utc,
)
from memory.facts.citing import FactWrite
from memory.facts.render import describe_change

PREVIEW_CHARS = 200


def constraints(entries: list[ConstraintEntry]) -> str:
    if not entries:
        return "no constraints"
    return "\n".join(f"[{e.id}] {e.text}" for e in entries)


def note_head(n: NoteEntry) -> str:
    aliases = f" (aliases: {', '.join(n.aliases)})" if n.aliases else ""
    return f"{n.kind} {n.name!r}{aliases}, {minute_utc(n.created_at)}"


async def status(c: Call, args: Any, stats: SessionStats) -> str:
    caps = ", ".join(capabilities_of(unwrap(c.provider))) or "none"
    lines = [
        f"provider: {c.provider.name} (capabilities: {caps})",
        f"session {c.session.id}: {stats.message_count} messages "
        f"({stats.token_count} tokens), {stats.summary_count} summaries, "
        f"context {stats.context_tokens} tokens",
    ]
    if stats.oldest_at or stats.newest_at:
        lines.append(f"span: {minute_utc(stats.oldest_at)} to {minute_utc(stats.newest_at)}")
    lines.append(f"actions: {', '.join(c.offered)}")
    return "\n".join(lines)


async def search(c: Call, args: Any, hits: list[SearchResult]) -> str:
    shown = f"“{one_line(args.text, 60)}” ({args.mode}, {args.scope}){said_window(args)}"
    if not hits:
        return f"no results for {shown}"
    order = "newest first" if args.mode == SearchMode.SUBSTRING else "best first"
    lines = [f"{len(hits)} result(s) for {shown}, by conversation, {order}:"]
    for group in await hit_groups.by_conversation(c, hits):
        lines.append(f"in {group.name()}:")
        for hit in group.hits:
            head = f"[{hit.source_type} {hit.source_id}]"
            if hit.timestamp:
                head += f" {minute_utc(hit.timestamp)}"
            head += f", score {hit.score:.3g}"
            if hit.signals:
                head += f", found by {'+'.join(hit.signals)}"
            lines.append(head)
            lines.append(f"  {one_line(hit.content, 500)}")
    if any(h.source_type == "summary" for h in hits):
        lines.append("(describe or expand a summary id to see what it covers)")
    return "\n".join(lines)


async def describe(c: Call, args: Any, d: DescribeResult) -> str:
    return "\n".join(
        [
            f"summary {d.summary_id}: {d.kind}, depth {d.depth}, {d.token_count} tokens, "
            f"{d.descendant_count} descendant(s), {minute_utc(d.earliest_at)} to "
            f"{minute_utc(d.latest_at)}",
            f"parents (contain it): {', '.join(d.parent_ids) or 'none'}",
            f"children (built from): {', '.join(d.child_ids) or 'none (built from messages)'}",
            "content:",
            d.content,
        ]
    )


async def expand(c: Call, args: Any, r: ExpandResult) -> str:
    lines: list[str] = []
    if r.children:
        lines.append(f"summary {r.summary_id} was condensed from {len(r.children)} summaries:")
        for ch in r.children:
            lines.append(f"[{ch.summary_id}] {ch.kind}, depth {ch.depth}, {ch.token_count} tokens")
            lines.append(f"  {ch.content}")
    if r.messages:
        lines.append(f"summary {r.summary_id} covers {len(r.messages)} message(s):")
        for m in r.messages:
            when = f" {minute_utc(m.created_at)}" if m.created_at else ""
            lines.append(f"#{m.seq} {m.role}{when} [{m.message_id}]: {m.content}")
    if not lines:
        lines.append(f"summary {r.summary_id} has nothing to expand")
    if r.truncated:
        lines.append(
            f"(cut at token_cap {args.token_cap}: ask with a larger token_cap, or expand children)"
        )
    return "\n".join(lines)


async def profile(c: Call, args: Any, text: str) -> str:
    return text or "the profile is empty"


async def soul(c: Call, args: Any, text: str) -> str:
    return text or "the soul is empty"


async def profile_updated(c: Call, args: Any, version: int) -> str:
    return f"profile updated (version {version})"


async def soul_updated(c: Call, args: Any, version: int) -> str:
    return f"soul updated (version {version})"


def change(e: ChangeEntry) -> str:
    before = e.version_before if e.version_before is not None else "-"
    after = e.version_after if e.version_after is not None else "-"
    head = f"v{before}->v{after} {minute_utc(e.created_at)} {e.scope} {e.action} by {e.source}"
    if e.scope == "constraint":
        return head  # the rows carry whole JSON lists: constraint_list shows the state
    if e.scope == "fact":
        return (
            f"{head} [change {e.id}]: {one_line(describe_change(e.before_text, e.after_text), 300)}"
        )
    parts = [head]
    if e.before_text:
        parts.append(f"  before: {one_line(e.before_text, PREVIEW_CHARS)}")
    if e.after_text:
        parts.append(f"  after: {one_line(e.after_text, PREVIEW_CHARS)}")
    return "\n".join(parts)


async def history(c: Call, args: Any, entries: list[ChangeEntry]) -> str:
    if not entries:
        return "no changes recorded"
    return "\n".join(change(e) for e in entries)


async def rolled_back(c: Call, args: Any, new_version: int) -> str:
    return f"{args.scope} restored to version {args.version} (now version {new_version})"


async def constraint_list(c: Call, args: Any, entries: list[ConstraintEntry]) -> str:
    return constraints(entries)


async def constraint_added(c: Call, args: Any, entries: list[ConstraintEntry]) -> str:
    return "constraint added; constraints now:\n" + constraints(entries)


async def constraint_removed(c: Call, args: Any, entries: list[ConstraintEntry]) -> str:
    return f"constraint {args.id.strip()} removed; constraints now:\n" + constraints(entries)


def note_done(what: str) -> Any:
    """A note write's rendering: `what` ("added", "rewrote", ...) and the note's head."""

    async def render(c: Call, args: Any, note: NoteEntry) -> str:
        return f"{what} {note_head(note)}"

    return render


async def note(c: Call, args: Any, note: NoteEntry) -> str:
    return f"{note_head(note)}:\n{note.content}"


async def note_hits(c: Call, args: Any, hits: list[NoteHit]) -> str:
    if not hits:
        return f"no notes match {one_line(args.text, 60)!r}"
    lines = []
    for hit in hits:
        lines.append(f"{note_head(hit.entry)} score {hit.score:.3g}")
        lines.append(f"  {one_line(hit.entry.content, 500)}")
    return "\n".join(lines)


async def note_removed(c: Call, args: Any, result: None) -> str:
    return f"removed note {args.name.strip()!r}"


async def notes(c: Call, args: Any, entries: list[NoteEntry]) -> str:
    if not entries:
        return "no notes"
    return "\n".join(f"{note_head(n)}: {one_line(n.content, 80)}" for n in entries)


def fact_line(f: Fact) -> str:
    """A fact for the model: its dates, state and sources (fact_list's sources are
    citable, memory/actions/provenance.py)."""
    until = f", until {f.valid_to:%Y-%m-%d}" if f.valid_to else ""
    state = "" if f.state == "current" else f", {f.state}"
    sources = ", ".join(f"message {m}" for m in f.evidence)
    tail = f"; sources: {sources}" if sources else ""
    return f"{f.key}: {f.value} (since {f.valid_from:%Y-%m-%d}{until}{state}){tail}"


async def facts(c: Call, args: Any, found: list[Fact]) -> str:
    when = f"true on {args.as_of:%Y-%m-%d}" if args.as_of else "current"
    about = f" about “{one_line(args.topic, 60)}”" if args.topic else ""
    if not found:
        return f"no facts {when}{about}"
    return f"{len(found)} fact(s) {when}{about}:\n" + "\n".join(fact_line(f) for f in found)


_DONE = {
    "created": "recorded",
    "superseded": "recorded, superseding",
    "restated": "already known: source added to",
    "retracted": "retracted",
    "merged": "merged into",
}


async def fact_written(c: Call, args: Any, done: FactWrite) -> str:
    lines = []
    for ch in done.changes:
        f = ch.fact
        what = _DONE.get(ch.action, ch.action)
        if ch.action == "superseded":
            olds = ", ".join(o.value for o in ch.closed)
            lines.append(f"{what} {olds}: {f.key}: {f.value} (version {ch.version})")
        elif ch.action == "merged":
            olds = ", ".join(o.key for o in ch.closed) or "nothing"
            lines.append(f"{olds} {what} {f.key}: {f.value} (version {ch.version})")
        else:
            lines.append(f"{what} {f.key}: {f.value} (version {ch.version})")
        if f.evidence:
            lines[-1] += f"; sources: {', '.join(f'message {m}' for m in f.evidence)}"
        if ch.dropped_ids:
            lines.append(f"not cited (not in this memory): {', '.join(map(str, ch.dropped_ids))}")
    if done.refused:
        lines.append(
            "not cited (neither in this conversation nor returned by this turn's memory "
            f"calls): {', '.join(map(str, done.refused))}"
        )
    return "\n".join(lines)
